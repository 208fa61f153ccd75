"""Plan: the whole run described without doing it.

:func:`make_plan` / :func:`render_plan` describe sources, pins, patches, every configure
command with every define, targets, outputs and the runtime environment, for ``--dry-run``.
The toolchain's paths come from :mod:`onebit_build.building.toolchain`. Nothing here touches
the network, a build dir or a server.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from onebit_build.building.builder import resolve_refs
from onebit_build.building.cache.compiler import NO_LAUNCHER, Launcher, describe, launcher_defines
from onebit_build.building.shaders.session import ShaderCache, plan_shader_cache, wants_shaders
from onebit_build.building.cmake import build_argv, configure_argv, find_tools
from onebit_build.sources.downloads import places, unpacked_tree
from onebit_build.building.toolchain import ToolchainSettings, resolve_toolchain, toolchain_refs
from onebit_build.spec.recipe import Component, Recipe
from onebit_build.spec.pins import Pin, Pins
from onebit_build.sources.patch import PatchFile, canonical_path, list_patches, patch_digest
from onebit_build.core.errors import ConfigError, ToolMissingError
from onebit_build.core.workspace import Workspace
from onebit_build.job.resolve import BuildInputs, ComponentBuild, component_builds, planned_tree, portable_key

# --------------------------------------------------------------------------- the plan

PLAN_WIDTH = 120  # no line of the printed plan is longer


@dataclass(frozen=True, kw_only=True)
class SourcePlan:
    name: str
    url: str
    commit: str
    resolved: bool
    note: str | None
    before: str | None
    places: tuple[str, ...]  # where fetch looks, in order
    patches: tuple[PatchFile, ...]
    tree: str


@dataclass(frozen=True, kw_only=True)
class DownloadPlan:
    """One configure-time download as the run will make it (``plan --json`` shows these fields)."""

    name: str
    url: str
    sha256: str
    lock: str | None
    places: tuple[str, ...]  # where it is looked for, in order
    cmake_variable: str


@dataclass(frozen=True, kw_only=True)
class ComponentPlan:
    name: str
    source: str
    key: str | None  # the build key (None: not known before fetch, see ``unknown``)
    build_dir: str
    init_cache: str | None  # the CMakeInit.txt the build writes (the shader launcher aside)
    unknown: str  # why the key is not known yet ("" when it is)
    configure: tuple[str, ...]
    build: tuple[str, ...]
    defines: tuple[tuple[str, str], ...]  # as CMakeInit.txt sets them (the path maps included)
    requested: tuple[tuple[str, str], ...]  # the recipe's and -D's, references and lists resolved
    launchers: tuple[tuple[str, str], ...] = ()  # the compiler launchers CMakeInit.txt sets besides
    targets: tuple[str, ...]
    outputs: tuple[tuple[str, str], ...]
    assemble: tuple[str, ...]
    artifacts: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    downloads: tuple[DownloadPlan, ...] = ()  # configure-time downloads


@dataclass(frozen=True, kw_only=True)
class Plan:
    recipe: Recipe
    workspace: Path
    toolchain: ToolchainSettings | None
    sources: tuple[SourcePlan, ...]
    components: tuple[ComponentPlan, ...]
    runtime_env: tuple[tuple[str, str], ...]
    problems: tuple[str, ...] = field(default_factory=tuple)
    launcher: Launcher = NO_LAUNCHER  # the compiler cache (not part of any build key)
    shader_cache: ShaderCache | None = None  # for builds with Vulkan shaders (not part of any build key)
    binary_key: str | None = None  # the whole build's key in any workspace (resolve.portable_key), once known


def _source_plan(pin: Pin, ws: Workspace, patches_dir: Path, mirror_dirs: tuple[Path, ...],
                 offline: bool) -> SourcePlan:
    patches = list_patches(patches_dir, pin.name)
    places = [f"cache {ws.bare_repo(pin.name)}"]
    places += [f"mirror {d / (pin.name + '.git')} or .bundle" for d in mirror_dirs]
    places += [f"sdist {m.label} (sha256 {m.sha256[:16]})" for m in pin.mirrors]
    places.append("network: not with --offline" if offline else f"network {pin.url}")
    if pin.resolved:
        tree = str(canonical_path(ws, pin.name, pin.commit, patch_digest(pin.commit, patches)))
    else:
        tree = str(ws.src_dir / f"{pin.name}-<{pin.commit} resolved at fetch>-<patch digest>")
    return SourcePlan(name=pin.name, url=pin.url, commit=pin.commit, resolved=pin.resolved, note=pin.note,
                      before=pin.before, places=tuple(places), patches=patches, tree=tree)


def _assemble_lines(comp: Component, prefix: str) -> tuple[str, ...]:
    spec = comp.assemble
    if spec is None:
        return ()
    lines = [f"prefix {prefix}"]
    if spec.install:
        lines.append("cmake --install <build dir> --prefix <prefix>")
    lines += [f"copy {r.origin}:{r.glob} -> {r.to}/" for r in spec.copy]
    lines += [f"archive {r.origin}:{r.glob} -> {r.to} (CMAKE_AR rcsD)" for r in spec.archive]
    lines += [f"configure recipes/{r.template} -> {r.to}" for r in spec.configure]
    return tuple(lines)


def make_plan(
    recipe: Recipe, pins: Pins, *, workspace: Workspace, patches_dir: Path, recipes_dir: Path,
    mirror_dirs: tuple[Path, ...] = (), offline: bool = False, toolchain_root: str | None = None,
    environ: Mapping[str, str] | None = None, launcher: Launcher = NO_LAUNCHER,
) -> Plan:
    """The run described without doing it; each component as :func:`component_builds`
    resolves it for the builder."""
    env = os.environ if environ is None else environ
    toolchain = resolve_toolchain(recipe.toolchain, override=toolchain_root, environ=env) if recipe.toolchain else None
    problems: list[str] = []
    names = recipe.sources_in_order()
    sources = tuple(_source_plan(pins.get(n), workspace, patches_dir, mirror_dirs, offline) for n in names)
    fields = _toolchain_fields(recipe, toolchain, problems)
    builds = _component_builds(recipe, pins, workspace=workspace, patches_dir=patches_dir, recipes_dir=recipes_dir,
                               fields=fields, launcher=launcher, env=env, problems=problems)
    comps = tuple(_component_plan(cb, workspace=workspace, mirror_dirs=mirror_dirs, offline=offline) for cb in builds)
    trees = {s.name: s.tree for s in sources}
    for c in comps:
        fields[c.name] = {"build_dir": c.build_dir, "source_dir": trees[c.source], **dict(c.outputs)}
    run_env = _run_env(recipe, env, fields, toolchain is not None)
    shader_cache = None
    if any(wants_shaders(c.defines) for c in comps):
        shader_cache = plan_shader_cache(launcher, glslc=shutil.which("glslc", path=env.get("PATH")), env=env)
    return Plan(recipe=recipe, workspace=workspace.root, toolchain=toolchain, sources=sources, components=comps,
                runtime_env=tuple(run_env), problems=tuple(problems), launcher=launcher, shader_cache=shader_cache,
                binary_key=portable_key(builds, workspace.root))


def plan_of(settings, project, pins: Pins, recipe: Recipe, workspace: Workspace) -> Plan:
    """The plan of a job's settings (``job.model.Settings``), made once: what ``plan`` prints,
    ``doctor`` and the requirements check, and the build runs."""
    from onebit_build.building.cache.compiler import resolve as resolve_cache

    return make_plan(recipe, pins, workspace=workspace, patches_dir=project.patches, recipes_dir=project.recipes,
                     mirror_dirs=settings.mirror_dirs, offline=settings.offline,
                     toolchain_root=settings.toolchain_root, launcher=resolve_cache(settings.compiler_cache))


def _component_builds(recipe: Recipe, pins: Pins, *, workspace: Workspace, patches_dir: Path, recipes_dir: Path,
                      fields: dict[str, dict[str, str]], launcher: Launcher, env: Mapping[str, str],
                      problems: list[str]) -> list[ComponentBuild]:
    try:
        tools = find_tools()
    except ToolMissingError as exc:
        problems.append(f"{exc.message} ({exc.hint})")
        return []
    trees = {n: planned_tree(pins.get(n), workspace, patches_dir) for n in recipe.sources_in_order()}
    downloaded = {d.name: t for c in recipe.components for d in c.downloads
                  if (t := unpacked_tree(workspace, d)) is not None}
    inputs = BuildInputs(trees=trees, downloaded=downloaded, fields=fields, build_root=workspace.build_dir,
                         launcher=launcher, tools=tools, log=lambda name: workspace.root / "runs" / "<run>" / name,
                         recipes_dir=recipes_dir, environ=env)
    try:
        return component_builds(recipe, pins, inputs)
    except ConfigError as exc:
        problems.append(exc.message)
        return []


def _toolchain_fields(recipe: Recipe, toolchain: ToolchainSettings | None,
                      problems: list[str]) -> dict[str, dict[str, str]]:
    """The reference table the plan starts with; a missing piece is shown in place and,
    when something refers to it, added to ``problems``."""
    fields: dict[str, dict[str, str]] = {}
    if toolchain is None:
        return fields
    if not toolchain.root.is_dir():
        problems.append(f"toolchain root {toolchain.root} does not exist (install TheRock, or use --toolchain-root)")
    fields["toolchain"] = dict(toolchain.fields())
    for name in ("ar", "libhsa"):
        if name not in fields["toolchain"]:
            fields["toolchain"][name] = f"<{name} not found under {toolchain.root}>"
            if any(name in toolchain_refs((*c.defines, *c.env, *recipe.smoke.env)) for c in recipe.components):
                problems.append(f"toolchain {name}: not found under {toolchain.root}")
    return fields


def _component_plan(cb: ComponentBuild, *, workspace: Workspace, mirror_dirs: tuple[Path, ...],
                    offline: bool) -> ComponentPlan:
    """One component as the run will configure and build it (its outputs include the
    assembled prefix, when it has one)."""
    comp = cb.request.component
    bdir = str(cb.folder)
    tools = find_tools()
    configure = tuple(configure_argv(tools, cb.request.source_dir, Path(bdir), comp.build_type,
                                     Path(bdir) / "CMakeInit.txt"))
    prefix = f"{bdir}/onebit-prefix"
    outputs = tuple((n, f"{bdir}/{rel}") for n, rel in comp.outputs)
    if comp.assemble is not None:
        outputs += (("prefix", prefix),)
    return ComponentPlan(
        name=comp.name, source=comp.source, key=cb.key, build_dir=bdir, init_cache=cb.init_cache, unknown=cb.unknown,
        configure=configure, build=tuple(build_argv(tools, Path(bdir), comp.targets, None)), defines=cb.defines,
        requested=cb.request.defines, launchers=launcher_defines(cb.request.launcher, cb.request.languages),
        targets=comp.targets, outputs=outputs, assemble=_assemble_lines(comp, prefix), artifacts=comp.artifacts,
        env=cb.request.env, downloads=_download_plans(comp, workspace, mirror_dirs, offline),
    )


def _run_env(recipe: Recipe, env: Mapping[str, str], fields: dict[str, dict[str, str]],
             filled: bool) -> list[tuple[str, str]]:
    """The smoke stage's environment as the plan shows it (a variable the user set wins)."""
    out = []
    for key, value in recipe.smoke.env:
        if env.get(key):
            out.append((key, f"{env[key]}  (given in the environment)"))
        else:
            out.append((key, resolve_refs(value, pins={}, components=fields) if filled else value))
    return out


def _download_plans(comp: Component, ws: Workspace, mirror_dirs: tuple[Path, ...],
                    offline: bool) -> tuple[DownloadPlan, ...]:
    return tuple(DownloadPlan(name=d.name, url=d.public, sha256=d.sha256, lock=d.lock, cmake_variable=d.cmake_variable,
                              places=tuple(places(d, ws, mirror_dirs, offline))) for d in comp.downloads)


def _download_lines(downloads: tuple[DownloadPlan, ...]) -> list[str]:
    lines = []
    for d in downloads:
        lines.append(f"{d.name}: {d.url}")
        lines.append(f"  sha256 {d.sha256}" + (f" (checked against the pinned tree's {d.lock})" if d.lock else ""))
        lines.append(f"  fetched by onebit-build from, in order: {'; '.join(d.places)}")
        lines.append(f"  given to CMake as {d.cmake_variable} (with FETCHCONTENT_FULLY_DISCONNECTED=ON)")
    return lines


def _cmd(argv: tuple[str, ...], indent: str) -> list[str]:
    """A command for a person to read or paste: the program, then one option (with its
    value) per line, shell-quoted."""
    words = [shlex.quote(a) for a in argv]
    groups = [words[0]] if words else []
    i = 1
    while i < len(words):
        if words[i].startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            groups.append(f"{words[i]} {words[i + 1]}")
            i += 2
        else:
            groups.append(words[i])
            i += 1
    return [indent + (g if n == 0 else "    " + g) + (" \\" if n < len(groups) - 1 else "")
            for n, g in enumerate(groups)]


def fold(line: str, width: int = PLAN_WIDTH, indent: str | None = None) -> list[str]:
    """A line of at most ``width`` columns where it can be cut (after '; '), the rest indented
    under it; a path is never cut. Pure."""
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 4) if indent is None else indent
    for sep in ("; ",):
        cut = line.rfind(sep, 0, width - len(sep) + 1)
        if cut > len(indent):
            head = line[:cut + len(sep)].rstrip()
            return [head] + fold(indent + line[cut + len(sep):].lstrip(), width, indent)
    return [line]


def render_plan(plan: Plan, *, project: str | None = None) -> list[str]:
    """The plan's lines, as ``plan`` prints them."""
    r = plan.recipe
    out = [f"plan for recipe {r.name}: {r.description}", "(dry run: nothing is fetched, built or started)", ""]
    if project:
        out.append(f"project    {project}")
    out.append(f"workspace  {plan.workspace}")
    out += _cache_lines(plan)
    out += _toolchain_lines(plan)
    out += _source_lines(plan)
    out += _component_lines(plan)
    out += _runtime_lines(plan)
    if plan.problems:
        out.append("")
        out.append("problems a real run would meet")
        out += [f"  {p}" for p in plan.problems]
    return [folded for line in out for folded in fold(line)]


def _cache_lines(plan: Plan) -> list[str]:
    ln = plan.launcher
    doc = describe(ln)
    out = [f"compiler cache  {ln.label}", f"  ({ln.reason}; the launcher of every compiler; not part of the build key)"]
    for k, v in (doc.get("variables") or {}).items():
        out.append(f"  passed through  {k}={v}")
    sc = plan.shader_cache
    if sc is not None:
        where = (sc.remote.public if sc.remote else sc.local) if sc.active else ""
        label = f"glslc launcher, {sc.describe()['backend']} {where}" if sc.active else "none"
        out.append(f"shader cache  {label}  ({sc.reason}; Vulkan_GLSLC_EXECUTABLE for the Vulkan shaders;"
                   " not part of the build key)")
    if ln.dist:
        out.append(f"  distributed to {ln.dist}: probed and spot-checked against local compiles; the token from"
                   " $ONEBIT_COMPILER_CACHE_DIST_TOKEN_FILE or $ONEBIT_COMPILER_CACHE_DIST_TOKEN")
    out.append("path maps  source and build folders mapped to '.' in every object")
    out.append("  (-Xpreprocessor -f{macro,debug}-prefix-map; in the build key)")
    if plan.binary_key:
        out.append(f"binary key  {plan.binary_key}")
        out.append("  (the same in every workspace; 'publish' tags the build with the recipe's name and this key)")
    return out


def _toolchain_lines(plan: Plan) -> list[str]:
    out: list[str] = []
    tc = plan.toolchain
    if tc is not None:
        out.append("")
        out.append("toolchain")
        out.append(f"  root     {tc.root}  (from {tc.root_from}; override with --toolchain-root or ${tc.spec.root_env})"
                   + ("" if tc.root.is_dir() else "  [not present on this machine]"))
        if tc.spec.ar:  # a recipe that names no archiver leaves CMake to find one
            out.append(f"  ar       {tc.ar or '<not found: tried ' + ', '.join(tc.spec.ar) + '>'}")
        if tc.spec.libhsa:
            out.append(f"  libhsa   {tc.libhsa or '<not found under the root: ' + ', '.join(tc.spec.libhsa) + '>'}")
    return out


def _source_lines(plan: Plan) -> list[str]:
    out: list[str] = []
    out.append("")
    out.append("sources")
    for s in plan.sources:
        state = "full SHA" if s.resolved else "abbreviated: resolved at fetch and recorded in pins.lock"
        out.append(f"  {s.name}: {s.url} @ {s.commit} ({state})")
        if s.note:
            out.append(f"    note: {s.note}")
        if s.before:
            out.append(f"    constraint: must not descend from {s.before} (checked after fetch "
                       "when that commit is present)")
        out.append(f"    fetched from, in order: {'; '.join(s.places)}")
        out.append(f"    patched tree: {s.tree}")
        if s.patches:
            for p in s.patches:
                out.append(f"    patch {p.name}  sha256 {p.sha256[:16]}")
        else:
            out.append("    patches: none")
    return out


def wrap_define(name: str, value: str, indent: str, width: int = PLAN_WIDTH) -> list[str]:
    """``NAME=VALUE`` in lines of at most ``width`` columns where the value has spaces to cut
    at: a long value of several words continues on the next lines. A word (a path, a list)
    is never cut. Pure."""
    first = f"{indent}{name}={value}"
    if len(first) <= width or " " not in value:
        return [first]
    room = max(width - len(indent) - 4, 20)
    lines, line = [], ""
    for word in value.split(" "):
        if line and len(line) + 1 + len(word) > room:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return [f"{indent}{name}="] + [f"{indent}    {part}" for part in lines]


def _component_lines(plan: Plan) -> list[str]:
    out: list[str] = ["", f"components, in build order: {', '.join(c.name for c in plan.components)}"]
    for i, c in enumerate(plan.components, 1):
        out.append(f"  {i}. {c.name} (source {c.source})")
        out.append(f"    build key  {c.key}" if c.key else f"    build key  not known yet: {c.unknown}")
        out.append(f"    build dir  {c.build_dir}")
        out.append("    configure")
        out += _cmd(c.configure, "      ")
        out.append("    initial cache (CMakeInit.txt)")
        for name, value in (*c.defines, *c.launchers):
            out += wrap_define(name, value, "      ")
        out.append("    build")
        out += _cmd(c.build, "      ")
        if c.env:
            out.append("    environment")
            out += [line for k, v in c.env for line in wrap_define(k, v, "      ")]
        if c.downloads:
            out.append("    configure-time downloads (configure itself downloads nothing)")
            out += [f"      {line}" for line in _download_lines(c.downloads)]
        if c.assemble:
            out.append("    assemble")
            out += [f"      {line}" for line in c.assemble]
        out.append("    outputs")
        out += [f"      {n}: {p}" for n, p in c.outputs]
        if c.artifacts:
            out.append(f"    kernel artifacts  {', '.join(c.artifacts)} (hashed into the build manifest; "
                       "see 'onebit-build verify')")
    return out


def _runtime_lines(plan: Plan) -> list[str]:
    out: list[str] = []
    out.append("")
    out.append("runtime (smoke)")
    r = plan.recipe
    sm = r.smoke
    out.append(f"  devices  {', '.join(sm.devices)}")
    for k, v in plan.runtime_env:
        out.append(f"  env      {k}={v}")
    if r.jit_cache is not None:
        out.append(f"  kernels  compiled at run time into ~/{r.jit_cache.home} (or ${r.jit_cache.env}): "
                   "'location --jit-cache' names it, 'gc --jit-cache' empties it")
    m = r.model
    if m is not None:
        out.append(f"  model    {m.name}: {m.file}")
        if m.origin:
            out.append(f"           from {m.origin}")
        if m.path_env:
            out.append(f"           supplied by the user: --model PATH or ${m.path_env}")
        if m.pypi:
            out.append("           from pypi:")
            out += [f"             {r}" for r in m.requirements]
        out.append(f"           sha256 {m.sha256 or '(not pinned: recorded in models.lock on first use)'}")
    for p in sm.prompts:
        out.append(f"  check    {p.name}: answer to {p.prompt!r} contains {p.expect!r}")
    if sm.reference_tok_s:
        refs = ", ".join(f"{d} {v:g} tok/s" for d, v in sm.reference_tok_s)
        out.append(f"  decode   {sm.speed_tokens} tokens x {sm.speed_repeats}; the recipe's figures {refs} (workload "
                   f"not recorded: shown, not judged); on par within {sm.tolerance:.0%} of a "
                   "reference of the same workload")
    return out
