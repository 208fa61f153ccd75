"""The build part of a job: fetch -> patch -> configure/build -> manifest.

Each step gets the job (and what the step before it returned) and returns a typed result;
this module only passes them on.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onebit_build.checking.artifacts import ArtifactSet, collect
from onebit_build.building.builder import BuildResult, build
from onebit_build.building.cmake import Tools, find_tools
from onebit_build.sources.downloads import check_against_lock, provide_all
from onebit_build.building.cache.compiler import Launcher
from onebit_build.sources.fetch import FetchRequest, FetchResult, fetch
from onebit_build.checking.manifest import (MANIFEST_NAME, SERVER_OUTPUT, latest_path, load_manifest, make_manifest,
                                            read_manifest, utc_now, write_manifest)
from onebit_build.sources.patch import PrepareRequest, PreparedTree, list_patches, prepare
from onebit_build.building.toolchain import component_fields
from onebit_build.core import ui
from onebit_build.spec.recipe import Recipe
from onebit_build.core.errors import ConfigError, NotAvailableError
from onebit_build.core.fsutil import StateError, atomic_write_text
from onebit_build.core.gitops import Git
from onebit_build.spec.pins import Pin, Pins, read_lock, render_lock
from onebit_build.evidence.emit import EmitRequest, Emitted, emit, keep_signed, toolchain_files
from onebit_build.evidence.keys import SigningKey, signing_key_from
from onebit_build.job.job import Job
from onebit_build.job.resolve import BuildInputs, TreeFacts, component_builds
from onebit_build.doctor.requirements import check_before_build
from onebit_build.job.stage import Stage

if TYPE_CHECKING:
    from onebit_build.job.pull import CacheOptions


def run_fetch(job: Job, names: list[str]) -> dict[str, FetchResult]:
    pins, opts = job.pins, job.settings
    out: dict[str, FetchResult] = {}
    for name in names:
        pin = pins.get(name)
        res = fetch(FetchRequest(pin=pin, workspace=job.workspace, mirror_dirs=opts.mirror_dirs, offline=opts.offline,
                                 log=job.log("fetch.log")))
        ui.detail(f"  {name}: {res.commit} from {res.mirror_used}")
        check_before(pin, res, log=job.log("fetch.log"))
        out[name] = res
    newly = {n: r for n, r in out.items() if r.resolved_from}
    if newly and job.project.data_from == "checkout":
        update_lock(pins, newly)
    elif newly:  # the installed package's own files are never written to
        ui.detail(f"  resolved {', '.join(newly)}; {pins.lock_path.name} not updated "
                  "(the pins come from the installed package)")
    return out


def check_before(pin: Pin, res: FetchResult, *, log: Path | None = None) -> bool | None:
    """A pin with ``before: SHA`` must not be that commit nor descend from it. Checked when
    the mirror holds that commit (True: holds); None when it could not be checked."""
    if not pin.before:
        return None
    git = Git(res.bare_repo, log=log, bare=True)
    if not git.has_commit(pin.before):
        ui.detail(f"  {pin.name}: constraint 'before {pin.before[:12]}' not checked (that commit is not in the mirror)")
        return None
    r = git.run("merge-base", "--is-ancestor", pin.before, res.commit, check=False)
    if r.status == 0:
        raise ConfigError(
            f"source {pin.name}: pinned commit {res.commit[:12]} is at or after {pin.before[:12]}, "
            "which it must stay before",
            hint=f"pin a commit older than {pin.before[:12]} in pins.yaml ({pin.note or 'see the note there'})",
        )
    return True


def update_lock(pins: Pins, resolved: dict[str, FetchResult]) -> bool:
    """Record the full SHAs of abbreviated pins in pins.lock. Returns whether it changed."""
    lock = read_lock(pins.lock_path)
    changed = False
    for name, r in resolved.items():
        assert r.resolved_from is not None
        entry = {"prefix": r.resolved_from, "commit": r.commit}
        if lock.get(name) != entry:
            lock[name] = entry
            changed = True
    if changed:
        atomic_write_text(pins.lock_path, render_lock(lock))
        ui.info(f"  recorded resolved commits in {pins.lock_path.name}")
    return changed


def run_patch(job: Job, fetched: dict[str, FetchResult]) -> dict[str, PreparedTree]:
    trees: dict[str, PreparedTree] = {}
    for name, f in fetched.items():
        trees[name] = prepare(PrepareRequest(
            source=name, commit=f.commit, bare_repo=f.bare_repo,
            patches=list_patches(job.project.patches, name), workspace=job.workspace,
            log=job.log("patch.log"),
        ))
    return trees


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
    doc.update({"started": started or doc["created"], "toolchain_files": toolchain_files(builds, launcher_of(builds))})
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


# --------------------------------------------------------------------------- the build part


@dataclass(frozen=True, kw_only=True)
class Built:
    """What the build part of a job produced."""

    fetched: dict[str, FetchResult]  # by source
    trees: dict[str, PreparedTree]  # by source
    builds: list[BuildResult]  # in build order
    manifest: Path


def build_part(job: Job, until: Stage = Stage.BUILD, binary_cache: CacheOptions | None = None) -> Built | None:
    """Fetch, patch and build, up to ``until``; None when it stops before the build. With
    ``binary_cache``, the build is first asked of that registry."""
    recipe = job.recipe
    planned = {c.name: c.requested for c in job.plan.components}
    started, key = utc_now(), None
    if until >= Stage.BUILD:  # every requirement the build will meet, named at once before anything starts
        check_before_build(recipe, job.pins, job.workspace, planned=planned)
        key = signing_key_from(job.settings.signing_key, os.environ)  # a bad key stops it here
        if binary_cache is not None and binary_cache.ref is not None:
            from onebit_build.job.pull import from_binary_cache# it builds on this module

            pulled = from_binary_cache(job, binary_cache)
            if pulled is not None:
                return pulled
    with ui.stage("fetch") as st:
        fetched = run_fetch(job, recipe.sources_in_order())
        st["note"] = ", ".join(f"{n}@{f.commit[:12]} ({f.mirror_used.split(':')[0]})" for n, f in fetched.items())
        # The configure-time downloads too, so that --offline names a missing one before configure.
        downloaded = provide_all(recipe, job.workspace, job.settings.mirror_dirs, job.settings.offline)
        if downloaded:
            st["note"] += f"; {len(downloaded)} configure-time download(s): {', '.join(downloaded)}"
    if until == Stage.FETCH:
        return None
    with ui.stage("patch") as st:
        trees = run_patch(job, fetched)
        st["note"] = ", ".join(f"{n}: {len(t.patches)} patch(es){' (reused)' if t.reused else ''}"
                               for n, t in trees.items())
    if until == Stage.PATCH:
        for t in trees.values():
            ui.info(f"  {t.source}: {t.path}")
        return None
    req = recipe.requires
    if req is not None and req.cxx_standard is not None:  # read in the prepared tree
        source = recipe.component(req.cxx_standard.component).source
        check_before_build(recipe, job.pins, job.workspace, planned=planned, tree=trees[source].path)
    with ui.stage("build") as st:
        builds = run_build(job, fetched, trees, downloaded=downloaded)
        t_manifest = time.monotonic()
        before = {**recorded_outputs(latest_path(job.workspace, recipe.name)),  # kept when --fresh empties the folder
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
