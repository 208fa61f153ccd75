"""Resolve once: a recipe with its pins, trees, downloads and toolchain turned into the exact
build of each component: its request, toolchain, key, folder, defines and initial cache.

The builder runs what this returns, and ``plan`` / ``--dry-run`` print the same values before
anything is fetched: nothing else interprets a recipe's defines, references, list separators,
downloads or prefix maps. Before the sources are prepared, a tree's place is its canonical path
(the pinned commit and the patches' bytes decide it) and its patched head is not known yet;
neither the key nor the defines depend on that head.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from onebit_build.building.assemble import AssemblePlan, prefix_path
from onebit_build.building.assemble import make_plan as make_assemble_plan
from onebit_build.building.builder import (BuildRequest, Toolchain, build_dir_for, configure_defines, init_cache_of,
                                           key_doc, key_of, resolve_refs)
from onebit_build.building.cache.compiler import Launcher, compile_languages
from onebit_build.building.cmake import Tools
from onebit_build.sources.downloads import cmake_defines
from onebit_build.building.cache.dist import dist_defines
from onebit_build.sources.patch import PreparedTree, canonical_path, list_patches, patch_digest
from onebit_build.building.toolchain import join_lists
from onebit_build.spec.recipe import Component, Recipe
from onebit_build.core.errors import ToolMissingError
from onebit_build.spec.pins import FULL_SHA, Pin, Pins
from onebit_build.spec.interpolate import tree_sources
from onebit_build.core.workspace import Workspace


@dataclass(frozen=True, kw_only=True)
class TreeFacts:
    """Where a source's patched tree is (or will be) and what makes it."""

    path: Path
    commit: str
    patch_digest: str
    head: str = ""  # the patched commit, once the tree is prepared

    @classmethod
    def of(cls, tree: PreparedTree) -> "TreeFacts":
        return cls(path=tree.path, commit=tree.commit, patch_digest=tree.patch_digest, head=tree.head)


def planned_tree(pin: Pin, workspace: Workspace, patches_dir: Path) -> TreeFacts:
    """The tree ``patch`` will prepare for a pin (its canonical path). Pure but for listing
    the patch files."""
    digest = patch_digest(pin.commit, list_patches(patches_dir, pin.name))
    return TreeFacts(path=canonical_path(workspace, pin.name, pin.commit, digest), commit=pin.commit,
                     patch_digest=digest)


@dataclass(frozen=True, kw_only=True)
class ComponentBuild:
    """One component's build, exactly as the builder runs it."""

    request: BuildRequest
    toolchain: Toolchain | None
    key: str | None
    build_dir: Path | None
    defines: tuple[tuple[str, str], ...]  # what CMakeInit.txt sets besides the launchers
    init_cache: str | None  # the whole CMakeInit.txt (with the launchers; the shader launcher is the build's)
    unknown: str = ""  # why the key is not known (no compiler and no finished build, an unresolved pin)

    @property
    def name(self) -> str:
        return self.request.component.name

    @property
    def folder(self) -> Path:
        """The build folder; while its key is not known, the folder with ``<key>`` in its name."""
        return self.build_dir or self.request.build_root / f"{self.request.recipe}-{self.name}-<key>"

    def outputs(self) -> tuple[tuple[str, Path], ...]:
        """The declared outputs' paths, and the assembled prefix (``prefix``) where there is one;
        while the key is not known, in the folder with ``<key>`` in its name."""
        comp = self.request.component
        bdir = self.folder
        outs = tuple((n, bdir / rel) for n, rel in comp.outputs)
        return outs + ((("prefix", prefix_path(bdir)),) if comp.assemble is not None else ())


@dataclass(frozen=True, kw_only=True)
class BuildInputs:
    """What resolving needs besides the recipe and pins."""

    trees: Mapping[str, TreeFacts]
    downloaded: Mapping[str, Path]  # configure-time download -> its unpacked tree
    fields: Mapping[str, Mapping[str, str]]  # ``${toolchain.*}`` values
    build_root: Path
    launcher: Launcher
    tools: Tools
    log: Callable[[str], Path]
    recipes_dir: Path
    jobs: int | None = None
    fresh: bool = False
    environ: Mapping[str, str] | None = None


def resolved_pins(pins: Pins, trees: Mapping[str, TreeFacts]) -> dict[str, Pin]:
    """Every pin, abbreviated ones with the commit their tree was made from. Pure."""
    out = {n: pins.get(n) for n in pins.sources}
    for n, t in trees.items():
        if n in out:
            out[n] = replace(out[n], commit=t.commit)
    return out


def component_builds(recipe: Recipe, pins: Pins, inp: BuildInputs) -> list[ComponentBuild]:
    """Each component of the recipe in build order, resolved: references filled (a later
    component's ``${COMPONENT.FIELD}`` names the earlier one's real folder and outputs)."""
    pinned = resolved_pins(pins, inp.trees)
    fields: dict[str, dict[str, str]] = {k: dict(v) for k, v in inp.fields.items()}
    done: list[ComponentBuild] = []
    for comp in recipe.components:
        cb = _resolve_component(recipe, comp, pinned, fields, inp, done)
        tree = inp.trees[comp.source]
        fields[comp.name] = {"build_dir": str(cb.folder),
                             "source_dir": str(tree.path), **{n: str(p) for n, p in cb.outputs()}}
        done.append(cb)
    return done


def _resolve_component(recipe: Recipe, comp: Component, pinned: Mapping[str, Pin],
                       fields: Mapping[str, Mapping[str, str]], inp: BuildInputs,
                       done: list[ComponentBuild]) -> ComponentBuild:
    tree = inp.trees[comp.source]
    folders = {n: t.path for n, t in inp.trees.items()}
    defines = tuple((k, join_lists(resolve_refs(v, pins=pinned, components=fields, trees=folders),
                                   comp.list_separator)) for k, v in comp.defines)
    missing = [d.name for d in comp.downloads if d.name not in inp.downloaded]
    defines += cmake_defines(comp, {**{n: Path(f"<{n} unpacked>") for n in missing}, **inp.downloaded})
    defines = dist_defines(defines, comp.build_type, inp.launcher.dist,  # -g: -gno-column-info
                           os.environ if inp.environ is None else inp.environ)
    env = tuple((k, resolve_refs(v, pins=pinned, components=fields, trees=folders)) for k, v in comp.env)
    req = BuildRequest(
        recipe=recipe.name, component=comp, source_dir=tree.path, source_commit=tree.commit, source_head=tree.head,
        patch_digest=tree.patch_digest, defines=defines, build_root=inp.build_root,
        log=inp.log(f"build-{comp.name}.log"), jobs=inp.jobs, env=env,
        assemble=_assemble_plan(comp, defines, inp.recipes_dir), inputs=dependency_inputs(comp, done),
        launcher=inp.launcher, languages=compile_languages(recipe.backends), fresh=inp.fresh,
    )
    unknown = next((f"{d.name} is not resolved yet ({d.unknown})" for d in done
                    if d.name in comp.components_used() and d.key is None), "")
    if not unknown and missing:
        unknown = f"the configure-time download(s) {', '.join(missing)} are not unpacked yet (fetch unpacks them)"
    given = tree_sources(v for _, v in (*comp.defines, *comp.env))
    short = next((n for n in (comp.source, *given) if not FULL_SHA.match(inp.trees[n].commit)), None)
    if not unknown and short is not None:
        unknown = f"the abbreviated pin {short}@{inp.trees[short].commit} is resolved at fetch"
    if unknown:
        return ComponentBuild(request=req, toolchain=None, key=None, build_dir=None, defines=defines,
                              init_cache=None, unknown=unknown)
    try:
        toolchain, key, _gone = key_of(req, inp.tools, inp.environ)
    except ToolMissingError as exc:
        return ComponentBuild(request=req, toolchain=None, key=None, build_dir=None, defines=defines,
                              init_cache=None, unknown=exc.message)
    bdir = build_dir_for(req, key)
    final = configure_defines(req, bdir, inp.environ)
    return ComponentBuild(request=req, toolchain=toolchain, key=key, build_dir=bdir, defines=final,
                          init_cache=init_cache_of(final, inp.launcher, req.languages))


def _assemble_plan(comp: Component, defines: tuple[tuple[str, str], ...], recipes_dir: Path) -> AssemblePlan | None:
    """The component's prefix assembly; archives use its CMAKE_AR, else the system ar."""
    if comp.assemble is None:
        return None
    ar = dict(defines).get("CMAKE_AR") or shutil.which("ar")
    return make_assemble_plan(comp.name, comp.assemble, recipes_dir=recipes_dir, ar=ar)


def dependency_inputs(comp: Component, done: list[ComponentBuild]) -> tuple[tuple[str, str], ...]:
    """The build keys (and prefix assemblies) of the components ``comp`` refers to: a rebuilt
    or re-assembled dependency gives this component a new build folder too. Pure."""
    out = []
    for d in done:
        if d.name in comp.components_used():
            assembled = d.request.assemble.digest if d.request.assemble else ""
            out.append((d.name, f"{d.key or '?'}:{assembled}"))
    return tuple(out)



def portable_key(builds: list[ComponentBuild], workspace_root: Path) -> str | None:
    """One key for the recipe's whole build, the same in every workspace (what a binary cache
    files it under): each component's key document with the workspace's path, and the keys of
    the components before it (which name their folders), mapped out. None while a key is not
    known. Pure."""
    swaps: dict[str, str] = {str(workspace_root): "<workspace>"}
    parts = []
    for cb in builds:
        if cb.key is None or cb.toolchain is None:
            return None
        doc = _mapped(key_doc(cb.request, cb.toolchain), swaps)
        key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        swaps.update({cb.key: key, cb.key[:16]: key[:16]})
        parts.append(f"{cb.name}={key}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest() if parts else None


def _mapped(value: Any, swaps: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in swaps.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {k: _mapped(v, swaps) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mapped(v, swaps) for v in value]
    return value
