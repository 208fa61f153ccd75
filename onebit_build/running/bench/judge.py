"""Whether a timed answer counts: it must start with the expected prefix.

The prefix is the text of the first ``prefix_tokens`` tokens the baseline generated in its
first round (or a prefix given with ``--expect``). One divergence is excused: at a *near
tie*, where the baseline's two most likely tokens were within ``tie_margin`` (natural-log
probability) and the variant took the second one. Correct backends sum in different
orders, so such a token may legitimately flip; the comparison then ends there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onebit_build.running.bench.settings import DEFAULTS
from onebit_build.running.measure import Completion, answer_starts_with, timing_problem


@dataclass(frozen=True, kw_only=True)
class Step:
    """One generated token of the baseline and how sure the model was of it."""

    id: int
    text: str
    runner_up: int | None  # the second most likely token
    runner_up_text: str
    margin: float | None  # log-probability of the chosen token minus the runner-up's


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """The prefix every greedy answer of a prompt must start with."""

    prompt: str
    text: str
    tokens: int | None  # how many generated tokens it covers; None when given as text
    source: str  # "baseline NAME round 1" or "given (FILE)"
    steps: tuple[Step, ...] = ()  # per token, when recorded from a baseline answer

    def near_ties(self, margin: float) -> list[tuple[int, Step]]:
        return [(i, st) for i, st in enumerate(self.steps) if st.margin is not None and st.margin < margin]


def common_prefix(a: str, b: str) -> str:
    """The longest start ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def divergence(text: str, expected: str) -> str:
    """Where and how ``text`` leaves ``expected``, for a person."""
    at = len(common_prefix(text, expected))
    before = f" after {text[max(0, at - 12):at]!r}" if at else ""
    return f"diverged at character {at}{before}: got {text[at:at + 20]!r}, expected {expected[at:at + 20]!r}"


@dataclass(frozen=True, kw_only=True)
class BenchVerdict:
    """Whether one timed answer counts."""

    valid: bool
    why: str = ""  # why it is invalid
    note: str = ""  # something a valid answer did that a reader should know


def first_difference(got: tuple[int, ...], steps: tuple[Step, ...]) -> int | None:
    """Index of the first generated token that is not the baseline's; None when all agree."""
    for i, (g, st) in enumerate(zip(got, steps)):
        if g != st.id:
            return i
    return None


def judge_answer(answer: Completion, *, expected: Expectation | None, tokens: int,
                 tie_margin: float = DEFAULTS.tie_margin) -> BenchVerdict:
    """Verdict on one timed answer. It must have generated ``tokens`` tokens with usable
    timings, and its text must start with the expected prefix; where it does not, the
    divergence is excused only at a near tie: the first differing token is the baseline's
    runner-up there, and the baseline's margin was below ``tie_margin``."""
    problem = timing_problem(answer, tokens)
    if problem:
        return BenchVerdict(valid=False, why=problem)
    if expected is None:
        return BenchVerdict(valid=False,
                            why="no reference answer (the baseline's first round gave none for this prompt)")
    if answer_starts_with(answer.text, expected.text):
        return BenchVerdict(valid=True)
    why = divergence(answer.text, expected.text)
    got = answer.tokens
    if not expected.steps or got is None:
        return BenchVerdict(valid=False, why=why)
    at = first_difference(got, expected.steps)
    if at is None:
        return BenchVerdict(valid=False, why=why)
    st = expected.steps[at]
    if st.margin is None:
        return BenchVerdict(valid=False, why=f"{why} (token {at})")
    if got[at] == st.runner_up and st.margin < tie_margin:
        return BenchVerdict(valid=True, note=f"near tie at token {at}: took {st.runner_up_text!r} over {st.text!r} "
                                        f"(baseline margin {st.margin:.3f})")
    taken = "the baseline's runner-up" if got[at] == st.runner_up else "not even the baseline's runner-up"
    return BenchVerdict(valid=False, why=f"{why} (token {at}, {taken}; baseline margin there {st.margin:.3f}, ties are "
                                    f"excused below {tie_margin:g})")


def steps_from_probs(probs: Any, ids: list[int]) -> list[Step]:
    """Per generated token: the chosen token and its runner-up with the log-probability
    margin, from ``completion_probabilities`` of an ``n_probs: 2`` request. Only positions
    where that request chose the same tokens as ``ids`` carry a margin."""
    out: list[Step] = []
    agree = True
    for i, tid in enumerate(ids):
        entry = probs[i] if isinstance(probs, list) and i < len(probs) and isinstance(probs[i], dict) else {}
        agree = agree and entry.get("id") == tid
        top = entry.get("top_logprobs") if agree else None
        text = str(entry.get("token", "")) if agree else ""
        runner, runner_text, margin = None, "", None
        if (isinstance(top, list) and len(top) >= 2 and all(isinstance(t, dict) for t in top[:2])
                and top[0].get("id") == tid):
            a, b = top[0].get("logprob"), top[1].get("logprob")
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                runner, runner_text, margin = top[1].get("id"), str(top[1].get("token", "")), float(a) - float(b)
        out.append(Step(id=tid, text=text, runner_up=runner, runner_up_text=runner_text, margin=margin))
    return out
