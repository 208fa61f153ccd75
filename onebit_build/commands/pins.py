"""``pins lock``: resolve abbreviated pins and record them in pins.lock."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.options import Options

COMMAND = Command(name="pins", help="pin tools", rank=60, git=True, writes_project=True, action="lock")


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import global_options

    sub = p.add_subparsers(dest="pins_command", metavar="ACTION", required=True)
    lk = sub.add_parser("lock", help="resolve abbreviated pins and record them in pins.lock")
    global_options(lk, listed=False)
    lk.add_argument("sources", nargs="*", help="only these sources (default: all abbreviated pins)")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Resolve abbreviated pins (pins.lock ignored while doing so) and record them in pins.lock."""
    from onebit_build.core import ui
    from onebit_build.core.pins import apply_lock, load_pins, read_lock
    from onebit_build.job.build import run_fetch
    from onebit_build.job.model import Needs, load_pins_and_recipe, open_job

    pins = apply_lock(load_pins(project.pins), {}, locked=False)
    _, recipe = load_pins_and_recipe(project, opts.recipe)
    with open_job(opts, project, Needs(git=True, writes_project=True), loaded=(pins, recipe)) as job:
        wanted = list(opts.sources) or [n for n, p in pins.sources.items() if p.abbreviated]
        for n in wanted:
            pins.get(n)
        for n, f in run_fetch(job, wanted).items():
            ui.info(f"  {n}: {f.commit} (from {f.mirror_used})")
        ui.info(f"{pins.lock_path.name}: {len(read_lock(pins.lock_path))} resolved pin(s)")
        return 0
