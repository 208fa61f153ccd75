"""``verify``: every output and kernel artifact of the build against the committed reference
of its toolchain (building first when needed)."""

from __future__ import annotations

import argparse

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

COMMAND = Command(name="verify", help="compare every output and kernel artifact of the build with the committed"
                  " reference of its toolchain (builds first if needed)", rank=14, until=Stage.BUILD, dry_run=True,
                  git=True)


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", metavar="FILE|BUILD_DIR",
                   help="reference file or build folder (default: the matching one in references/<recipe>/)")
    p.add_argument("--write-reference", metavar="FILE", help="save this build's artifacts as a reference")
    p.add_argument("--rebuild", action="store_true",
                   help="build the same configuration again in another folder and compare everything")


def run(opts, project, cmd: Command) -> int:
    """Build if needed, then write a reference, rebuild and compare, or compare with a reference."""
    from onebit_build.commands._job import needs
    from onebit_build.job.build import build_part
    from onebit_build.job.job import open_job
    from onebit_build.job.verify import verify_command

    with open_job(opts, project, needs(cmd, opts)) as j:
        built = build_part(j)
        assert built is not None  # build_part stops early only when asked to
        return verify_command(j, built, opts.verify)
