"""Wires the stages for one recipe: fetch -> patch -> build -> manifest.

Each stage gets a frozen request and returns a result; this module only passes them on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import ui
from .artifacts import ArtifactSet, collect
from .build import BuildRequest, BuildResult, build, resolve_refs
from .cmake import find_tools
from .config import Pins, Recipe, apply_lock, find_recipe, load_pins, load_recipe, read_lock, render_lock
from .fetch import FetchRequest, FetchResult, fetch
from .fsutil import atomic_write_text
from .manifest import make_manifest, write_manifest
from .patch import PrepareRequest, PreparedTree, list_patches, prepare
from .workspace import Workspace


@dataclass(frozen=True, kw_only=True)
class Context:
    repo_root: Path
    pins_path: Path
    recipes_dir: Path
    patches_dir: Path
    workspace: Workspace
    recipe_name: str
    run_dir: Path
    offline: bool = False
    locked: bool = False
    mirror_dirs: tuple[Path, ...] = ()
    jobs: int | None = None


def load(ctx: Context) -> tuple[Pins, Recipe]:
    pins = load_pins(ctx.pins_path)
    pins = apply_lock(pins, read_lock(pins.lock_path), locked=ctx.locked)
    recipe = load_recipe(find_recipe(ctx.recipes_dir, ctx.recipe_name), pins)
    return pins, recipe


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
        out[name] = res
    newly = {n: r for n, r in out.items() if r.resolved_from}
    if newly:
        update_lock(pins, newly)
    return out


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


def run_build(ctx: Context, pins: Pins, recipe: Recipe, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree], *, build_root: Path | None = None) -> list[BuildResult]:
    tools = find_tools()
    fields: dict[str, dict[str, str]] = {}
    results: list[BuildResult] = []
    resolved_pins = {n: pins.get(n) for n in pins.sources}
    for n, f in fetched.items():  # abbreviated pins: use the resolved SHA in references
        from dataclasses import replace

        resolved_pins[n] = replace(resolved_pins[n], commit=f.commit)
    for comp in recipe.components:
        tree = trees[comp.source]
        defines = tuple((k, resolve_refs(v, pins=resolved_pins, components=fields)) for k, v in comp.defines)
        env = tuple((k, resolve_refs(v, pins=resolved_pins, components=fields)) for k, v in comp.env)
        res = build(BuildRequest(
            recipe=recipe.name, component=comp, source_dir=tree.path, source_commit=tree.commit,
            source_head=tree.head, patch_digest=tree.patch_digest, defines=defines,
            build_root=build_root or ctx.workspace.build_dir, log=ctx.run_dir / f"build-{comp.name}.log",
            jobs=ctx.jobs, env=env,
        ), tools)
        fields[comp.name] = {"build_dir": str(res.build_dir), "source_dir": str(tree.path), **{o.name: str(o.path) for o in res.outputs}}
        results.append(res)
    return results


def manifest_path(ws: Workspace, recipe: str) -> Path:
    """Where the latest manifest of a recipe's build is kept."""
    return ws.root / "manifests" / f"{recipe}.json"


def collect_artifacts(recipe: Recipe, trees: dict[str, PreparedTree], builds: list[BuildResult]) -> dict[str, list[ArtifactSet]]:
    out: dict[str, list[ArtifactSet]] = {}
    for b in builds:
        comp = recipe.component(b.component)
        out[b.component] = [collect(k, build_dir=b.build_dir, source_dir=trees[comp.source].path) for k in comp.artifacts]
    return out


def write_manifests(ctx: Context, recipe: Recipe, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree], builds: list[BuildResult], *, latest: bool = True) -> Path:
    doc = make_manifest(recipe, fetched, trees, builds, collect_artifacts(recipe, trees, builds))
    final = builds[-1].build_dir / "build-manifest.json"
    write_manifest(final, doc)
    write_manifest(ctx.run_dir / ("build-manifest.json" if latest else f"build-manifest-{builds[-1].build_dir.parent.name}.json"), doc)
    if latest:
        write_manifest(manifest_path(ctx.workspace, recipe.name), doc)
    return final
