"""Samples and their statistics: one cell per variant and prompt, valid only when every
round's answer held, with best / median / min / max and the change against the baseline."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from onebit_build.running.bench.judge import Verdict
from onebit_build.running.bench.plan import Variant
from onebit_build.running.bench.settings import TEXT_KEPT


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One timed request and the verdict on its answer."""

    round: int
    variant: str
    prompt: str
    prompt_tok_s: float | None
    decode_tok_s: float | None
    prompt_n: int | None
    predicted_n: int | None
    text: str
    valid: bool
    why: str  # "" when valid
    note: str = ""  # e.g. a near tie that ended the comparison early



@dataclass(frozen=True, kw_only=True)
class Stat:
    best: float
    median: float
    low: float
    high: float
    n: int


@dataclass(frozen=True, kw_only=True)
class Cell:
    """The summary of one variant on one prompt over all rounds."""

    variant: str
    prompt: str
    valid: bool
    reason: str  # why it is invalid; "" when valid
    decode: Stat | None  # only when valid
    prompt_speed: Stat | None  # only when valid
    decode_vs_base_pct: float | None
    prompt_vs_base_pct: float | None
    note: str = ""  # e.g. answers that took a near tie



def make_sample(*, rnd: int, variant: str, prompt: str, data: Any, verdict: Verdict) -> Sample:
    timings = data.get("timings") if isinstance(data, dict) and isinstance(data.get("timings"), dict) else {}

    def num(key: str) -> float | None:
        v = timings.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    text = str(data.get("content", "")) if isinstance(data, dict) else ""
    return Sample(
        round=rnd, variant=variant, prompt=prompt,
        prompt_tok_s=num("prompt_per_second"), decode_tok_s=num("predicted_per_second"),
        prompt_n=timings.get("prompt_n"), predicted_n=timings.get("predicted_n"),
        text=text[:TEXT_KEPT], valid=verdict.valid, why=verdict.why, note=verdict.note,
    )


def failed_sample(*, rnd: int, variant: str, prompt: str, why: str) -> Sample:
    return Sample(round=rnd, variant=variant, prompt=prompt, prompt_tok_s=None, decode_tok_s=None,
                  prompt_n=None, predicted_n=None, text="", valid=False, why=why)


# --------------------------------------------------------------------------- statistics


def stat(values: list[float]) -> Stat:
    return Stat(best=max(values), median=statistics.median(values), low=min(values), high=max(values), n=len(values))


def pct_vs(value: float, base: float) -> float:
    return (value / base - 1.0) * 100.0


def summarize(variants: tuple[Variant, ...], prompts: tuple[str, ...], samples: tuple[Sample, ...], rounds: int) -> tuple[Cell, ...]:
    """One cell per variant and prompt. A cell is valid only when every round gave a valid
    sample; its figures are then best / median / min / max over the rounds, and the
    difference of its median against the baseline's median (when that is valid)."""
    by_key: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        by_key.setdefault((s.variant, s.prompt), []).append(s)
    raw: dict[tuple[str, str], Cell] = {}
    for v in variants:
        for p in prompts:
            got = sorted(by_key.get((v.name, p), []), key=lambda s: s.round)
            bad = [s for s in got if not s.valid]
            missing = sorted(set(range(1, rounds + 1)) - {s.round for s in got})
            reason = ""
            if bad:
                reason = f"round {bad[0].round}: {bad[0].why}"
                if len(bad) > 1:
                    reason += f" ({len(bad)} of {rounds} rounds invalid)"
            elif missing:
                reason = f"no answer in round {missing[0]}"
            if reason:
                raw[(v.name, p)] = Cell(variant=v.name, prompt=p, valid=False, reason=reason, decode=None,
                                        prompt_speed=None, decode_vs_base_pct=None, prompt_vs_base_pct=None)
                continue
            dec = stat([s.decode_tok_s for s in got if s.decode_tok_s is not None])
            pps = stat([s.prompt_tok_s for s in got if s.prompt_tok_s is not None])
            noted = [s for s in got if s.note]
            note = f"{noted[0].note} ({len(noted)} of {rounds} rounds)" if noted else ""
            raw[(v.name, p)] = Cell(variant=v.name, prompt=p, valid=True, reason="", decode=dec, prompt_speed=pps,
                                    decode_vs_base_pct=None, prompt_vs_base_pct=None, note=note)
    base = variants[0].name
    out = []
    for v in variants:
        for p in prompts:
            c = raw[(v.name, p)]
            b = raw[(base, p)]
            if c.valid and b.valid and c.decode and b.decode and c.prompt_speed and b.prompt_speed:
                c = replace(c, decode_vs_base_pct=pct_vs(c.decode.median, b.decode.median),
                            prompt_vs_base_pct=pct_vs(c.prompt_speed.median, b.prompt_speed.median))
            out.append(c)
    return tuple(out)
