"""``smoke``: start the built llama-server and check it (building first when needed)."""

from __future__ import annotations

import argparse

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

COMMAND = Command(name="smoke", help="start the built llama-server and check it (builds first if needed)", rank=13,
                  until=Stage.SMOKE, skip=frozenset({Stage.VERIFY}), dry_run=True, git=True, takes_model=True)


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands._oci import USE_HELP
    from onebit_build.commands.arguments import run_folder_options

    run_folder_options(p, junit=True)
    p.add_argument("--server", metavar="PATH",
                   help="smoke this llama-server binary (built elsewhere) instead of building the recipe")
    p.add_argument("--write-numerics", metavar="FILE",
                   help="write the CPU run of the numerical check as a numerical reference to FILE "
                        "(commit it as references/<recipe>/numerics/<toolchain>.json)")
    p.add_argument("--allow-unverified", action="store_true", help=USE_HELP)


def run(opts, project, cmd: Command) -> int:
    from onebit_build.commands._job import job

    return job(opts, project, cmd)
