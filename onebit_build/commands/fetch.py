"""``fetch``: every source of the recipe at its pinned commit."""

from __future__ import annotations

import argparse

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

COMMAND = Command(name="fetch", help="fetch every source of the recipe at its pinned commit", rank=10,
                  until=Stage.FETCH, dry_run=True, git=True)


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import run_folder_options

    run_folder_options(p, junit=False)


def run(opts, project, cmd: Command) -> int:
    from onebit_build.commands._job import job

    return job(opts, project, cmd)
