"""The verify stage: a build's kernel artifacts against the committed reference of its
toolchain, another reference, or a second build of the same configuration at other paths."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from onebit_build.building.cache.compiler import NO_LAUNCHER
from onebit_build.building.manifest import load_manifest
from onebit_build.building.verify import find_matching_reference, load_reference, verify_against, write_reference
from onebit_build.core import ui
from onebit_build.core.config import Recipe
from onebit_build.core.errors import VerifyError
from onebit_build.core.gitops import Git
from onebit_build.core.workspace import Workspace
from onebit_build.job.build import Built, run_build, write_manifests
from onebit_build.job.model import Job


def _print_comparisons(results) -> bool:
    ok = True
    for r in results:
        for line in r.lines():
            ui.info(line if line.startswith("  ") else f"  {line}")
        ok = ok and r.ok
    return ok


def references_dir(job: Job) -> Path:
    """The committed references of the job's recipe: ``references/<recipe>/``."""
    return job.project.references / job.recipe.name


def verify_stage(job: Job, manifest_file: Path) -> dict:
    """Part of the default job: compare with the matching committed reference, if any.
    Returns what the report records; never passes silently."""
    manifest = load_manifest(manifest_file)
    sets = manifest.artifact_sets()
    with ui.stage("verify") as st:
        if not sets:
            st["note"] = "no kernel artifacts in this recipe (nothing to verify)"
            return {"status": "not-applicable", "detail": st["note"]}
        refs_dir = references_dir(job)
        ref_path, candidates = find_matching_reference(refs_dir, sets)
        if ref_path is None:
            facts = "; ".join(f"{k}={v}" for s in sets.values() for k, v in s.facts.items()
                              if k in ("glslc", "nvcc", "loom_link"))
            msg = (f"UNVERIFIED: no committed reference in {refs_dir} matches this toolchain ({facts});"
                   f" candidates: {', '.join(candidates) or 'none'}")
            st["note"] = msg
            return {"status": "unverified", "detail": msg}
        results = verify_against(manifest, load_reference(ref_path))
        ok = _print_comparisons(results)
        st["note"] = f"against {ref_path.name}: " + "; ".join(r.summary() for r in results)
    if not ok:
        raise VerifyError(f"kernel artifacts differ from {ref_path}",
                          hint="see the list above; rebuild with the reference's toolchain or update "
                               "the reference deliberately")
    return {"status": "verified", "reference": str(ref_path), "results": [r.to_dict() for r in results]}


def verify_command(job: Job, built: Built) -> int:
    """``verify``: write a reference, rebuild and compare, or compare with a reference."""
    vo = job.opts.verify
    manifest = load_manifest(built.manifest)
    if vo.write_reference is not None:
        ui.info(f"wrote reference {write_reference(vo.write_reference, manifest)}")
        return 0
    if vo.rebuild:
        root, trees = rebuild_places(job.workspace, built.trees, job.recipe)
        with ui.stage("rebuild") as st:
            # Everything compiled again (no compiler cache), from sources at another path.
            builds2 = run_build(job, built.fetched, trees, build_root=root, launcher=NO_LAUNCHER)
            man2 = write_manifests(job, built.fetched, trees, builds2, latest=False)
            moved = [str(t.path) for n, t in trees.items() if t.path != built.trees[n].path]
            st["note"] = (f"in {root}" + (f", sources moved to {', '.join(moved)}" if moved else "")
                          + ", no compiler cache")
        results = verify_against(load_manifest(man2), load_reference(built.manifest), with_outputs=True)
        ui.info(f"rebuild in {root} compared with {built.builds[-1].build_dir}:")
    else:
        if vo.reference is not None:
            ref = load_reference(vo.reference)
        else:
            refs_dir = references_dir(job)
            ref_path, candidates = find_matching_reference(refs_dir, manifest.artifact_sets())
            if ref_path is None:
                raise VerifyError(f"no committed reference in {refs_dir} matches this build's toolchain"
                                  f" (candidates: {', '.join(candidates) or 'none'})",
                                  hint="pass --reference FILE|BUILD_DIR, or record one with --write-reference")
            ref = load_reference(ref_path)
        results = verify_against(manifest, ref)
        ui.info(f"compared with {ref.path}:")
    if not _print_comparisons(results):
        raise VerifyError("artifacts differ", hint="see the list above")
    return 0


# Kernel artifacts whose bytes name their input's absolute path (loom-link records it): the
# sources they are built from stay at their canonical path when rebuilding.
CANONICAL_PATH_ARTIFACTS = ("loombc",)


def rebuild_places(workspace: Workspace, trees: dict, recipe: Recipe) -> tuple[Path, dict]:
    """Where ``verify --rebuild`` builds: a fresh build root, and a copy of each prepared
    source tree at another path (as reprotest varies the build path), so that any absolute
    path left in an output shows up as a difference. Sources of path-recording kernel
    artifacts (:data:`CANONICAL_PATH_ARTIFACTS`) are not moved."""
    root = workspace.root / "build-rebuild"
    src = workspace.root / "src-rebuild"
    for d in (root, src):
        shutil.rmtree(d, ignore_errors=True)
    pinned = {c.source for c in recipe.components if set(c.artifacts) & set(CANONICAL_PATH_ARTIFACTS)}
    copies = {}
    for name, tree in trees.items():
        if name in pinned:
            copies[name] = tree
            continue
        dest = src / f"moved-{tree.path.name}"
        shutil.copytree(tree.path, dest, symlinks=True)
        # A copy has new inodes and times: until git refreshes its index, 'git diff-index'
        # (which ggml's CMake runs) calls the tree dirty and the version string differs.
        Git(dest).run("update-index", "-q", "--refresh", check=False)
        copies[name] = replace(tree, path=dest)
    return root, copies
