"""The verdict of a verification run, from its five parts.

VERIFIED (exit 0) only when every part holds:

1. **artifacts**: every kernel artifact of the recipe's collectors is byte-identical in both
   builds (N/N); a recipe without kernel collectors compares its output binaries instead
   (for a CPU build the compiled code is the kernel). Each difference is named, with the
   toolchain fact that explains it where one differs;
2. **answers**: on every device, every prompt got the same greedy text from both builds;
3. **speed**: on every device, decode and prompt tok/s are "on par" or "faster"
   (:mod:`.speed` defines them);
4. **provenance**: every server of both builds mapped only its build's own files;
5. **numerics**: on every device, the new build's next-token distributions over the recipe's
   evaluation text are within the recipe's ``numerics.budgets.reference`` of the working
   build's (KL divergence, perplexity ratio, top-1 agreement; running/numerics.py), even
   when every greedy answer agrees. A recipe without a numerical check has a numerics part
   that is not judged.

Otherwise NOT VERIFIED (exit 11), naming each failed part. A run told not to measure speed
(``--no-speed``) has a speed part that is not judged: it neither passes nor fails the run,
and the title and headline say so ("VERIFIED (speed not measured)"). Pure: results in,
verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from onebit_build.core.errors import SUCCESS, VerifyError
from onebit_build.verify_run.answers import AnswerComparison
from onebit_build.verify_run.mapped_files import Provenance
from onebit_build.verify_run.speed import SpeedVerdict

VERIFIED = "VERIFIED"
NOT_VERIFIED = "NOT VERIFIED"


ARTIFACTS = "artifacts"
ANSWERS = "answers"
SPEED = "speed"
PROVENANCE = "provenance"
NUMERICS = "numerics"
PARTS = (ARTIFACTS, ANSWERS, SPEED, PROVENANCE, NUMERICS)
SPEED_NOT_MEASURED = "not measured (--no-speed)"


@dataclass(frozen=True, kw_only=True)
class Part:
    name: str
    ok: bool
    summary: str  # one line
    lines: tuple[str, ...] = ()  # the details a person reads
    data: dict[str, Any] = field(default_factory=dict)  # the same, for verification.json
    judged: bool = True  # False: not checked at all (speed under --no-speed); ok is then True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "judged": self.judged, "summary": self.summary,
                "lines": list(self.lines), **self.data}

    @property
    def status(self) -> str:
        """What a person reads beside the part's name: ok, FAILED or skipped."""
        return "skipped" if not self.judged else "ok" if self.ok else "FAILED"


@dataclass(frozen=True, kw_only=True)
class RunVerdict:
    parts: tuple[Part, ...]

    @property
    def verified(self) -> bool:
        return bool(self.parts) and all(p.ok for p in self.parts)

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if not p.ok)

    @property
    def not_judged(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if not p.judged)

    @property
    def label(self) -> str:
        return VERIFIED if self.verified else NOT_VERIFIED

    @property
    def title(self) -> str:
        """The label with the failed parts and the parts not judged, e.g. ``NOT VERIFIED
        (artifacts)`` or ``VERIFIED (speed not measured)``."""
        said = [", ".join(self.failed)] if self.failed else []
        said += [f"{name} not measured" for name in self.not_judged]
        return self.label + (f" ({'; '.join(said)})" if said else "")

    @property
    def exit_code(self) -> int:
        return SUCCESS if self.verified else VerifyError.exit_code  # errors.py owns the exit codes

    def headline(self) -> str:
        if self.verified:
            return f"{self.title}: " + "; ".join(p.summary if p.judged else f"{p.name}: {p.summary}"
                                                   for p in self.parts)
        skipped = "".join(f"; {p.name}: {p.summary}" for p in self.parts if not p.judged)
        return f"{NOT_VERIFIED}: " + "; ".join(f"{p.name}: {p.summary}" for p in self.parts if not p.ok) + skipped


def verdict(parts: Iterable[Part]) -> RunVerdict:
    parts = tuple(parts)
    names = [p.name for p in parts]
    if sorted(names) != sorted(PARTS):
        raise ValueError(f"a verdict needs exactly the parts {', '.join(PARTS)}; got {', '.join(names)}")
    order = {n: i for i, n in enumerate(PARTS)}
    return RunVerdict(parts=tuple(sorted(parts, key=lambda p: order[p.name])))


# --------------------------------------------------------------------------- the parts


def artifacts_part(kernel: Sequence[Any], outputs: Sequence[Any]) -> Part:
    """From comparisons (``building.verify.SetComparison``) of the kernel-artifact sets and
    of the output binaries. The kernel sets decide when the recipe has any; otherwise the
    output binaries do. The other comparison is shown, not counted."""
    deciding, shown = (kernel, outputs) if kernel else (outputs, ())
    if not deciding:
        return Part(name=ARTIFACTS, ok=False,
                    summary="nothing to compare: neither kernel artifacts nor output binaries were recorded")
    ok = all(c.ok for c in deciding)
    summary = "; ".join(c.summary() for c in deciding)
    if not kernel:
        summary += " (the recipe collects no kernel artifacts: its output binaries are compared)"
    lines: list[str] = []
    for c in deciding:
        lines += c.lines()
    for c in shown:
        lines += [f"(not counted) {line}" if i == 0 else line for i, line in enumerate(c.lines())]
    data = {"counted": [c.to_dict() for c in deciding], "shown": [c.to_dict() for c in shown]}
    return Part(name=ARTIFACTS, ok=ok, summary=summary, lines=tuple(lines), data=data)


def answers_part(comparisons: Sequence[AnswerComparison], *, not_compared: dict[str, str] | None = None) -> Part:
    """Every device and prompt gave the same text from both builds. ``not_compared`` names
    devices that could not be compared and why (a failure: the builds differ there)."""
    not_compared = dict(not_compared or {})
    bad = [c for c in comparisons if not c.same]
    devices = sorted({c.device for c in comparisons})
    prompts = sorted({c.prompt for c in comparisons})
    ok = bool(comparisons) and not bad and not not_compared
    if ok:
        summary = f"same text for {len(prompts)} prompt{'s' if len(prompts) != 1 else ''} on {', '.join(devices)}"
    elif not comparisons and not not_compared:
        summary = "no answers were compared"
    else:
        parts = [f"{c.device}/{c.prompt}: {c.difference}" for c in bad]
        parts += [f"{dev}: {why}" for dev, why in not_compared.items()]
        summary = f"{len(bad) + len(not_compared)} differ: " + "; ".join(parts)
    lines = tuple(f"{'same   ' if c.same else 'DIFFERS'} {c.device}/{c.prompt}: {c.new.text!r}"
                  + ("" if c.same else f" vs working {c.working.text!r}; {c.difference}")
                  for c in comparisons) + tuple(f"NOT COMPARED {dev}: {why}" for dev, why in not_compared.items())
    return Part(name=ANSWERS, ok=ok, summary=summary, lines=lines,
                data={"comparisons": [c.to_dict() for c in comparisons], "not_compared": not_compared})


def speed_part(verdicts: dict[tuple[str, str], SpeedVerdict]) -> Part:
    """``verdicts`` per (device, metric), metric "decode" or "prompt"."""
    if not verdicts:
        return Part(name=SPEED, ok=False, summary="no speed was measured")
    ok = all(v.ok for v in verdicts.values())
    lines = tuple(f"{dev} {metric}: {v.sentence()}" for (dev, metric), v in verdicts.items())
    shown = [(k, v) for k, v in verdicts.items() if not v.ok] or list(verdicts.items())
    summary = "; ".join(f"{dev} {metric} {v.label}" + (f" {v.median:.3f}" if v.median is not None else "")
                        + (f" after {v.budget.rounds} rounds" if v.budget is not None else "")
                        for (dev, metric), v in shown)
    data = {"per_device": [{"device": dev, "metric": metric, **v.to_dict()} for (dev, metric), v in verdicts.items()]}
    return Part(name=SPEED, ok=ok, summary=summary, lines=lines, data=data)


def speed_not_measured() -> Part:
    """The speed part of a run that measured no speed (``--no-speed``): not judged."""
    return Part(name=SPEED, ok=True, judged=False, summary=SPEED_NOT_MEASURED,
                lines=(f"speed: {SPEED_NOT_MEASURED}: no speed rounds were run; the verdict does not judge speed",),
                data={"measured": False, "per_device": []})


@dataclass(frozen=True, kw_only=True)
class NumericsComparison:
    """The new build against the working one on one device: the figures, or why there are none."""

    device: str
    figures: dict[str, Any] | None  # numerics.Figures.to_dict() of new against working
    missed: tuple[str, ...] = ()  # each figure outside its budget, in words
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.figures is not None and not self.missed and not self.error


def numerics_part(comparisons: Sequence[NumericsComparison], budget: dict[str, float]) -> Part:
    """Every device's distributions within ``budget`` of the working build's."""
    if not comparisons:
        return Part(name=NUMERICS, ok=False, summary="no device was scored")
    ok = all(c.ok for c in comparisons)
    lines = []
    for c in comparisons:
        if c.figures is None:
            lines.append(f"{c.device}: not compared: {c.error}")
            continue
        f = c.figures
        said = (f"ppl x{f['ppl_ratio']:.5f}, KLD mean {f['kld_mean']:.3g} p99 {f['kld_p99']:.3g}, "
                f"top-1 {f['top1']:.1%} over {f['positions']} positions")
        lines.append(f"{c.device}: {'; '.join(c.missed) + ' — ' if c.missed else 'within budget: '}{said}")
    shown = [line for c, line in zip(comparisons, lines) if not c.ok] or lines
    return Part(name=NUMERICS, ok=ok, summary="; ".join(shown), lines=tuple(lines),
                data={"budget": budget, "per_device": [{"device": c.device, "figures": c.figures,
                                                        "missed": list(c.missed), "error": c.error}
                                                       for c in comparisons]})


def numerics_not_checked(why: str) -> Part:
    """The numerics part of a run whose recipe has no numerical check: not judged."""
    return Part(name=NUMERICS, ok=True, judged=False, summary=why, lines=(f"numerics: {why}",),
                data={"per_device": []})


def provenance_part(results: Sequence[Provenance]) -> Part:
    if not results:
        return Part(name=PROVENANCE, ok=False, summary="no live server was inspected")
    bad = [r for r in results if not r.ok]
    ok = not bad
    if ok:
        summary = f"{len(results)} live server{'s' if len(results) != 1 else ''}: only the builds' own files mapped"
    else:
        summary = "; ".join(r.summary() for r in _first_per_side_device(bad))
    lines: list[str] = []
    for r in _first_per_side_device(results):
        lines.append(r.summary())
        lines += [f"  {c.line()}" for c in r.checks if not c.ok]
        lines += [f"  note: {n}" for n in r.notes]
    return Part(name=PROVENANCE, ok=ok, summary=summary, lines=tuple(lines),
                data={"servers": [r.to_dict() for r in results]})


def _first_per_side_device(results: Iterable[Provenance]) -> list[Provenance]:
    """One result per (side, device): every round's server is checked, but a person needs
    each distinct finding once."""
    seen: dict[tuple[str, str, tuple[str, ...]], Provenance] = {}
    for r in results:
        key = (r.side, r.device, tuple(c.line() for c in r.failures) + ((r.error,) if r.error else ()))
        seen.setdefault(key, r)
    return list(seen.values())
