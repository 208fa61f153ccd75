"""A build's whole life in a workspace: ``builds`` lists them, ``location`` prints the latest
server's path, ``gc`` removes what is stale, ``model pull`` fetches the recipe's model."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from onebit_build.building.inventory import find_builds, folder_size, plan_removals, processes_using
from onebit_build.building.manifest import latest_server
from onebit_build.commands import Command
from onebit_build.core import ui
from onebit_build.core.fsutil import remove_entry
from onebit_build.core.project import ProjectRoot
from onebit_build.core.workspace import Workspace, WorkspaceLock, check_usable, kept_by_tests, sweep_killed
from onebit_build.job.model import load_for, load_pins_and_recipe, sweep_left_behind
from onebit_build.job.smoke import resolve_model
from onebit_build.options import Options


def _entries(opts: Options, project: ProjectRoot):
    pins, _ = load_pins_and_recipe(project, opts.recipe)
    ws = opts.ws
    return ws, find_builds(ws, recipes_dir=project.recipes, patches_dir=project.patches, pins=pins)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def builds(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    ws, found = _entries(opts, project)
    rows = [{"recipe": b.recipe, "key": b.key, "folder": str(b.folder), "created": b.manifest.created,
             "bytes": sum(folder_size(f) for f in b.folders), "up_to_date": not b.stale, "stale": list(b.stale)}
            for b in found]
    if opts.json:
        doc = {"kind": "onebit-build-builds", "schema": 1, "workspace": str(ws.root), "builds": rows}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    if not rows:
        ui.answer(f"no builds in {ws.root}")
        return 0
    for r in rows:
        state = "up to date" if r["up_to_date"] else "stale: " + ", ".join(r["stale"])
        ui.answer(f"{r['recipe']:<12} {r['key']}  {r['created'] or '?':<25} "
                  f"{_size(r['bytes']):>10}  {state}  {r['folder']}")
    return 0


def location(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """The latest build's llama-server, for scripts: ``$(onebit-build location)``."""
    _, recipe = load_pins_and_recipe(project, opts.recipe)
    ui.answer(str(latest_server(opts.ws, recipe.name)))
    return 0


def gc(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Remove what is stale, holding the workspace lock (a build in progress holds it too),
    never a folder a running process's program lives in."""
    ws = opts.ws
    if not ws.root.is_dir():
        ui.answer(f"nothing to remove: {ws.root} does not exist")
        return 0
    check_usable(ws.root)
    with WorkspaceLock(ws.lock_file, "onebit-build gc"):
        ws, found = _entries(opts, project)
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
    found = sweep_killed(ws, dry_run=True)
    sizes = [folder_size(p) if p.is_dir() and not p.is_symlink() else p.lstat().st_size for p in found]
    for p, size in zip(found, sizes):
        ui.info(f"  {'would remove' if dry_run else 'removing'} {p} ({_size(size)}): left behind by a run that was "
                "killed")
    if not dry_run:
        sweep_killed(ws)
    return len(found), sum(sizes)


def model_pull(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Fetch and verify the recipe's model into the workspace, and print where it is."""
    _, recipe = load_for(opts, project)
    ws = opts.ws
    check_usable(ws.root)
    t0 = time.monotonic()
    with WorkspaceLock(ws.lock_file, "onebit-build model pull"):
        sweep_left_behind(ws)
        log = ws.runs / f"model-pull-{time.strftime('%Y%m%d-%H%M%S')}.log"
        mf = resolve_model(recipe, opts, models_dir=ws.models, log=log, lock=project.models_lock)
    ui.info(f"model {mf.path.name}: sha256 {mf.sha256} ({'fetched' if mf.fetched else 'already here'},"
            f" {time.monotonic() - t0:.1f} s)")
    ui.answer(str(mf.path))
    return 0
