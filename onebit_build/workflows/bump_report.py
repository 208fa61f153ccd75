"""What a ``pins bump`` did, kept as it goes and written at the end whatever happened:
``bump-report.json`` (versioned, for tools and workflows), ``bump-report.md`` (for a person,
and a pull request's text) and a table on the terminal."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from onebit_build.sources.reapply import Reapplied
from onebit_build.core import ui
from onebit_build.core.errors import OnebitError
from onebit_build.core.fsutil import atomic_write_text, write_state
from onebit_build.spec.pins import Pin
from onebit_build.spec.pins_edit import PinMove

REPORT_KIND = "onebit-build/pin-bump-report"
REPORT_SCHEMA = 1
GATES = ("fetch", "patches", "build", "verify", "smoke", "bench", "write")
PASSED, FAILED, INTERRUPTED, NOT_RUN = "passed", "failed", "interrupted", "not run"


@dataclass
class Gate:
    name: str
    status: str = NOT_RUN
    seconds: float = 0.0
    note: str = ""


@dataclass
class BumpRecord:
    """The run as it went: the moves, each patch's outcome, each gate, what was written."""

    recipe: str
    old: dict[str, Pin] = field(default_factory=dict)
    moves: tuple[PinMove, ...] = ()
    reapplied: list[Reapplied] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=lambda: [Gate(name=g) for g in GATES])
    written: list[str] = field(default_factory=list)
    stale_references: list[str] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)  # smoke report, bench table: paths in the run folder
    bench_table: str = ""
    nothing_to_move: bool = False
    error: OnebitError | None = None
    pins_before: dict[str, str] = field(default_factory=dict)  # file name -> sha256 at the start
    pins_after: dict[str, str] = field(default_factory=dict)

    def gate(self, name: str) -> Gate:
        return next(g for g in self.gates if g.name == name)

    @property
    def failed_gate(self) -> str | None:
        """The gate that failed, or that was running when the run was interrupted."""
        return next((g.name for g in self.gates if g.status in (FAILED, INTERRUPTED)), None)

    @property
    def result(self) -> str:
        if self.nothing_to_move:
            return "nothing to move"
        if any(g.status == INTERRUPTED for g in self.gates):
            return "interrupted"
        return "moved" if self.gate("write").status == PASSED else "refused"


@contextmanager
def gate(record: BumpRecord, name: str) -> Iterator[Gate]:
    """Run one gate: timed, shown as a stage, recorded passed or failed (the error goes on)."""
    g = record.gate(name)
    t0 = time.monotonic()
    try:
        with ui.stage(f"gate {name}") as st:
            yield g
            st["note"] = g.note
        g.status = PASSED
    except OnebitError as exc:
        g.status, g.note = FAILED, str(exc)
        record.error = exc
        raise
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM): the report names the gate it stopped
        g.status, g.note = INTERRUPTED, "interrupted (Ctrl-C)"
        raise
    finally:
        g.seconds = time.monotonic() - t0


def move_rows(record: BumpRecord) -> list[dict[str, Any]]:
    rows = []
    for m in record.moves:
        old = record.old[m.name]
        old_sdist = next((x for x in old.mirrors if m.sdist is not None and x.package == m.sdist.package), None)
        rows.append({"source": m.name, "from": old.commit, "to": m.commit,
                     "sdist_from": old_sdist.label.removeprefix("pypi-sdist:") if old_sdist else None,
                     "sdist_to": m.sdist.label.removeprefix("pypi-sdist:") if m.sdist else None,
                     "sdist_sha256": m.sdist.sha256 if m.sdist else None,
                     "build_number_from": old.build_number,
                     "build_number_to": m.build_number if m.build_number is not None else old.build_number})
    return rows


def report_doc(record: BumpRecord) -> dict[str, Any]:
    err = record.error
    return {
        "result": record.result,
        "failed_gate": record.failed_gate,
        "error": str(err) if err else None,
        "hint": err.hint if err else None,
        "recipe": record.recipe,
        "moves": move_rows(record),
        "patches": [o.to_dict() for r in record.reapplied for o in r.outcomes],
        "patch_notes": [f"{r.source}: {r.note}" for r in record.reapplied if r.note],
        "gates": [{"name": g.name, "status": g.status, "seconds": round(g.seconds, 1), "note": g.note}
                  for g in record.gates],
        "written": record.written,
        "pins_byte_identical": record.pins_before == record.pins_after if record.result != "moved" else False,
        "pins_sha256": {"before": record.pins_before, "after": record.pins_after},
        "stale_references": record.stale_references,
        "links": record.links,
    }


def patch_table(record: BumpRecord) -> list[str]:
    """Each patch's outcome, one line each (its details indented below it)."""
    rows = [(o.patch, o.source, o.status, o.detail) for r in record.reapplied for o in r.outcomes]
    if not rows:
        return []
    w = max(len(r[0]) for r in rows)
    out = [f"  {'patch':<{w}}  {'source':<12} outcome"]
    for name, source, status, detail in rows:
        out.append(f"  {name:<{w}}  {source:<12} {status}")
        out += [f"  {'':<{w}}    {d}" for d in detail]
    out += [f"  note: {r.source}: {r.note}" for r in record.reapplied if r.note]
    return out


def render_markdown(record: BumpRecord) -> str:
    doc = report_doc(record)
    head = {"moved": "moved", "refused": f"REFUSED at gate {doc['failed_gate']}",
            "interrupted": f"INTERRUPTED at gate {doc['failed_gate']}",
            "nothing to move": "nothing to move"}[record.result]
    out = [f"# Pin bump ({record.recipe}): {head}", ""]
    for m in doc["moves"]:
        sdist = f" (sdist {m['sdist_from']} -> {m['sdist_to']}, sha256 {m['sdist_sha256']})" if m["sdist_to"] else ""
        out.append(f"- {m['source']}: {m['from'][:12]} -> {m['to'][:12]}{sdist}; build number "
                   f"{m['build_number_from']} -> {m['build_number_to']}")
    if record.error is not None:
        out += ["", f"**{record.error}**", "", f"Remedy: {record.error.hint or '-'}"]
    if record.result in ("refused", "interrupted"):
        same = "byte-identical" if doc["pins_byte_identical"] else "CHANGED"
        out += ["", f"pins.yaml and pins.lock are {same} after the run."]
    out += ["", "## Patches", "", "| patch | source | outcome | detail |", "|---|---|---|---|"]
    for p in doc["patches"]:
        out.append(f"| {p['patch']} | {p['source']} | {p['status']} | {'; '.join(p['detail']).replace('|', '/')} |")
    out += [f"- {n}" for n in doc["patch_notes"]]
    out += ["", "## Gates", "", "| gate | result | seconds | note |", "|---|---|---:|---|"]
    for g in doc["gates"]:
        out.append(f"| {g['name']} | {g['status']} | {g['seconds']} | {g['note'].replace('|', '/')[:300]} |")
    if record.bench_table:
        out += ["", "## Old against new (bench)", "", record.bench_table.rstrip()]
    if record.written:
        out += ["", "## Written", ""] + [f"- `{w}`" for w in record.written]
    if record.stale_references:
        out += ["", "## References to record again (they name the old commit)", ""]
        out += [f"- `{s}`" for s in record.stale_references]
    out += ["", "Links: " + ", ".join(f"[{k}]({v})" for k, v in record.links.items())] if record.links else []
    return "\n".join(out) + "\n"


def write_report(run_dir: Path, record: BumpRecord) -> tuple[Path, Path]:
    js, md = run_dir / "bump-report.json", run_dir / "bump-report.md"
    write_state(js, REPORT_KIND, REPORT_SCHEMA, report_doc(record))
    atomic_write_text(md, render_markdown(record))
    return js, md
