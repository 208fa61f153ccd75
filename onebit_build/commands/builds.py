"""``builds``: every build in the workspace (recipe, key, when built, size, up to date or stale, and the
verdict ``verify`` recorded on its outputs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="builds", help="every build in the workspace: recipe, key, when, size, up to date or stale",
                  rank=50, json="print the list as JSON (schema 1)")


def entries(opts: Options, project: ProjectRoot):
    from onebit_build.housekeeping.inventory import find_builds
    from onebit_build.job.job import load_pins_and_recipe

    pins, _ = load_pins_and_recipe(project, opts.recipe)
    ws = opts.ws
    return ws, find_builds(ws, recipes_dir=project.recipes, patches_dir=project.patches, pins=pins)


def size_text(n: int) -> str:
    """A byte count for a person: B, KiB, MiB or GiB. Pure."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    from onebit_build.housekeeping.inventory import folder_size
    from onebit_build.checking.manifest import MANIFEST_NAME
    from onebit_build.checking.verdict import STATUSES, recorded_verdict
    from onebit_build.core import ui

    ws, found = entries(opts, project)
    judged = {b.folder: recorded_verdict(b.folder / MANIFEST_NAME, b.manifest) for b in found}
    rows = [{"recipe": b.recipe, "key": b.key, "folder": str(b.folder), "built": utc_text(b.built_at()),
             "bytes": sum(folder_size(f) for f in b.folders), "up_to_date": not b.stale, "stale": list(b.stale),
             "verdict": judged[b.folder].status if judged[b.folder] else None,
             "verdict_line": judged[b.folder].line if judged[b.folder] else None}
            for b in found]
    if opts.json:
        doc = {"kind": "onebit-build-builds", "schema": 1, "workspace": str(ws.root), "builds": rows}
        ui.answer_json(doc)
        return 0
    if not rows:
        ui.answer(f"no builds in {ws.root}")
        return 0
    lines = [("recipe", "key", "built (UTC)", "size", "state", "folder")]
    for r in rows:
        label = STATUSES.get(r["verdict"] or "", "")  # what verify said of these outputs, where it was asked
        state = (label or "up to date") if r["up_to_date"] else "stale: " + ", ".join(r["stale"]) + \
            (f"; {label}" if label else "")
        lines.append((r["recipe"], r["key"], r["built"] or "?", size_text(r["bytes"]), state, r["folder"]))
    widths = [max(len(line[i]) for line in lines) for i in range(5)]
    for line in lines:
        cells = [line[0].ljust(widths[0]), line[1].ljust(widths[1]), line[2].ljust(widths[2]),
                 line[3].rjust(widths[3]), line[4].ljust(widths[4]), line[5]]
        ui.answer("  ".join(cells))
    return 0


def utc_text(when: float | None) -> str | None:
    """A time as ISO 8601 in UTC, to the second. Pure."""
    import datetime

    if when is None:
        return None
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
