"""The patch stage: each fetched source as a prepared tree, its project patches applied in order
(a tree already prepared from the same commit and patches is reused)."""

from __future__ import annotations

from onebit_build.core import ui
from onebit_build.job.job import Job
from onebit_build.sources.fetch import FetchResult
from onebit_build.sources.patch import PrepareRequest, PreparedTree, list_patches, prepare


def patch_stage(job: Job, fetched: dict[str, FetchResult]) -> dict[str, PreparedTree]:
    """The prepared tree of each fetched source, by name."""
    with ui.stage("patch") as st:
        trees = run_patch(job, fetched)
        st["note"] = ", ".join(f"{n}: {len(t.patches)} patch(es){' (reused)' if t.reused else ''}"
                               for n, t in trees.items())
    return trees


def run_patch(job: Job, fetched: dict[str, FetchResult]) -> dict[str, PreparedTree]:
    trees: dict[str, PreparedTree] = {}
    for name, f in fetched.items():
        trees[name] = prepare(PrepareRequest(
            source=name, commit=f.commit, bare_repo=f.bare_repo,
            patches=list_patches(job.project.patches, name), workspace=job.workspace,
            log=job.log("patch.log"),
        ))
    return trees
