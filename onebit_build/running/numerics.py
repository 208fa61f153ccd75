"""The numbers behind the answers: a server's next-token distributions over a fixed text,
scored position by position and compared with a base run. Everything here is pure.

A *scored position* is one request to the server: the text's first ``pos`` tokens as the
prompt, and the server's answer for the next one: the log-probability of the text's real next
token (exact: llama-server computes it over the whole vocabulary) and the ``k`` most likely
tokens with theirs. The requests follow :func:`schedule`: each round first sends a *jump*, a
batch of more tokens than ``n_ubatch`` evaluated at once on top of what the server holds
(several micro-batches, the path of upstream's wrong-logits-beyond-n_ubatch bugs), then
single *steps* of one token each. Every position after the first jump is computed from keys
and values that long batches wrote, so a batch that is wrong shows in every later position.

Figures against a base run (the committed reference, or this box's CPU run):
- perplexity over the scored positions, and its ratio to the base's;
- KL divergence KL(base || run) per position, over the base's top-k tokens with the rest of
  the vocabulary as one more outcome; by the data-processing inequality this is a lower bound
  of the full-vocabulary divergence, exact as k grows (docs/smoke.md compares it with
  upstream's ``llama-perplexity --kl-divergence``);
- top-1 agreement: the share of positions whose most likely token is the base's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

# Probabilities below this are treated as this: a top-k list from the server can end in
# tokens whose probability underflows to 0 in float32.
_FLOOR = 1e-30


@dataclass(frozen=True, kw_only=True)
class Scored:
    """The server's answer at one position of the text."""

    pos: int  # tokens before it: the prompt length of its request
    target: int  # the text's token at ``pos``
    logprob: float  # log P(target | the first pos tokens)
    top: tuple[tuple[int, float], ...]  # (token, log-probability), most likely first
    batch: int  # tokens the server evaluated for this request (its timings' prompt_n)

    def to_json(self) -> list[Any]:
        return [self.pos, self.target, round(self.logprob, 6), self.batch,
                [[t, round(lp, 6)] for t, lp in self.top]]

    @classmethod
    def from_json(cls, row: Any) -> Scored:
        """One row as :meth:`to_json` writes it; ValueError when it is not."""
        if not (isinstance(row, list) and len(row) == 5 and isinstance(row[4], list)):
            raise ValueError(f"a scored position is [pos, target, logprob, batch, top], not {str(row)[:60]}")
        pos, target, logprob, batch = (_int(row[0]), _int(row[1]), _real(row[2]), _int(row[3]))
        top = []
        for pair in row[4]:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise ValueError(f"a top-k entry is [token, logprob], not {str(pair)[:40]}")
            top.append((_int(pair[0]), _real(pair[1])))
        return cls(pos=pos, target=target, logprob=logprob, top=tuple(top), batch=batch)


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"expected a whole number >= 0, got {v!r}")
    return v


def _real(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v > 1e-6:
        raise ValueError(f"expected a log-probability (a finite number <= 0), got {v!r}")
    return float(min(v, 0.0))


# --------------------------------------------------------------------------- the requests


@dataclass(frozen=True, kw_only=True)
class Request:
    length: int  # prompt length: tokens[:length]; the position scored is ``length``
    batch: int  # tokens the server must evaluate for it (its prompt cache holds the rest)


def schedule(*, rounds: int, jump: int, steps: int) -> tuple[Request, ...]:
    """The requests of one scoring run, in order: per round a jump of ``jump`` tokens, then
    ``steps`` single tokens. ``rounds * (steps + 1)`` positions are scored."""
    out: list[Request] = []
    length = 0
    for _ in range(rounds):
        length += jump
        out.append(Request(length=length, batch=jump))
        for _ in range(steps):
            length += 1
            out.append(Request(length=length, batch=1))
    return tuple(out)


def tokens_needed(*, rounds: int, jump: int, steps: int) -> int:
    """The text's tokens a run reads: every prompt and the token after the last one."""
    return rounds * (jump + steps) + 1


# --------------------------------------------------------------------------- figures


def perplexity(scored: Sequence[Scored]) -> float:
    if not scored:
        raise ValueError("perplexity of no positions")
    return math.exp(-sum(s.logprob for s in scored) / len(scored))


def kl_divergence(base: Scored, run: Scored) -> float:
    """KL(base || run) over the base's top-k tokens and "every other token" as one outcome.

    A token of the base's list that is not in the run's list gets what the run leaves below
    its own last entry, shared evenly among such tokens (at most the run's last entry each):
    a bound the run's list allows, never a guess above it. Two identical lists give exactly 0."""
    run_lp = dict(run.top)
    missing = [t for t, _ in base.top if t not in run_lp]
    if missing:
        rest = max(0.0, 1.0 - sum(math.exp(lp) for lp in run_lp.values()))
        cap = math.exp(run.top[-1][1]) if run.top else rest
        each = max(min(cap, rest / len(missing)), _FLOOR)
        for t in missing:
            run_lp[t] = math.log(each)
    kl = 0.0
    base_mass = run_mass = 0.0
    for t, lp in base.top:
        p = math.exp(lp)
        kl += p * (lp - run_lp[t])
        base_mass += p
        run_mass += math.exp(run_lp[t])
    p_rest, q_rest = max(0.0, 1.0 - base_mass), max(0.0, 1.0 - run_mass)
    if p_rest > _FLOOR and p_rest != q_rest:
        kl += p_rest * (math.log(p_rest) - math.log(max(q_rest, _FLOOR)))
    return max(kl, 0.0)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between the sorted values."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    at = (len(s) - 1) * q / 100.0
    lo = math.floor(at)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (at - lo)


@dataclass(frozen=True, kw_only=True)
class Figures:
    """A run against its base, over the same scored positions."""

    positions: int
    ppl: float
    ppl_base: float
    kld_mean: float
    kld_p99: float
    kld_max: float
    top1: float  # share of positions whose most likely token is the base's
    kld: tuple[float, ...] = ()  # per position, in order (for the plot)

    @property
    def ppl_ratio(self) -> float:
        return self.ppl / self.ppl_base

    def to_dict(self, *, per_position: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "positions": self.positions, "ppl": round(self.ppl, 6), "ppl_base": round(self.ppl_base, 6),
            "ppl_ratio": round(self.ppl_ratio, 6), "kld_mean": _sig(self.kld_mean), "kld_p99": _sig(self.kld_p99),
            "kld_max": _sig(self.kld_max), "top1": round(self.top1, 6),
        }
        if per_position:
            out["kld"] = [_sig(v) for v in self.kld]
        return out


def _sig(v: float) -> float:
    return float(f"{v:.6g}")


def compare(base: Sequence[Scored], run: Sequence[Scored]) -> Figures:
    """``run`` judged against ``base``; ValueError when they did not score the same tokens at
    the same positions (another text, tokenizer or schedule)."""
    if not base or len(base) != len(run):
        raise ValueError(f"the runs scored {len(run)} and {len(base)} positions")
    for b, r in zip(base, run):
        if (b.pos, b.target) != (r.pos, r.target):
            raise ValueError(f"position {r.pos} (token {r.target}) is not the base's position {b.pos} "
                             f"(token {b.target}): another text, tokenizer or schedule")
    kld = tuple(kl_divergence(b, r) for b, r in zip(base, run))
    agree = sum(1 for b, r in zip(base, run) if b.top and r.top and b.top[0][0] == r.top[0][0])
    return Figures(positions=len(run), ppl=perplexity(run), ppl_base=perplexity(base),
                   kld_mean=sum(kld) / len(kld), kld_p99=percentile(kld, 99.0), kld_max=max(kld),
                   top1=agree / len(run), kld=kld)


# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True, kw_only=True)
class NumericsBudget:
    """The most a run may differ from its base."""

    kld_mean: float
    kld_p99: float
    ppl_ratio: float  # |ppl / ppl_base - 1| at most this
    top1: float  # top-1 agreement at least this

    def to_dict(self) -> dict[str, float]:
        return {"kld_mean": self.kld_mean, "kld_p99": self.kld_p99, "ppl_ratio": self.ppl_ratio, "top1": self.top1}


@dataclass(frozen=True, kw_only=True)
class Miss:
    figure: str
    value: float
    budget: float

    def __str__(self) -> str:
        if self.figure == "top1":
            return f"top-1 agreement {self.value:.4f} < budget {self.budget:g}"
        if self.figure == "ppl_ratio":
            return f"perplexity ratio {self.value:.6f} differs from 1 by more than budget {self.budget:g}"
        return f"{self.figure.replace('_', ' ')} {self.value:.4g} > budget {self.budget:g}"


def misses(fig: Figures, budget: NumericsBudget) -> tuple[Miss, ...]:
    """Every figure outside its budget, the worst kinds first (a wrong answer, then the tail)."""
    out = []
    if fig.top1 < budget.top1:
        out.append(Miss(figure="top1", value=fig.top1, budget=budget.top1))
    if abs(fig.ppl_ratio - 1.0) > budget.ppl_ratio:
        out.append(Miss(figure="ppl_ratio", value=fig.ppl_ratio, budget=budget.ppl_ratio))
    if fig.kld_mean > budget.kld_mean:
        out.append(Miss(figure="kld_mean", value=fig.kld_mean, budget=budget.kld_mean))
    if fig.kld_p99 > budget.kld_p99:
        out.append(Miss(figure="kld_p99", value=fig.kld_p99, budget=budget.kld_p99))
    return tuple(out)


# --------------------------------------------------------------------------- the server's answer


def scored_from_reply(data: Mapping[str, Any], request: Request, target: int) -> Scored:
    """One /completion answer (``n_predict`` 1, ``n_probs`` k, the target forced by a logit
    bias) as a scored position; ValueError naming what is missing or wrong."""
    probs = data.get("completion_probabilities")
    if not isinstance(probs, list) or not probs or not isinstance(probs[0], dict):
        raise ValueError("the answer has no completion_probabilities (does this llama-server take n_probs?)")
    first = probs[0]
    if first.get("id") != target:
        raise ValueError(f"the server sampled token {first.get('id')!r}, not the forced text token {target}")
    top = []
    for entry in first.get("top_logprobs") or []:
        if not isinstance(entry, dict):
            raise ValueError("a top_logprobs entry is not an object")
        top.append((_int(entry.get("id")), _real(entry.get("logprob"))))
    if not top:
        raise ValueError("the answer lists no top_logprobs")
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    batch = timings.get("prompt_n")
    return Scored(pos=request.length, target=target, logprob=_real(first.get("logprob")), top=tuple(top),
                  batch=batch if isinstance(batch, int) and not isinstance(batch, bool) else -1)


def completion_body(prompt: Sequence[int], target: int, *, top_k: int) -> dict[str, Any]:
    """The request that scores ``target`` after ``prompt``: one token, forced to the text's
    (a logit bias the sampler applies after the probabilities are taken), the raw
    distribution's top ``top_k``, the prompt cache on (only the new tokens are evaluated)."""
    return {"prompt": list(prompt), "n_predict": 1, "n_probs": top_k, "post_sampling_probs": False,
            "temperature": 0.0, "cache_prompt": True, "logit_bias": [[target, 1000.0]], "samplers": ["temperature"]}


def batches_as_planned(scored: Iterable[Scored], requests: Sequence[Request], ubatch: int) -> str:
    """Why the server did not evaluate the batches the schedule meant ("" when it did): every
    jump evaluated at least its tokens as one batch (several micro-batches of ``ubatch``), and
    every step a short batch, at most one micro-batch. A step may evaluate a few tokens more
    than one: for a model with sliding-window attention (Gemma 3) llama-server goes back to
    its last context checkpoint, a few tokens before the end of the prompt. A server that
    evaluates every prompt whole (no prompt cache) still gives the right numbers, but
    tests other batches than this check claims."""
    for s, r in zip(scored, requests):
        if r.batch > 1 and s.batch < r.batch:
            return f"the jump to position {r.length} evaluated {s.batch} tokens, not at least {r.batch}"
        if r.batch == 1 and not 1 <= s.batch <= ubatch:
            return (f"the step to position {r.length} evaluated {s.batch} tokens, not a short batch "
                    f"(1 to {ubatch})")
    return ""
