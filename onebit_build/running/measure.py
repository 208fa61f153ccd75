"""What smoke and bench share when they time llama-server: one answer with its timings, the
judges of an answer's text, one timed sample and the statistics over several.

A speed counts only when the answer it was measured on held, so a sample carries both its
figures and the verdict on its text. Everything here is pure: a server answer in, a value out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, kw_only=True)
class Completion:
    """One /completion answer: the text, the token ids (when asked for) and the server's
    ``timings`` (prompt and generated token counts, tokens per second)."""

    text: str
    tokens: tuple[int, ...] | None = None
    prompt_n: int | None = None
    predicted_n: int | None = None
    prompt_tok_s: float | None = None
    decode_tok_s: float | None = None
    stop_type: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Completion:
        timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
        ids = data.get("tokens")
        tokens = tuple(ids) if isinstance(ids, list) and all(_count(t) is not None for t in ids) else None
        stop = data.get("stop_type")
        return cls(
            text=str(data.get("content", "")),
            tokens=tokens,
            prompt_n=_count(timings.get("prompt_n")),
            predicted_n=_count(timings.get("predicted_n")),
            prompt_tok_s=_number(timings.get("prompt_per_second")),
            decode_tok_s=_number(timings.get("predicted_per_second")),
            stop_type=stop if isinstance(stop, str) else None,
        )


# --------------------------------------------------------------------------- judges


def answer_contains(text: str, expect: str) -> bool:
    """The smoke rule: the expected text appears anywhere in the answer."""
    return expect in text


def answer_starts_with(text: str, prefix: str) -> bool:
    """The bench rule: the answer starts with the expected prefix. An answer shorter than
    the prefix (fewer tokens asked than the prefix covers) holds when it is the prefix's start."""
    if not prefix:
        return False
    if len(text) >= len(prefix):
        return text.startswith(prefix)
    return bool(text) and prefix.startswith(text)


def timing_problem(answer: Completion, tokens: int) -> str:
    """Why the figures of an answer cannot be used ("" when they can): it must have
    generated exactly ``tokens`` tokens and report both speeds."""
    if answer.predicted_n != tokens:
        return f"generated {answer.predicted_n!r} tokens, not {tokens}"
    for key, value in (("prompt_per_second", answer.prompt_tok_s), ("predicted_per_second", answer.decode_tok_s)):
        if value is None or value <= 0:
            return f"no usable timings ({key} is {value!r})"
    return ""


# --------------------------------------------------------------------------- samples and statistics


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One timed request: its speeds and whether its answer held. Where it was taken
    (round, variant, prompt) is for the reader; smoke leaves round and variant empty."""

    prompt_tok_s: float | None
    decode_tok_s: float | None
    prompt_n: int | None
    predicted_n: int | None
    text: str  # the start of the generated text
    valid: bool  # the answer held and the figures are usable
    why: str  # why not; "" when valid
    note: str = ""  # something a valid answer did that a reader should know
    round: int = 0
    variant: str = ""
    prompt: str = ""


def timed_sample(answer: Completion, *, why: str, text: str, note: str = "", round: int = 0, variant: str = "",
                 prompt: str = "") -> Sample:
    """The sample of a judged answer (``why`` empty when it held) with ``text``, the part
    of its text the caller keeps."""
    return Sample(
        prompt_tok_s=answer.prompt_tok_s, decode_tok_s=answer.decode_tok_s, prompt_n=answer.prompt_n,
        predicted_n=answer.predicted_n, text=text, valid=not why, why=why, note=note,
        round=round, variant=variant, prompt=prompt,
    )


def failed_sample(*, why: str, round: int = 0, variant: str = "", prompt: str = "") -> Sample:
    """A request that got no answer to judge."""
    return Sample(prompt_tok_s=None, decode_tok_s=None, prompt_n=None, predicted_n=None, text="", valid=False, why=why,
                  round=round, variant=variant, prompt=prompt)


@dataclass(frozen=True, kw_only=True)
class Stat:
    """Speed figures (tok/s) of several samples: their median, their spread and how many."""

    median: float
    low: float
    high: float
    n: int

    @property
    def best(self) -> float:
        """The fastest figure (for a speed, higher is better)."""
        return self.high

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat:
        vals = list(values)
        if not vals:
            raise ValueError("Stat.of: no values")
        return cls(median=statistics.median(vals), low=min(vals), high=max(vals), n=len(vals))


def decode_stat(samples: Iterable[Sample]) -> Stat:
    return Stat.of(s.decode_tok_s for s in samples if s.decode_tok_s is not None)


def prompt_stat(samples: Iterable[Sample]) -> Stat:
    return Stat.of(s.prompt_tok_s for s in samples if s.prompt_tok_s is not None)


def pct_vs(value: float, base: float) -> float:
    """How much ``value`` is above (+) or below (-) ``base``, in percent."""
    return (value / base - 1.0) * 100.0
