"""``verify``: every output and kernel artifact of the build against the committed reference
of its toolchain (building first when needed)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

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


@dataclass(frozen=True, kw_only=True)
class VerifyFlags:
    reference: Path | None = None  # a reference file or build folder to compare with
    write_reference: Path | None = None
    rebuild: bool = False


def options(args: Mapping[str, Any]) -> VerifyFlags:
    """``verify``'s own options, their paths checked before any work."""
    from onebit_build.commands._options import file_to_write, existing
    from onebit_build.core.safepath import FILE_OR_FOLDER

    return VerifyFlags(reference=existing(args.get("reference"), "--reference", FILE_OR_FOLDER),
                       write_reference=file_to_write(args.get("write_reference"), "--write-reference"),
                       rebuild=bool(args.get("rebuild")))


def run(opts, project, cmd: Command) -> int:
    """Build if needed, then write a reference, rebuild and compare, or compare with a reference."""
    from onebit_build.commands._job import needs
    from onebit_build.job.job import open_job
    from onebit_build.job.run import build_part, run as run_job
    from onebit_build.workflows.verify import verify_command

    own = opts.own
    with open_job(opts.settings, project, needs(cmd, opts), label=opts.label) as j:
        if own.reference is None and own.write_reference is None and not own.rebuild:
            return run_job(j, Stage.VERIFY).exit_code  # the default job's verify stage
        built = build_part(j)
        assert built is not None  # build_part stops early only when asked to
        return verify_command(j, built, reference=own.reference, write_to=own.write_reference, rebuild=own.rebuild)
