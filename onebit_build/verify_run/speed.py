"""The speed verdict of a verification run: is the new build on par with the working one?

Definition (docs/verification.md, "On par, precisely", says the same):

1. Both builds are served in interleaved rounds, each round on a fresh server of each
   build, both up at once: each prompt is asked of one build, then of the other (working
   first in odd rounds, new first in even ones), so the two figures of a prompt were taken
   seconds apart and a drift of the machine's load touches both alike. Only speeds whose
   answers held count. Prompt speed is judged on the prompts of at least 32 tokens
   (:mod:`.speed_rounds`): a few tokens take milliseconds, which time the server's
   overhead and the scheduler, not prompt processing.
2. Per round *i*, the ratio ``r_i`` is the geometric mean, over the prompts both builds
   answered validly in that round, of ``new tok/s / working tok/s``; a round is one
   sample (the prompts of one pair of servers are not independent of each other).
3. On the log scale, ``m`` is the Hodges-Lehmann estimate of the centre of the
   ``log r_i`` (the median of all pairwise averages ``(log r_i + log r_j) / 2``, i <= j)
   and ``[lo, hi]`` its signed-rank (Wilcoxon) confidence interval: the ``d``-th smallest
   and ``d``-th largest of those averages for the largest ``d`` whose coverage
   ``1 - 2 P(W <= d-1)``, ``W`` the signed-rank statistic of n values, is at least
   :data:`CONFIDENCE`; then back to ratios. It assumes only that the log-ratios scatter
   symmetrically (the same build on both sides, asked in alternating order, does), keeps
   a wild round from moving it far, and is much narrower than the interval of the median
   for the same rounds (rounds of 1, 2, ..., 9: 3..7 instead of 2..8); 5 rounds are the
   fewest that reach 90 % (their minimum and maximum: 93.75 %).
   The *noise* is the half-width ``(hi - lo) / 2``: how far the rounds themselves leave
   the ratio uncertain. More rounds narrow it.
4. With the tolerance ``t`` (recipe-settable, default 3 %):

   - **on par**: ``|m - 1| <= t`` and noise ``<= t``;
   - **faster**: ``m > 1 + t`` and ``lo > 1`` (the whole interval is above 1: the
     difference is outside the noise);
   - **slower**: ``m < 1 - t`` and ``hi < 1``;
   - otherwise undecided: the rounds scatter too much for the difference they show.

5. Sequential: after the first ``rounds`` (at least :data:`MIN_ROUNDS`), one more round
   at a time is run and the interval looked at again, until every metric is decided or
   the next round would end past the time budget (``verification.budget_s``,
   ``--speed-budget``); more rounds narrow the interval, so a busy machine takes longer
   rather than failing. Only when the budget is spent undecided is the verdict **too
   noisy**, with the rounds it took and the machine's load average while they ran. (Each
   look is a 90 % interval; looking after every round makes a wrong "slower" or "on par"
   somewhat likelier than 10 %, the price of stopping early.)

   With fewer than :data:`MIN_ROUNDS` valid rounds there is no interval of the required
   coverage, and the verdict is **too few rounds**.

Only "on par" and "faster" let a verification pass. Everything here is pure.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from onebit_build.spec.recipe import VERIFY_MIN_ROUNDS
from onebit_build.core.errors import ConfigError

DEFAULT_TOLERANCE = 0.03
CONFIDENCE = 0.90
# The fewest rounds that reach CONFIDENCE (5: their minimum and maximum, 93.75 %); the number
# lives in spec.recipe, where the recipe's verification.rounds is checked against it.
MIN_ROUNDS = VERIFY_MIN_ROUNDS
EPSILON = 1e-9

ON_PAR = "on par"
FASTER = "faster"
SLOWER = "slower"
TOO_NOISY = "too noisy"
TOO_FEW = "too few rounds"
PASSING = (ON_PAR, FASTER)
DECIDED = (ON_PAR, FASTER, SLOWER)


@dataclass(frozen=True, kw_only=True)
class SpeedBudget:
    """How the rounds of one device went: how many, in what time, against which budget,
    and the 1-minute load average while they ran (None where it cannot be read)."""

    rounds: int
    seconds: float
    budget_s: float
    load: float | None = None
    cores: int | None = None

    def words(self) -> str:
        load = f"; load average {self.load:.1f} on {self.cores or '?'} cores" if self.load is not None else ""
        return f"{self.rounds} rounds in {self.seconds:.0f} s of a {self.budget_s:.0f} s budget{load}"


@dataclass(frozen=True, kw_only=True)
class Measure:
    """One timed answer: a build's speed on one prompt in one round (None when the answer
    did not hold or the server gave no figure)."""

    round: int
    side: str  # "new" or "working"
    prompt: str
    tok_s: float | None


@dataclass(frozen=True, kw_only=True)
class RoundRatio:
    round: int
    ratio: float  # geometric mean over the prompts of new / working
    prompts: int  # how many prompts both builds answered validly in that round


@dataclass(frozen=True, kw_only=True)
class SpeedVerdict:
    """The verdict on one metric (decode or prompt tok/s) on one device."""

    label: str
    tolerance: float
    ratios: tuple[RoundRatio, ...]
    median: float | None = None  # the estimated ratio: the Hodges-Lehmann centre of the round ratios
    low: float | None = None  # the confidence interval of the ratio (signed-rank, on the log scale)
    high: float | None = None
    coverage: float | None = None  # the interval's coverage (>= CONFIDENCE when decided)
    new_median: float | None = None  # tok/s, for the reader
    working_median: float | None = None
    rounds_asked: int = 0
    budget: SpeedBudget | None = None  # how the sequential rounds went (verify-run)

    @property
    def ok(self) -> bool:
        return self.label in PASSING

    @property
    def noise(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2.0

    def sentence(self) -> str:
        """One line for a person: the label, the ratio and its spread."""
        n = len(self.ratios)
        if self.median is None:
            return f"{self.label}: no round with valid answers from both builds"
        spread = f"{_pct(self.low)}..{_pct(self.high)}" if self.low is not None else "n/a"
        cover = f", {self.coverage:.0%} interval" if self.coverage is not None else ""
        base = (f"new/working {self.median:.3f} ({_signed(self.median)}; spread {spread}{cover}; {n} "
                f"round{'s' if n != 1 else ''})")
        if self.label == TOO_FEW:
            return f"{self.label}: {base}; needs {MIN_ROUNDS} valid rounds to decide"
        took = f"; {self.budget.words()}" if self.budget is not None else ""
        if self.label == TOO_NOISY:
            fix = "the budget is spent: raise --speed-budget or run" if self.budget is not None else "run more rounds"
            return f"{self.label} to decide: {base}; tolerance ±{self.tolerance:.0%}{took}: {fix} on a quieter machine"
        return f"{self.label}: {base}; tolerance ±{self.tolerance:.0%}{took}"

    def to_dict(self) -> dict:
        return {
            "verdict": self.label, "ok": self.ok, "tolerance": self.tolerance,
            "median_ratio": self.median, "interval": [self.low, self.high] if self.low is not None else None,
            "coverage": self.coverage, "noise": self.noise, "rounds_asked": self.rounds_asked,
            "rounds_valid": len(self.ratios), "new_median_tok_s": self.new_median,
            "working_median_tok_s": self.working_median,
            "rounds_run": self.budget.rounds if self.budget else None,
            "seconds": self.budget.seconds if self.budget else None,
            "budget_s": self.budget.budget_s if self.budget else None,
            "load_average": self.budget.load if self.budget else None,
            "per_round": [{"round": r.round, "ratio": r.ratio, "prompts": r.prompts} for r in self.ratios],
        }


def _pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3f}"


def _signed(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100:+.1f} %"


def check_rounds(rounds: int, given: str = "--rounds") -> None:
    """Refuse fewer speed rounds than a verdict needs, in one line naming what gave them."""
    if rounds < MIN_ROUNDS:
        raise ConfigError(f"{given} {rounds}: a speed verdict needs at least {MIN_ROUNDS} rounds",
                          hint=f"pass {given} {MIN_ROUNDS} or more")


def round_ratios(measures: Iterable[Measure]) -> tuple[RoundRatio, ...]:
    """Per round, the geometric mean over prompts of new / working, using only prompts
    where both builds have a figure in that round. Rounds without any such prompt are left
    out (they are no sample)."""
    table: dict[int, dict[str, dict[str, float]]] = {}
    for m in measures:
        if m.tok_s is None or not m.tok_s > 0 or not math.isfinite(m.tok_s):
            continue
        if m.side not in ("new", "working"):
            raise ValueError(f"measure side must be 'new' or 'working', not {m.side!r}")
        table.setdefault(m.round, {}).setdefault(m.prompt, {})[m.side] = m.tok_s
    out = []
    for rnd in sorted(table):
        logs = [math.log(v["new"] / v["working"]) for v in table[rnd].values() if "new" in v and "working" in v]
        if logs:
            out.append(RoundRatio(round=rnd, ratio=math.exp(sum(logs) / len(logs)), prompts=len(logs)))
    return tuple(out)


def signed_rank_counts(n: int) -> list[int]:
    """For n values, how many of the 2**n sign patterns give each signed-rank sum W (the sum
    of the ranks of the positive ones), W = 0 .. n(n+1)/2. Pure."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for w, c in enumerate(counts):
            grown[w + rank] += c
        counts = grown
    return counts


def coverage(n: int, d: int) -> float:
    """Probability that the interval from the d-th smallest to the d-th largest of the
    n(n+1)/2 pairwise averages of n values holds the centre of their (symmetric) distribution."""
    below = sum(signed_rank_counts(n)[:d]) / 2.0 ** n
    return max(0.0, 1.0 - 2.0 * below)


def walsh_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """The Hodges-Lehmann estimate of the centre of ``values`` (the median of all pairwise
    averages (x_i + x_j) / 2, i <= j) and its signed-rank confidence interval: the d-th
    smallest and d-th largest average for the largest d whose coverage is at least
    ``confidence`` (d = 1 when none is: then the coverage returned is below it). It assumes
    only that the values are spread symmetrically about their centre.
    Returns (estimate, low, high, coverage)."""
    if not values:
        raise ValueError("walsh_interval: no values")
    n = len(values)
    averages = sorted((values[i] + values[j]) / 2.0 for i in range(n) for j in range(i, n))
    counts = signed_rank_counts(n)
    total, below, best_d, best_cov = 2.0 ** n, counts[0], 1, 1.0 - 2.0 * counts[0] / 2.0 ** n
    for d in range(2, len(averages) // 2 + 1):
        below += counts[d - 1]
        cov = 1.0 - 2.0 * below / total
        if cov < confidence:
            break
        best_d, best_cov = d, cov
    return statistics.median(averages), averages[best_d - 1], averages[-best_d], max(0.0, best_cov)


def log_interval(ratios: list[float]) -> tuple[float, float, float, float]:
    """:func:`walsh_interval` of the log-ratios, back as ratios (a ratio and its inverse lie
    symmetrically about 1 on that scale). Returns (estimate, low, high, coverage)."""
    est, low, high, cov = walsh_interval([math.log(r) for r in ratios])
    return math.exp(est), math.exp(low), math.exp(high), cov


def decide(median: float, low: float, high: float, tolerance: float) -> str:
    """The label for an estimated ratio and its interval (see the module's definition)."""
    noise = (high - low) / 2.0
    tolerance += EPSILON  # a ratio exactly at the tolerance is within it, despite rounding
    if abs(median - 1.0) <= tolerance and noise <= tolerance:
        return ON_PAR
    if median > 1.0 + tolerance and low > 1.0:
        return FASTER
    if median < 1.0 - tolerance and high < 1.0:
        return SLOWER
    return TOO_NOISY


def label_of(values: list[float], tolerance: float) -> str:
    """The label of the round ratios as they are now: decided or not (see the module). Pure."""
    if len(values) < MIN_ROUNDS:
        return TOO_FEW
    estimate, low, high, _ = log_interval(values)
    return decide(estimate, low, high, tolerance)


def another_round(labels: Iterable[str], *, valid_rounds: int, rounds_done: int, min_rounds: int, elapsed_s: float,
                  budget_s: float) -> bool:
    """Whether verify-run runs one more interleaved round. Always until ``min_rounds``; then
    while some metric is undecided and one more round (as long as the average one so far)
    still ends within ``budget_s``; never when no round at all gave valid answers (more of
    the same will not). Pure."""
    if rounds_done < min_rounds:
        return True
    if valid_rounds == 0 or all(label in DECIDED for label in labels):
        return False
    return elapsed_s + elapsed_s / max(rounds_done, 1) <= budget_s


def speed_verdict(measures: Iterable[Measure], *, tolerance: float = DEFAULT_TOLERANCE, rounds_asked: int = 0,
                  budget: SpeedBudget | None = None) -> SpeedVerdict:
    """The verdict on one metric of one device from its timed answers. With a ``budget``
    (sequential rounds), an undecided interval is "too noisy" only when the budget is spent."""
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be between 0 and 1, not {tolerance!r}")
    measures = list(measures)
    ratios = round_ratios(measures)
    medians = {side: _median([m.tok_s for m in measures if m.side == side and m.tok_s is not None])
               for side in ("new", "working")}
    common = dict(tolerance=tolerance, ratios=ratios, new_median=medians["new"], working_median=medians["working"],
                  rounds_asked=rounds_asked, budget=budget)
    if not ratios:
        return SpeedVerdict(label=TOO_FEW, **common)
    values = [r.ratio for r in ratios]
    estimate, low, high, cov = log_interval(values)
    return SpeedVerdict(label=label_of(values, tolerance), median=estimate, low=low, high=high, coverage=cov, **common)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
