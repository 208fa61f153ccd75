"""``model pull``: fetch and verify the recipe's model into the workspace (nothing is built)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="model", help="model tools", rank=52, action="pull")


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import global_options

    sub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    global_options(sub.add_parser("pull", help="fetch and verify the recipe's model (nothing is built)"), listed=False)


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Fetch and verify the recipe's model into the workspace, and print where it is."""
    import time

    from onebit_build.core import ui
    from onebit_build.core.workspace import WorkspaceLock, check_usable
    from onebit_build.job.job import load_for, sweep_left_behind
    from onebit_build.job.smoke import resolve_model

    _, recipe = load_for(opts.settings, project)
    ws = opts.ws
    check_usable(ws.root)
    t0 = time.monotonic()
    with WorkspaceLock(ws.lock_file, "onebit-build model pull"):
        sweep_left_behind(ws)
        log = ws.runs / f"model-pull-{time.strftime('%Y%m%d-%H%M%S')}.log"
        mf = resolve_model(recipe, opts.settings, models_dir=ws.models, log=log, lock=project.models_lock)
    ui.info(f"model {mf.path.name}: sha256 {mf.sha256} ({'fetched' if mf.fetched else 'already here'},"
            f" {time.monotonic() - t0:.1f} s)")
    ui.answer(str(mf.path))
    return 0
