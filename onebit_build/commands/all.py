"""``all``, the default job: fetch, patch, build, verify, smoke and report."""

from __future__ import annotations

import argparse

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

COMMAND = Command(name="all", help="the whole job (the default): fetch, patch, build, verify, smoke, report", rank=15,
                  until=Stage.SMOKE, dry_run=True, git=True, takes_model=True)


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands._oci import binary_cache_options
    from onebit_build.commands.arguments import run_folder_options

    binary_cache_options(p)
    run_folder_options(p, junit=True)


def run(opts, project, cmd: Command) -> int:
    from onebit_build.commands._job import job
    from onebit_build.commands._oci import cache_options

    return job(opts, project, cmd, binary_cache=cache_options(opts.args))  # checked before anything starts
