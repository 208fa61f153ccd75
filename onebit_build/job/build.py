"""The build stage: every component configured and built in order, as
:func:`onebit_build.job.resolve.component_builds` resolves it, then the manifest (with the
kernel artifacts collected) and the evidence written beside the build."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from onebit_build.building.builder import BuildResult, build
from onebit_build.building.cache.compiler import Launcher
from onebit_build.building.cmake import Tools, find_tools
from onebit_build.building.toolchain import component_fields
from onebit_build.checking.artifacts import ArtifactSet, collect
from onebit_build.checking.manifest import (MANIFEST_NAME, SERVER_OUTPUT, latest_path, load_manifest, make_manifest,
                                            read_manifest, write_manifest)
from onebit_build.core import ui
from onebit_build.core.errors import NotAvailableError
from onebit_build.core.fsutil import StateError
from onebit_build.evidence.emit import EmitRequest, Emitted, emit, keep_signed, toolchain_files
from onebit_build.evidence.floor import recorded_floor
from onebit_build.evidence.keys import SigningKey
from onebit_build.job.job import Job
from onebit_build.job.resolve import BuildInputs, TreeFacts, component_builds
from onebit_build.sources.downloads import check_against_lock, provide_all
from onebit_build.sources.fetch import FetchResult
from onebit_build.sources.patch import PreparedTree
from onebit_build.spec.recipe import Recipe


def run_build(job: Job, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree], *,
              build_root: Path | None = None, launcher: Launcher | None = None,
              downloaded: dict[str, Path] | None = None) -> list[BuildResult]:
    """Build every component in order, as :func:`onebit_build.job.resolve.component_builds`
    resolves them. ``launcher``: the compiler cache (default: the one the options ask for);
    ``downloaded``: the configure-time downloads the fetch stage provided."""
    recipe = job.recipe
    tools = find_tools()
    if downloaded is None:
        downloaded = provide_all(recipe, job.workspace, job.settings.mirror_dirs, job.settings.offline)
    for comp in recipe.components:
        check_against_lock(comp, trees[comp.source].path)
    inputs = build_inputs(job, {n: TreeFacts.of(t) for n, t in trees.items()}, downloaded, tools=tools,
                          launcher=launcher or job.plan.launcher, build_root=build_root)
    return [build(cb.request, tools) for cb in component_builds(recipe, job.pins, inputs)]


def build_inputs(job: Job, trees: dict[str, TreeFacts], downloaded: dict[str, Path], *, tools: Tools,
                 launcher: Launcher, build_root: Path | None = None) -> BuildInputs:
    """What resolving the job's recipe needs besides the recipe and pins."""
    return BuildInputs(trees=trees, downloaded=downloaded, fields=toolchain_fields(job),
                       build_root=build_root or job.workspace.build_dir, launcher=launcher, tools=tools, log=job.log,
                       recipes_dir=job.project.recipes, jobs=job.settings.jobs,
                       fresh=job.settings.fresh and build_root is None)


def toolchain_fields(job: Job) -> dict[str, dict[str, str]]:
    """``${toolchain.*}`` values for the recipe (none without a toolchain section)."""
    recipe = job.recipe
    if recipe.toolchain is None:
        return {}
    assert job.plan.toolchain is not None  # the plan resolves the toolchain of a recipe that has one
    return component_fields(recipe, job.plan.toolchain)


def collect_artifacts(recipe: Recipe, trees: dict[str, PreparedTree],
                      builds: list[BuildResult]) -> dict[str, list[ArtifactSet]]:
    out: dict[str, list[ArtifactSet]] = {}
    for b in builds:
        comp = recipe.component(b.component)
        out[b.component] = [collect(k, build_dir=b.build_dir, source_dir=trees[comp.source].path)
                            for k in comp.artifacts]
    return out


def write_manifests(job: Job, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree],
                    builds: list[BuildResult], *, latest: bool = True, started: str | None = None) -> Path:
    recipe = job.recipe
    doc = make_manifest(recipe, fetched, trees, builds, collect_artifacts(recipe, trees, builds),
                        project={"project_root": str(job.project.path), "data_from": job.project.data_from})
    if job.overrides:
        doc["overrides"] = list(job.overrides)
    doc.update({"started": started or doc["created"], "toolchain_files": toolchain_files(builds, launcher_of(builds)),
                "runtime_floor": recorded_floor(o.path for b in builds for o in b.outputs)})
    final = builds[-1].build_dir / MANIFEST_NAME
    write_manifest(final, doc)
    name = MANIFEST_NAME if latest else f"build-manifest-{builds[-1].build_dir.parent.name}.json"
    write_manifest(job.run_dir / name, doc)
    if latest:
        write_manifest(latest_path(job.workspace, recipe.name), doc)
    return final


def launcher_of(builds: list[BuildResult]) -> str | None:
    """The compiler cache's program the builds compiled through (None: none)."""
    return next((str(b.compiler_cache["program"]) for b in builds if (b.compiler_cache or {}).get("program")), None)


def write_evidence(job: Job, builds: list[BuildResult], manifest: Path, key: SigningKey | None) -> Emitted:
    """The provenance statement, SBOM and link of the build, beside its manifest."""
    return emit(EmitRequest(folder=manifest.parent, copies=(job.run_dir,), manifest=load_manifest(manifest),
                            manifest_path=manifest, recipe=job.recipe, overrides=job.overrides, pins=job.pins.sources,
                            key_inputs={b.component: b.key_inputs for b in builds}, workspace=job.workspace.root,
                            project=job.project.path, invocation=job.run_dir.name, key=key))


def manifests_and_evidence(job: Job, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree],
                           builds: list[BuildResult], *, started: str, key: SigningKey | None) -> tuple[Path, Emitted]:
    """The build's manifest and evidence: written anew, unless this run has no key and the
    build folder holds signed evidence of these very outputs; then that evidence and the
    manifest it names are kept as they are, and the run and the workspace get their copies."""
    final = builds[-1].build_dir / MANIFEST_NAME
    if key is None:
        outputs = {(o.path.name, o.sha256) for b in builds for o in b.outputs if o.path.is_file()}
        kept = keep_signed(final.parent, outputs, (job.run_dir,))
        if kept is not None:
            doc = read_manifest(final)
            for path in (job.run_dir / MANIFEST_NAME, latest_path(job.workspace, job.recipe.name)):
                write_manifest(path, doc)
            return final, kept
    man = write_manifests(job, fetched, trees, builds, started=started)
    return man, write_evidence(job, builds, man, key)


@dataclass(frozen=True, kw_only=True)
class Built:
    """What the build part of a job produced (the fetched sources and prepared trees are empty
    for a build taken from the binary cache)."""

    fetched: dict[str, FetchResult]  # by source
    trees: dict[str, PreparedTree]  # by source
    builds: list[BuildResult]  # in build order
    manifest: Path


def build_stage(job: Job, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree], *,
                downloaded: dict[str, Path], started: str, key: SigningKey | None) -> Built:
    """Configure and build every component, then write the manifest and the evidence (signed
    with ``key`` when there is one)."""
    with ui.stage("build") as st:
        builds = run_build(job, fetched, trees, downloaded=downloaded)
        t_manifest = time.monotonic()
        before = {**recorded_outputs(latest_path(job.workspace, job.recipe.name)),  # kept when --fresh empties it
                  **recorded_outputs(builds[-1].build_dir / MANIFEST_NAME)}
        man, evidence = manifests_and_evidence(job, fetched, trees, builds, started=started, key=key)
        manifest_s = time.monotonic() - t_manifest
        st["note"] = "; ".join(f"{b.component}{' (up to date)' if b.reused else f' built in {b.seconds:.0f} s'}"
                               f"{cache_note(b)}" for b in builds) + f"; {evidence.note()}"
        if manifest_s >= 1.0:
            st["note"] += f"; artifacts and manifest in {manifest_s:.0f} s"
    show_outputs(builds, man, before)
    return Built(fetched=fetched, trees=trees, builds=builds, manifest=man)


def recorded_outputs(manifest: Path) -> dict[str, str]:
    """The sha256 of each output (by path) that a manifest records; empty when there is none
    yet or it cannot be read."""
    try:
        doc = read_manifest(manifest)
    except (OSError, StateError, ValueError):
        return {}
    return {str(o.get("path")): str(o.get("sha256")) for c in doc.get("components", []) for o in c.get("outputs", [])}


def show_outputs(builds: list, manifest: Path, before: dict[str, str]) -> None:
    """The outputs whose bytes changed since the last manifest (every one with -v), then one
    line for the rest and the manifest that lists them all."""
    outputs = [o for b in builds for o in b.outputs]
    changed = [o for o in outputs if ui.is_verbose() or before.get(str(o.path)) != o.sha256]
    for o in changed:
        ui.info(ui.fit(f"  {o.name}: {o.path}  sha256 {o.sha256[:16]}"))
    same = len(outputs) - len(changed)
    ui.info(f"  {same} output(s) up to date, see {manifest}" if same else f"  manifest: {manifest}")


def cache_note(build) -> str:
    """``, 190/192 compiler cache hits`` for a component that compiled through a cache (and
    ``, 1117/1117 shader cache hits`` where it compiled shaders through the shader cache)."""
    note = ""
    doc = build.compiler_cache or {}
    shader = (doc.get("shader_cache") or {}).get("stats") or {}
    for stats, what in ((doc.get("stats") or {}, "compiler"), (shader, "shader")):
        looked = stats.get("hits", 0) + stats.get("misses", 0)
        note += f", {stats['hits']}/{looked} {what} cache hits" if looked else ""
        if what == "compiler" and looked and doc.get("stats_shared_with_builds"):
            note += f" (counted with {doc['stats_shared_with_builds']} other build(s) on the same cache server)"
        if what == "compiler" and (doc.get("dist") or {}).get("dist_compiles"):
            servers = doc["dist"]["dist_compiles"]
            note += f", {sum(servers.values())} compiled on {len(servers)} build server(s)"
    return note


def server_of(builds: list, recipe: Recipe) -> Path:
    """The llama-server the builds produced."""
    for b in reversed(builds):
        for o in b.outputs:
            if o.name == SERVER_OUTPUT:
                return o.path
    raise NotAvailableError(f"recipe {recipe.name} builds no {SERVER_OUTPUT} output",
                            hint=f"add '{SERVER_OUTPUT}: bin/{SERVER_OUTPUT}' to the component's outputs")
