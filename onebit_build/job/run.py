"""A job run up to a stage: fetch, patch, build, verify, smoke, in that order.

The command table names each command's last stage (and any it leaves out); :func:`run` runs
them and returns what they produced. No stage knows which command asked for it. This module
alone enters the stages, and alone decides whether the build is taken from the binary cache
(:mod:`onebit_build.job.pull`) or made here (fetch, patch, build).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from onebit_build.checking.manifest import utc_now
from onebit_build.checking.verdict import refuse_not_verified
from onebit_build.checking.committed import BuildVerdict
from onebit_build.core import ui
from onebit_build.doctor.requirements import check_before_build
from onebit_build.evidence.keys import signing_key_from
from onebit_build.job.build import Built, build_stage, server_of
from onebit_build.job.fetch import fetch_stage
from onebit_build.job.job import Job
from onebit_build.job.patch import patch_stage
from onebit_build.job.pull import BinaryCacheRequest, from_binary_cache
from onebit_build.job.smoke import smoke_stage
from onebit_build.job.stage import Stage
from onebit_build.job.verify import verify_stage


@dataclass(frozen=True, kw_only=True)
class JobResult:
    built: Built | None  # None: the job stopped before the build, or smoked a given binary
    verified: BuildVerdict | None = None  # what the verify stage concluded (None: not run)
    exit_code: int = 0


def run(job: Job, until: Stage, *, skip: frozenset[Stage] = frozenset(), server: Path | None = None,
        binary_cache: BinaryCacheRequest | None = None, allow_unverified: bool = False) -> JobResult:
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



def build_part(job: Job, until: Stage = Stage.BUILD, binary_cache: BinaryCacheRequest | None = None) -> Built | None:
    """Fetch, patch and build, up to ``until``; None when it stops before the build. With
    ``binary_cache``, the build is first asked of that registry."""
    recipe = job.recipe
    planned = {c.name: c.requested for c in job.plan.components}
    started, key = utc_now(), None
    if until >= Stage.BUILD:  # every requirement the build will meet, named at once before anything starts
        check_before_build(recipe, job.pins, job.workspace, planned=planned)
        key = signing_key_from(job.settings.signing_key, os.environ)  # a bad key stops it here
        if binary_cache is not None and binary_cache.ref is not None:
            pulled = from_binary_cache(job, binary_cache)
            if pulled is not None:
                return pulled
    fetched, downloaded = fetch_stage(job)
    if until == Stage.FETCH:
        return None
    trees = patch_stage(job, fetched)
    if until == Stage.PATCH:
        for t in trees.values():
            ui.info(f"  {t.source}: {t.path}")
        return None
    req = recipe.requires
    if req is not None and req.cxx_standard is not None:  # read in the prepared tree
        source = recipe.component(req.cxx_standard.component).source
        check_before_build(recipe, job.pins, job.workspace, planned=planned, tree=trees[source].path)
    return build_stage(job, fetched, trees, downloaded=downloaded, started=started, key=key)


def smoke_part(job: Job, built: Built, *, verified: dict) -> int:
    """The smoke stage on a build in hand whose verdict the caller gives (a pin move's gates
    judge the build by a rebuild, not by the committed reference); its exit code."""
    return smoke_stage(job, server=server_of(built.builds, job.recipe), manifest_file=built.manifest, verified=verified)
