"""One cell per variant and prompt over the rounds: valid only when every round's answer
held, with the speeds' statistics and the change of their medians against the baseline."""

from __future__ import annotations

from dataclasses import dataclass, replace

from onebit_build.running.bench.plan import Variant
from onebit_build.running.measure import Sample, Stat, decode_stat, pct_vs, prompt_stat


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


def summarize(variants: tuple[Variant, ...], prompts: tuple[str, ...], samples: tuple[Sample, ...],
              rounds: int) -> tuple[Cell, ...]:
    """One cell per variant and prompt. A cell is valid only when every round gave a valid
    sample; its figures are then best / median / min / max over the rounds, and the
    difference of its median against the baseline's median (when that is valid)."""
    by_key: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        by_key.setdefault((s.variant, s.prompt), []).append(s)
    raw = {(v.name, p): _cell(v.name, p, sorted(by_key.get((v.name, p), []), key=lambda s: s.round), rounds)
           for v in variants for p in prompts}
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


def _cell(variant: str, prompt: str, got: list[Sample], rounds: int) -> Cell:
    """The cell of one variant and prompt from its samples, in round order."""
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
        return Cell(variant=variant, prompt=prompt, valid=False, reason=reason, decode=None,
                    prompt_speed=None, decode_vs_base_pct=None, prompt_vs_base_pct=None)
    noted = [s for s in got if s.note]
    note = f"{noted[0].note} ({len(noted)} of {rounds} rounds)" if noted else ""
    return Cell(variant=variant, prompt=prompt, valid=True, reason="", decode=decode_stat(got),
                prompt_speed=prompt_stat(got), decode_vs_base_pct=None, prompt_vs_base_pct=None, note=note)
