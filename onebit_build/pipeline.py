"""Wires the stages for one recipe: fetch -> patch -> build -> manifest.

Each stage gets a frozen request and returns a result; this module only passes them on.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from onebit_build.core import ui
from onebit_build.building.artifacts import ArtifactSet, collect
from onebit_build.building.assemble import AssemblePlan
from onebit_build.building.assemble import make_plan as make_assemble_plan
from onebit_build.building.builder import BuildRequest, BuildResult, build, resolve_refs
from onebit_build.building.cmake import find_tools
from onebit_build.building.cache.compiler import CacheRequest, Launcher, resolve as resolve_launcher
from onebit_build.core.config import Component, Recipe
from onebit_build.core.pins import Pin, Pins, read_lock, render_lock
from onebit_build.building.fetch import FetchRequest, FetchResult, fetch
from onebit_build.core.errors import ConfigError
from onebit_build.core.fsutil import atomic_write_text
from onebit_build.core.gitops import Git
from onebit_build.building.manifest import latest_path, make_manifest, write_manifest
from onebit_build.building.patch import PrepareRequest, PreparedTree, list_patches, prepare
from onebit_build.building.plan import component_fields, join_lists, resolve_toolchain
from onebit_build.core.project import ProjectRoot
from onebit_build.core.workspace import Workspace


@dataclass(frozen=True, kw_only=True)
class Context:
    project: ProjectRoot  # where pins.yaml, recipes/ and patches/ come from
    workspace: Workspace
    recipe_name: str
    run_dir: Path
    offline: bool = False
    locked: bool = False
    mirror_dirs: tuple[Path, ...] = ()
    jobs: int | None = None
    toolchain_root: str | None = None  # --toolchain-root: overrides the recipe's toolchain root
    overrides: tuple[str, ...] = ()  # the -D overrides, as given (recorded in the manifest)
    compiler_cache: CacheRequest = CacheRequest()  # --compiler-cache / --compiler-cache-url

    @property
    def repo_root(self) -> Path:
        return self.project.path

    @property
    def pins_path(self) -> Path:
        return self.project.pins

    @property
    def recipes_dir(self) -> Path:
        return self.project.recipes

    @property
    def patches_dir(self) -> Path:
        return self.project.patches

    @property
    def data_from(self) -> str:
        return self.project.data_from


def recipe_sources(recipe: Recipe) -> list[str]:
    seen: list[str] = []
    for c in recipe.components:
        if c.source not in seen:
            seen.append(c.source)
    return seen


def run_fetch(ctx: Context, pins: Pins, names: list[str]) -> dict[str, FetchResult]:
    out: dict[str, FetchResult] = {}
    for name in names:
        pin = pins.get(name)
        res = fetch(FetchRequest(pin=pin, workspace=ctx.workspace, mirror_dirs=ctx.mirror_dirs, offline=ctx.offline, log=ctx.run_dir / "fetch.log"))
        ui.detail(f"  {name}: {res.commit} from {res.mirror_used}")
        check_before(pin, res, log=ctx.run_dir / "fetch.log")
        out[name] = res
    newly = {n: r for n, r in out.items() if r.resolved_from}
    if newly and ctx.data_from == "checkout":
        update_lock(pins, newly)
    elif newly:  # the installed package's own files are never written to
        ui.detail(f"  resolved {', '.join(newly)}; {pins.lock_path.name} not updated (the pins come from the installed package)")
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
            f"source {pin.name}: pinned commit {res.commit[:12]} is at or after {pin.before[:12]}, which it must stay before",
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


def run_patch(ctx: Context, fetched: dict[str, FetchResult]) -> dict[str, PreparedTree]:
    trees: dict[str, PreparedTree] = {}
    for name, f in fetched.items():
        trees[name] = prepare(PrepareRequest(
            source=name, commit=f.commit, bare_repo=f.bare_repo,
            patches=list_patches(ctx.patches_dir, name), workspace=ctx.workspace,
            log=ctx.run_dir / "patch.log",
        ))
    return trees


def run_build(ctx: Context, pins: Pins, recipe: Recipe, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree], *,
              build_root: Path | None = None, launcher: Launcher | None = None) -> list[BuildResult]:
    """Build every component in order. ``launcher``: the compiler cache (default: the one
    the context asks for)."""
    tools = find_tools()
    launcher = launcher or resolve_launcher(ctx.compiler_cache)
    fields: dict[str, dict[str, str]] = {}
    results: list[BuildResult] = []
    resolved_pins = {n: pins.get(n) for n in pins.sources}
    for n, f in fetched.items():  # abbreviated pins: use the resolved SHA in references
        resolved_pins[n] = replace(resolved_pins[n], commit=f.commit)
    fields.update(toolchain_fields(ctx, recipe))
    for comp in recipe.components:
        tree = trees[comp.source]
        defines = tuple((k, join_lists(resolve_refs(v, pins=resolved_pins, components=fields), comp.list_separator)) for k, v in comp.defines)
        env = tuple((k, resolve_refs(v, pins=resolved_pins, components=fields)) for k, v in comp.env)
        res = build(BuildRequest(
            recipe=recipe.name, component=comp, source_dir=tree.path, source_commit=tree.commit,
            source_head=tree.head, patch_digest=tree.patch_digest, defines=defines,
            build_root=build_root or ctx.workspace.build_dir, log=ctx.run_dir / f"build-{comp.name}.log",
            jobs=ctx.jobs, env=env, assemble=assemble_plan(ctx, comp, defines),
            inputs=dependency_inputs(comp, results), launcher=launcher,
        ), tools)
        fields[comp.name] = {"build_dir": str(res.build_dir), "source_dir": str(tree.path), **{o.name: str(o.path) for o in res.outputs}}
        results.append(res)
    return results


def toolchain_fields(ctx: Context, recipe: Recipe) -> dict[str, dict[str, str]]:
    """``${toolchain.*}`` values for the recipe (none without a toolchain section)."""
    if recipe.toolchain is None:
        return {}
    return component_fields(recipe, resolve_toolchain(recipe.toolchain, override=ctx.toolchain_root))


def assemble_plan(ctx: Context, comp: Component, defines: tuple[tuple[str, str], ...]) -> AssemblePlan | None:
    """The component's prefix assembly; archives use its CMAKE_AR, else the system ar."""
    if comp.assemble is None:
        return None
    ar = dict(defines).get("CMAKE_AR") or shutil.which("ar")
    return make_assemble_plan(comp.name, comp.assemble, recipes_dir=ctx.recipes_dir, ar=ar)


def dependency_inputs(comp: Component, done: list[BuildResult]) -> tuple[tuple[str, str], ...]:
    """Digests of the outputs of the components ``comp`` refers to (in its build key)."""
    out = []
    for b in done:
        if b.component in comp.references():
            h = hashlib.sha256()
            for o in sorted(b.outputs, key=lambda o: o.name):
                h.update(f"{o.name}\0{o.sha256}\n".encode())
            out.append((b.component, h.hexdigest()))
    return tuple(out)


def collect_artifacts(recipe: Recipe, trees: dict[str, PreparedTree], builds: list[BuildResult]) -> dict[str, list[ArtifactSet]]:
    out: dict[str, list[ArtifactSet]] = {}
    for b in builds:
        comp = recipe.component(b.component)
        out[b.component] = [collect(k, build_dir=b.build_dir, source_dir=trees[comp.source].path) for k in comp.artifacts]
    return out


def write_manifests(ctx: Context, recipe: Recipe, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree], builds: list[BuildResult], *, latest: bool = True) -> Path:
    doc = make_manifest(recipe, fetched, trees, builds, collect_artifacts(recipe, trees, builds),
                        project={"project_root": str(ctx.repo_root), "data_from": ctx.data_from})
    if ctx.overrides:
        doc["overrides"] = list(ctx.overrides)
    final = builds[-1].build_dir / "build-manifest.json"
    write_manifest(final, doc)
    write_manifest(ctx.run_dir / ("build-manifest.json" if latest else f"build-manifest-{builds[-1].build_dir.parent.name}.json"), doc)
    if latest:
        write_manifest(latest_path(ctx.workspace, recipe.name), doc)
    return final
