"""A job run up to a stage: fetch, patch, build, verify, smoke, in that order.

The command table names each command's last stage (and any it leaves out); :func:`run` runs
them and returns what they produced. No stage knows which command asked for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onebit_build.checking.verdict import refuse_not_verified
from onebit_build.core import ui
from onebit_build.job.build import Built, build_part, server_of
from onebit_build.job.job import Job
from onebit_build.job.stage import Stage
from onebit_build.job.smoke import smoke_stage
from onebit_build.job.verify import Verdict, verify_stage

if TYPE_CHECKING:
    from onebit_build.job.pull import CacheOptions


@dataclass(frozen=True, kw_only=True)
class JobResult:
    built: Built | None  # None: the job stopped before the build, or smoked a given binary
    verified: Verdict | None = None  # what the verify stage concluded (None: not run)
    exit_code: int = 0


def run(job: Job, until: Stage, *, skip: frozenset[Stage] = frozenset(), server: Path | None = None,
        binary_cache: CacheOptions | None = None, allow_unverified: bool = False) -> JobResult:
    """Run ``job``'s stages up to ``until``, leaving out ``skip``. ``server``: smoke this binary,
    built elsewhere, instead of building the recipe; ``binary_cache``: where to take the build from.
    A smoke that leaves out the verify stage uses the build's recorded verdict: NOT VERIFIED
    stops it, unless ``allow_unverified``."""
    t_start = time.monotonic()
    if server is not None:
        return JobResult(built=None, exit_code=smoke_stage(job, server=server, manifest_file=None))
    built = build_part(job, until=min(until, Stage.BUILD), binary_cache=binary_cache)
    if built is None or until == Stage.BUILD:
        if built is not None:
            ui.info(f"done in {time.monotonic() - t_start:.1f} s; logs: {job.run_dir}")
        return JobResult(built=built)
    verified = verify_stage(job, built.manifest) if Stage.VERIFY not in skip else None
    if until == Stage.VERIFY:
        return JobResult(built=built, verified=verified)
    recorded = None if verified else refuse_not_verified(built.manifest, allow=allow_unverified, what="smoke")
    judged = verified.to_dict() if verified else None
    if recorded is not None:
        judged = {"status": recorded.status, "detail": recorded.line, "recorded": True,
                  **({"allowed": "--allow-unverified"} if recorded.status == "not-verified" else {})}
    code = smoke_stage(job, server=server_of(built.builds, job.recipe), manifest_file=built.manifest,
                       verified=judged)
    verdict = (verified.status if verified else f"{recorded.status} (recorded)" if recorded else "not run"
               ).upper().replace("-", " ")
    ui.result(f"{'done' if code == 0 else 'failed'} in {time.monotonic() - t_start:.1f} s in all "
              f"(verify {verdict}); logs: {job.run_dir}")
    return JobResult(built=built, verified=verified, exit_code=code)

