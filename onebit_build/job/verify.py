"""The verify stage: every output of a build (kernel artifacts first) against the committed
reference of its toolchain, another reference, or a second build of the same configuration at
other paths without the compiler cache. A difference from the committed reference is
explained: the differing objects are compiled again without the cache, which tells a poisoned
cache entry from a toolchain that drifted."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from onebit_build.checking.artifacts import KINDS, Artifact, ArtifactSet
from onebit_build.building.cache.compiler import NO_LAUNCHER
from onebit_build.building.cache.entries import find_entries
from onebit_build.building.cmake import find_tools
from onebit_build.checking.manifest import Manifest, load_manifest
from onebit_build.building.objects import Recompiled, differing_objects, recompile
from onebit_build.checking.references import (Reference, find_reference, fingerprint, fingerprint_text, load_reference,
                                              reference_name, write_reference)
from onebit_build.checking.verdict import record_verdict
from onebit_build.checking.compare import SetComparison, compare_sets, verify_against
from onebit_build.core import ui
from onebit_build.spec.recipe import Recipe
from onebit_build.core.errors import ToolMissingError, VerifyError
from onebit_build.core.gitops import Git
from onebit_build.core.workspace import Workspace
from onebit_build.job.build import Built, run_build, write_manifests
from onebit_build.job.job import Job
from onebit_build.commands._options import VerifyOptions


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


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What verify concluded about one build: ``verified`` (every output and kernel artifact
    is the committed reference's), ``not-verified`` (something differs) or ``unverified`` (no
    reference for this toolchain)."""

    status: str
    detail: str
    reference: str | None = None
    results: tuple[SetComparison, ...] = ()
    recompiled: tuple[Recompiled, ...] = ()
    remedy: str = ""

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"status": self.status, "detail": self.detail}
        if self.reference:
            doc["reference"] = self.reference
        if self.results:
            doc["results"] = [r.to_dict() for r in self.results]
        if self.recompiled:
            doc["recompiled"] = [{"object": r.name, "cached": r.cached, "expected": r.expected, "fresh": r.fresh,
                                  "verdict": r.verdict, "detail": r.detail} for r in self.recompiled]
        if self.remedy:
            doc["remedy"] = self.remedy
        return doc


def cache_served(manifest: Manifest) -> str:
    """``192/192 objects from the compiler cache`` (or that the build used none). Pure."""
    hits = looked = 0
    used = False
    for c in manifest.components:
        stats = (c.compiler_cache or {}).get("stats") or {}
        hits += int(stats.get("hits", 0))
        looked += int(stats.get("hits", 0)) + int(stats.get("misses", 0))
        used = used or (c.compiler_cache or {}).get("launcher") not in (None, "none")
    if looked:
        return f"{hits}/{looked} objects from the compiler cache"
    return "objects from the compiler cache: not counted (folder reused)" if used else "no compiler cache"


def committed_verdict(job: Job, manifest: Manifest) -> Verdict:
    """Every output and kernel artifact of the build against the committed reference of its
    toolchain; on a difference, the differing objects compiled again without the cache."""
    refs_dir = references_dir(job)
    ref_path, candidates = find_reference(refs_dir, manifest)
    if ref_path is None:
        fp = fingerprint(manifest)
        flags = f"--recipe {job.recipe.name} " if job.recipe.name != "default" else ""
        return Verdict(status="unverified", detail=(
            f"no committed reference in {refs_dir} for this toolchain ({fingerprint_text(fp)});"
            f" candidates: {', '.join(candidates) or 'none'}"),
            remedy=(f"record one from a build without the compiler cache: onebit-build {flags}--compiler-cache none "
                    f"--fresh verify --write-reference {refs_dir / (reference_name(fp) + '.json')}; or compare "
                    f"with a cache-free rebuild: onebit-build {flags}verify --rebuild"))
    results = tuple(verify_against(manifest, load_reference(ref_path), with_outputs=True))
    if all(r.ok for r in results):
        return Verdict(status="verified", detail=f"against {ref_path.name}: " + "; ".join(r.summary() for r in results),
                       reference=str(ref_path), results=results)
    return _not_verified(manifest, load_reference(ref_path), results)


def _not_verified(manifest: Manifest, ref: Reference, results: tuple[SetComparison, ...]) -> Verdict:
    bad = next(r for r in results if not r.ok)
    if bad.differing:
        name, _rs, _bs = bad.differing[0]
        expected = {o["name"]: o["sha256"] for outs in ref.outputs.values() for o in outs}.get(name, "")
        found = next((o.sha256 for c in manifest.components for o in c.outputs if o.name == name), "")
        what = f"{name} differs (expected sha256 {expected[:16]}, found {found[:16]})"
    else:
        what = f"{bad.label}: " + ", ".join(n for n, _ in (bad.missing or bad.extra)[:3]) + " missing or extra"
    recompiled = tuple(_recompile_differing(manifest, ref))
    poisoned = [r.name for r in recompiled if r.verdict == "poisoned"]
    drifted = [r.name for r in recompiled if r.verdict == "drift"]
    if poisoned:
        cause = (f"the compiler cache served {len(poisoned)} poisoned object(s): {', '.join(poisoned[:3])} "
                 "(compiled again without the cache, each gives the reference's bytes)")
        entries = poisoned_entries(manifest, [r for r in recompiled if r.verdict == "poisoned"])
        evict = (f"remove the cache entr{'y' if len(entries) == 1 else 'ies'} {', '.join(map(str, entries))}"
                 if entries else "evict those entries from the compiler cache (or empty it)")
        remedy = f"{evict}, then rebuild without the cache: onebit-build --compiler-cache none --fresh build"
    elif drifted:
        cause = (f"the toolchain drifted: {', '.join(drifted[:3])} compiled again without the cache gives the same "
                 "bytes as the build, not the reference's")
        remedy = "record a reference for this toolchain (verify --write-reference) if the new bytes are intended"
    else:
        cause = "no object explains it" if not recompiled else "the recompiled objects match neither side"
        remedy = "rebuild without the compiler cache and compare: onebit-build verify --rebuild"
    return Verdict(status="not-verified", reference=str(ref.path), results=results, recompiled=recompiled,
                   detail=f"NOT VERIFIED against {ref.path.name}: {what}; {cache_served(manifest)}; {cause}",
                   remedy=remedy)


MAX_RECOMPILES = 8
LAUNCHERS = ("sccache", "ccache")


def _recompile_differing(manifest: Manifest, ref: Reference) -> list[Recompiled]:
    out: list[Recompiled] = []
    try:
        ninja: Path | None = find_tools().ninja
    except ToolMissingError:
        ninja = None
    for c in manifest.components:
        expected = ref.objects.get(c.name) or {}
        for name in differing_objects(c.objects, expected)[:MAX_RECOMPILES - len(out)]:
            ui.info(f"  compiling {name} again without the compiler cache")
            out.append(recompile(Path(c.build_dir), name, cached=c.objects[name], expected=expected[name],
                                 launchers=LAUNCHERS, ninja=ninja))
    return out


def poisoned_entries(manifest: Manifest, poisoned: list[Recompiled]) -> list[Path]:
    """The entries of a local sccache folder that hold the poisoned objects (none for other
    caches: their entries cannot be found by content here)."""
    found: list[Path] = []
    for c in manifest.components:
        cache = c.compiler_cache or {}
        if cache.get("launcher") != "sccache" or cache.get("backend") != "local" or not cache.get("cache_dir"):
            continue
        for r in poisoned:
            obj = Path(c.build_dir) / r.name
            if obj.is_file():
                found += find_entries(Path(cache["cache_dir"]), sha256=r.cached, size=obj.stat().st_size)
    return list(dict.fromkeys(found))


def show_verdict(verdict: Verdict) -> None:
    """The comparisons and the recompiled objects, one line each."""
    _print_comparisons(verdict.results)
    for r in verdict.recompiled:
        fresh = r.fresh[:16] if r.fresh else f"not compiled: {r.detail}"
        ui.info(f"  object {r.name}: cached {r.cached[:16]}, reference {r.expected[:16]}, "
                f"without the cache {fresh} -> {r.verdict}")


def verify_stage(job: Job, manifest_file: Path) -> Verdict:
    """Part of the default job: the build against the committed reference of its toolchain.
    Never passes silently; NOT VERIFIED stops the job (VerifyError)."""
    return _committed(job, manifest_file)


def _committed(job: Job, manifest_file: Path) -> Verdict:
    """The committed-reference verdict as a stage: printed, and raised when NOT VERIFIED."""
    with ui.stage("verify") as st:
        verdict = committed_verdict(job, load_manifest(manifest_file))
        show_verdict(verdict)
        record_verdict(manifest_file, verdict.status, verdict.detail, verdict.remedy)  # read by what uses the build
        if verdict.status == "not-verified":
            raise VerifyError(verdict.detail, hint=verdict.remedy)
        st["note"] = verdict.detail
        if verdict.status == "unverified":
            st["status"] = "UNVERIFIED"
    if verdict.status == "unverified":
        ui.warn(verdict.remedy)
    return verdict


def verify_command(job: Job, built: Built, vo: VerifyOptions) -> int:
    """``verify``: write a reference, rebuild and compare, compare with a given reference, or
    (by default) the same check as the default job's verify stage."""
    manifest = load_manifest(built.manifest)
    if vo.write_reference is not None:
        ui.info(f"wrote reference {write_reference(vo.write_reference, manifest)}")
        return 0
    if vo.rebuild:
        return rebuild_and_compare(job, built)
    if vo.reference is None:
        _committed(job, built.manifest)
        return 0
    ref = load_reference(vo.reference)
    results = verify_against(manifest, ref, with_outputs=True)
    ui.info(f"compared with {ref.path}:")
    if not _print_comparisons(results):
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
    if not _print_comparisons(results):
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
