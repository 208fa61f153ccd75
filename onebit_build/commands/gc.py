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
    from onebit_build.commands._options import Options

COMMAND = Command(name="gc", help="remove stale builds, old run folders and unused prepared trees (--dry-run lists"
                  " them)", rank=53)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", dest="gc_dry_run", action="store_true",
                   help="list what would be removed; remove nothing")
    p.add_argument("--test-workspaces", dest="gc_tests", action="store_true",
                   help="also remove the workspaces the project's test command keeps between runs")
    p.add_argument("--jit-cache", dest="gc_jit_cache", action="store_true",
                   help="also remove the entries of the run-time kernel caches the recipes name (e.g. hrx0's "
                        "~/.cache/1bit/hrx-jit): safe, a kernel is compiled again on first use")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Remove what is stale, holding the workspace lock (a build in progress holds it too),
    never a folder a running process's program lives in."""
    from onebit_build.housekeeping.inventory import folder_size, plan_removals, processes_using
    from onebit_build.commands.builds import entries, size_text as _size
    from onebit_build.core import ui
    from onebit_build.core.fsutil import remove_entry
    from onebit_build.core.workspace import WorkspaceLock, check_usable

    dry, tests = opts.args.get("gc_dry_run") is True, opts.args.get("gc_tests") is True
    ws = opts.ws
    if not ws.root.is_dir():
        freed = _jit_caches(project, remove=opts.args.get("gc_jit_cache") is True, dry_run=dry)
        verb = "would free" if dry else "freed"
        ui.answer(f"nothing to remove: {ws.root} does not exist"
                  + (f"; {verb} {_size(freed)} of kernel cache entries" if freed else ""))
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
            ui.info(f"  {'would remove' if dry else 'removing'} {r.path} ({_size(size)}): {r.why}")
            if not dry:
                remove_entry(r.path)  # a run folder that is a link: the link goes, its target stays
        for f in sorted(in_use):
            ui.info(f"  kept {f}: a running program is in it")
        killed = _killed_runs_leftovers(ws, dry_run=dry)
        total += killed[1]
    total += _test_workspaces(ws.root, remove=tests, dry_run=dry)
    total += _other_programs(dry_run=dry)
    total += _jit_caches(project, remove=opts.args.get("gc_jit_cache") is True, dry_run=dry)
    verb = "would free" if dry else "freed"
    ui.answer(f"{verb} {_size(total)} in {len(removals) + killed[0]} folder(s) and file(s) of {ws.root}")
    return 0


def _test_workspaces(busy: Path, *, remove: bool, dry_run: bool) -> int:
    """The test command's shared workspaces: listed with their size; with ``--test-workspaces``
    removed (each under its own workspace lock: never while a test run uses it). Returns the
    bytes freed (or that would be)."""
    from onebit_build.housekeeping.inventory import folder_size
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


def _other_programs(*, dry_run: bool) -> int:
    """The compiler launchers kept for another sccache than this installation's (an upgrade
    leaves the old one): removed, unless a running process's program is in it. Returns the
    bytes freed (or that would be)."""
    import os

    from onebit_build.building.cache.compiler import find_programs
    from onebit_build.building.cache.kept import other_programs
    from onebit_build.housekeeping.inventory import processes_using
    from onebit_build.commands.builds import size_text as _size
    from onebit_build.core import ui

    found = other_programs(os.environ, find_programs(dict(os.environ))["sccache"])
    in_use = processes_using(found)
    total = 0
    for p in found:
        if p.resolve() in in_use:
            ui.info(f"  kept {p}: a running program is in it")
            continue
        size = sum(f.lstat().st_size for f in p.iterdir() if f.lstat().st_nlink == 1)  # a link frees nothing
        total += size
        ui.info(f"  {'would remove' if dry_run else 'removing'} {p} ({_size(size)}): a compiler launcher this "
                "installation no longer uses")
        if not dry_run:
            shutil.rmtree(p)
    return total


def _killed_runs_leftovers(ws: Workspace, *, dry_run: bool) -> tuple[int, int]:
    """List, and unless ``dry_run`` remove, what killed runs left (partial downloads, joins,
    trees). Returns how many and their bytes."""
    from onebit_build.housekeeping.inventory import folder_size
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


def _jit_caches(project: ProjectRoot, *, remove: bool, dry_run: bool) -> int:
    """The run-time kernel caches the project's recipes name (each folder once): listed with
    their size; with ``--jit-cache`` their entries removed. Returns the bytes freed (or that
    would be). A recipe that does not load is left out here (``recipes`` names its error)."""
    import os

    from onebit_build.commands.builds import size_text as _size
    from onebit_build.core import ui
    from onebit_build.core.errors import OnebitError
    from onebit_build.job.job import load_pins_and_recipe
    from onebit_build.running.jit_cache import remove_entries, scan

    seen: dict[Path, list[str]] = {}
    caches = []
    for path in sorted(project.recipes.glob("*.yaml")):
        try:
            _, recipe = load_pins_and_recipe(project, path.stem)
        except OnebitError:
            continue
        cache = scan(recipe.jit_cache, os.environ) if recipe.jit_cache is not None else None
        if cache is None or not cache.entries:  # none there: nothing to say
            continue
        if cache.folder not in seen:
            caches.append(cache)
        seen.setdefault(cache.folder, []).append(recipe.name)
    for cache in caches:
        whose = ", ".join(seen[cache.folder])
        what = f"{cache.folder} ({len(cache.entries)} entries, {_size(cache.size)}; {cache.where})"
        if not remove:
            ui.info(f"  kept the run-time kernel cache of {whose}: {what}; 'onebit-build gc --jit-cache' removes its "
                    "entries")
            continue
        ui.info(f"  {'would remove' if dry_run else 'removing'} the entries of {whose}'s kernel cache {what}")
        if not dry_run:
            remove_entries(cache)
    return sum(c.size for c in caches) if remove else 0
