"""``verify`` beyond the job's verify stage (which compares the build with the committed
reference of its toolchain): the build against a reference given, a reference written from
it, or a second build of the same configuration at other paths without the compiler cache
(``--rebuild``)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from onebit_build.building.cache.compiler import NO_LAUNCHER
from onebit_build.checking.artifacts import KINDS, Artifact, ArtifactSet
from onebit_build.checking.committed import print_comparisons
from onebit_build.checking.compare import SetComparison, compare_sets, verify_against
from onebit_build.checking.manifest import load_manifest
from onebit_build.checking.references import load_reference, write_reference
from onebit_build.core import ui
from onebit_build.core.errors import VerifyError
from onebit_build.core.gitops import Git
from onebit_build.core.workspace import Workspace
from onebit_build.job.build import Built, run_build, write_manifests
from onebit_build.job.job import Job
from onebit_build.spec.recipe import Recipe


def verify_command(job: Job, built: Built, *, reference: Path | None, write_to: Path | None, rebuild: bool) -> int:
    """``verify`` asked for more than the verify stage: write a reference, rebuild and compare,
    or compare with a given reference."""
    manifest = load_manifest(built.manifest)
    if write_to is not None:
        ui.info(f"wrote reference {write_reference(write_to, manifest)}")
        return 0
    if rebuild:
        return rebuild_and_compare(job, built)
    assert reference is not None  # without any of the three, the command runs the job's verify stage
    ref = load_reference(reference)
    results = verify_against(manifest, ref, with_outputs=True)
    ui.info(f"compared with {ref.path}:")
    if not print_comparisons(results):
        raise VerifyError("artifacts differ", hint="see the list above")
    return 0


def rebuild_and_compare(job: Job, built: Built) -> int:
    root, trees = rebuild_places(job.workspace, built.trees, job.recipe)
    with ui.stage("rebuild") as st:
        # Everything compiled again (no compiler cache), from sources at another path.
        builds2 = run_build(job, built.fetched, trees, build_root=root, launcher=NO_LAUNCHER)
        man2 = write_manifests(job, built.fetched, trees, builds2, latest=False)
        moved = [str(t.path) for n, t in trees.items() if t.path != built.trees[n].path]
        st["note"] = (f"in {root}" + (f", sources moved to {', '.join(moved)}" if moved else "")
                      + ", no compiler cache")
    first, second = load_manifest(built.manifest), load_manifest(man2)
    results = verify_against(second, load_reference(built.manifest), with_outputs=True)
    results += [object_comparison(c2.name, c2.objects, c1.objects) for c1, c2 in
                zip(first.components, second.components) if c1.objects and c2.objects]
    ui.info(f"rebuild in {root} compared with {built.builds[-1].build_dir}:")
    if not print_comparisons(results):
        raise VerifyError("the rebuild without the compiler cache differs from the build",
                          hint="see the list above: an object that differs came from the compiler cache "
                               "or from a compiler that is not deterministic")
    return 0


def object_comparison(component: str, found: dict[str, str], expected: dict[str, str]) -> SetComparison:
    """Two builds' compiled objects, compared like an artifact set (``found`` is the second). Pure."""
    def as_set(objs: dict[str, str]) -> ArtifactSet:
        return ArtifactSet(kind="objects", root="", items=tuple(Artifact(name=n, size=0, sha256=h)
                                                               for n, h in sorted(objs.items())))

    res = compare_sets(component, as_set(found), as_set(expected))
    return replace(res, label="compiled objects")


def rebuild_places(workspace: Workspace, trees: dict, recipe: Recipe) -> tuple[Path, dict]:
    """Where ``verify --rebuild`` builds: a fresh build root, and a copy of each prepared
    source tree at another path (as reprotest varies the build path), so that any absolute
    path left in an output shows up as a difference. Sources of path-recording kernel
    artifacts (``path_matters`` in building.artifacts.KINDS) are not moved."""
    root = workspace.root / "build-rebuild"
    src = workspace.root / "src-rebuild"
    for d in (root, src):
        shutil.rmtree(d, ignore_errors=True)
    pinned = {c.source for c in recipe.components if any(KINDS[a].path_matters for a in c.artifacts)}
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
