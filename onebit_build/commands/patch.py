"""``patch``: fetch, then the patched source trees."""

from __future__ import annotations

import argparse

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

COMMAND = Command(name="patch", help="fetch, then prepare patched source trees", rank=11,
                  until=Stage.PATCH, dry_run=True, git=True)


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import run_folder_options

    run_folder_options(p, junit=False)


def run(opts, project, cmd: Command) -> int:
    from onebit_build.commands._job import job

    return job(opts, project, cmd)
