"""``gc``: remove stale builds, old run folders and unused prepared trees (``--dry-run`` lists
them), never a folder a running program lives in."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.core.workspace import Workspace
    from onebit_build.options import Options

COMMAND = Command(name="gc", help="remove stale builds, old run folders and unused prepared trees (--dry-run lists"
                  " them)", rank=53)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", dest="gc_dry_run", action="store_true",
                   help="list what would be removed; remove nothing")
    p.add_argument("--test-workspaces", dest="gc_tests", action="store_true",
                   help="also remove the workspaces the project's test command keeps between runs")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Remove what is stale, holding the workspace lock (a build in progress holds it too),
    never a folder a running process's program lives in."""
    from onebit_build.building.inventory import folder_size, plan_removals, processes_using
    from onebit_build.commands.builds import entries, size_text as _size
    from onebit_build.core import ui
    from onebit_build.core.fsutil import remove_entry
    from onebit_build.core.workspace import WorkspaceLock, check_usable

    ws = opts.ws
    if not ws.root.is_dir():
        ui.answer(f"nothing to remove: {ws.root} does not exist")
        return 0
    check_usable(ws.root)
    with WorkspaceLock(ws.lock_file, "onebit-build gc"):
        ws, found = entries(opts, project)
        in_use = processes_using([f for b in found for f in b.folders])
        removals = plan_removals(found, ws=ws, in_use=in_use)
        total = 0
        for r in removals:
            size = folder_size(r.path)
            total += size
            ui.info(f"  {'would remove' if opts.gc_dry_run else 'removing'} {r.path} ({_size(size)}): {r.why}")
            if not opts.gc_dry_run:
                remove_entry(r.path)  # a run folder that is a link: the link goes, its target stays
        for f in sorted(in_use):
            ui.info(f"  kept {f}: a running program is in it")
        killed = _killed_runs_leftovers(ws, dry_run=opts.gc_dry_run)
        total += killed[1]
    total += _test_workspaces(ws.root, remove=opts.gc_tests, dry_run=opts.gc_dry_run)
    verb = "would free" if opts.gc_dry_run else "freed"
    ui.answer(f"{verb} {_size(total)} in {len(removals) + killed[0]} folder(s) and file(s) of {ws.root}")
    return 0


def _test_workspaces(busy: Path, *, remove: bool, dry_run: bool) -> int:
    """The test command's shared workspaces: listed with their size; with ``--test-workspaces``
    removed (each under its own workspace lock: never while a test run uses it). Returns the
    bytes freed (or that would be)."""
    from onebit_build.building.inventory import folder_size
    from onebit_build.commands.builds import size_text as _size
    from onebit_build.core import ui
    from onebit_build.core.workspace import WorkspaceLock, kept_by_tests

    kept = [p for p in kept_by_tests() if p.resolve() != busy.resolve()]  # not the one gc is working on
    sizes = [folder_size(p) if p.is_dir() and not p.is_symlink() else p.lstat().st_size for p in kept]
    if not kept:
        return 0
    if not remove:
        ui.info(f"  kept the test command's workspaces ({_size(sum(sizes))}): {', '.join(str(p) for p in kept)};"
                " 'onebit-build gc --test-workspaces' removes them")
        return 0
    for p, size in zip(kept, sizes):
        ui.info(f"  {'would remove' if dry_run else 'removing'} {p} ({_size(size)}): kept by the test command")
        if dry_run:
            continue
        if p.is_dir() and not p.is_symlink():
            with WorkspaceLock(p / "onebit-build.lock", "onebit-build gc --test-workspaces"):
                shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)
    return sum(sizes)


def _killed_runs_leftovers(ws: Workspace, *, dry_run: bool) -> tuple[int, int]:
    """List, and unless ``dry_run`` remove, what killed runs left (partial downloads, joins,
    trees). Returns how many and their bytes."""
    from onebit_build.building.inventory import folder_size
    from onebit_build.commands.builds import size_text as _size
    from onebit_build.core import ui
    from onebit_build.core.workspace import sweep_killed

    found = sweep_killed(ws, dry_run=True)
    sizes = [folder_size(p) if p.is_dir() and not p.is_symlink() else p.lstat().st_size for p in found]
    for p, size in zip(found, sizes):
        ui.info(f"  {'would remove' if dry_run else 'removing'} {p} ({_size(size)}): left behind by a run that was "
                "killed")
    if not dry_run:
        sweep_killed(ws)
    return len(found), sum(sizes)
