"""verify-run's verdict as JUnit test cases: one per part, and one per device and prompt or
metric inside answers and speed, each with its evidence and the time of its step."""

from __future__ import annotations

from onebit_build.running.junit import Case, classname, evidence_text
from onebit_build.verify_run.verdict import RunVerdict


def junit_cases(v: RunVerdict, *, recipe: str, times: dict[str, float] | None = None) -> list[Case]:
    """One case per part (class ``<recipe>``), and one per device and prompt or metric inside
    answers and speed (class ``<recipe>.<device>``), each with its evidence and the time of
    the step that made it (``times``: ``artifacts``, ``answers/DEVICE``, ``speed/DEVICE``; a
    device's prompts share its answers step, its two metrics its speed rounds). A part that
    was not judged (speed under --no-speed) is a skipped case saying so."""
    times = times or {}
    cases = []
    for p in v.parts:
        spent = sum(s for k, s in times.items() if k == p.name or k.startswith(f"{p.name}/"))
        cases.append(Case(name=p.name, classname=recipe, ok=p.ok, message=p.summary if not p.ok or not p.judged else "",
                          seconds=spent, skipped=not p.judged, detail="\n".join([p.summary, *p.lines])))
        if p.name == "answers":
            for c in p.data.get("comparisons", []):
                cases.append(Case(name=f"answer:{c['prompt']}", classname=classname(recipe, c["device"]), ok=c["same"],
                                  message=c["difference"], seconds=times.get(f"answers/{c['device']}", 0.0),
                                  detail=evidence_text(c["difference"] or "the same answer", c)))
        if p.name == "speed":
            for d in p.data.get("per_device", []):
                msg = (f"{d['verdict']}, new/working {d['median_ratio']:.3f}" if d.get("median_ratio") is not None
                       else d["verdict"])
                cases.append(Case(name=f"speed:{d['metric']}", classname=classname(recipe, d["device"]), ok=d["ok"],
                                  message="" if d["ok"] else msg, seconds=times.get(f"speed/{d['device']}", 0.0),
                                  detail=evidence_text(msg, d)))
    return cases
