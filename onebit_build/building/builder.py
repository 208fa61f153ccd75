"""Build stage: configure and build one component in a build dir keyed by its whole
configuration, with ninja's progress shown and the full log kept."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from onebit_build.core import ui
from onebit_build.building.cmake import (Tools, build_argv, configure_argv, find_tools, init_cache_text,
                                         write_init_cache)
from onebit_build.building.shaders import session as shaders
from onebit_build.building.cache.dist import debug_build
from onebit_build.building.cache.session import CacheSession
from onebit_build.building.cache.compiler import (LAUNCHER_LANGUAGES, NO_LAUNCHER, Launcher, PrefixMap, describe,
                                                  launcher_defines, nested_project_env, prefix_maps, with_prefix_maps)
from onebit_build.spec.interpolate import INTERPOLATION_RE
from onebit_build.spec.recipe import Component
from onebit_build.spec.pins import Pin
from onebit_build.core.errors import BuildError, CommandError, ConfigError, ToolMissingError
from onebit_build.core.fsutil import StateError, read_state, sha256_file, write_state
from onebit_build.building.compilers import compiler_path, missing_compiler
from onebit_build.building.objects import repair_cross_file_hits, replace_objects
from onebit_build.core.proc import run, version_line
from onebit_build.building.assemble import assemble, prefix_path
from onebit_build.building.outputs import Output, declared_outputs, tree_digest

if TYPE_CHECKING:
    from onebit_build.building.assemble import AssemblePlan

STAMP_KIND = "onebit-build/build-dir"
STAMP_SCHEMA = 1
# How the tool maps the source and build folders out of the objects (part of the build key):
# each to ".", as preprocessor arguments (cache.compiler.map_arguments); a build that compiles
# CUDA also gives nvcc cache.compiler.nvcc_arguments.
PATH_MAPS = "preprocessor-arguments/1"
PATH_MAPS_NVCC = "preprocessor-arguments/1+nvcc-fixed/1"


def path_maps_of(languages: Sequence[str]) -> str:
    """The path-map scheme of a build compiling these languages (its key says which). Pure."""
    return PATH_MAPS_NVCC if "CUDA" in languages else PATH_MAPS
NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """Versions that shape the build's outputs; all of them but the launcher (a compiler cache,
    which gives the same objects) are part of the build key."""

    cmake: str
    ninja: str
    c_compiler: str
    cxx_compiler: str
    launcher: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"cmake": self.cmake, "ninja": self.ninja, "c_compiler": self.c_compiler,
                "cxx_compiler": self.cxx_compiler, "launcher": self.launcher}


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    recipe: str
    component: Component
    source_dir: Path
    source_commit: str
    source_head: str
    patch_digest: str
    defines: tuple[tuple[str, str], ...]  # references already resolved
    build_root: Path
    log: Path
    jobs: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    assemble: "AssemblePlan | None" = None  # how to make the install prefix (assemble.py)
    # Digests of the outputs of the components this one refers to: a rebuilt or
    # re-assembled dependency gives this component a new build dir too.
    inputs: tuple[tuple[str, str], ...] = ()
    launcher: Launcher = NO_LAUNCHER  # the compiler cache; never part of the build key
    languages: tuple[str, ...] = LAUNCHER_LANGUAGES  # whose launchers and path maps are set (compile_languages)
    fresh: bool = False  # configure from an empty build folder, even when a finished one matches


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    component: str
    build_dir: Path
    key: str
    reused: bool
    outputs: tuple[Output, ...]
    toolchain: Toolchain
    configure_argv: tuple[str, ...]
    build_argv: tuple[str, ...]
    seconds: float
    defines: tuple[tuple[str, str], ...] = ()  # what the initial cache set, but the launchers (see cache.compiler)
    prefix_maps: tuple[PrefixMap, ...] = ()  # the folders mapped out of the objects
    compiler_cache: dict = field(default_factory=dict)  # cache.session.CacheReport.to_dict(), or describe() when reused
    key_inputs: Mapping[str, object] = field(default_factory=dict)  # what the key is made of (key_doc)


# --------------------------------------------------------------------------- pure decisions


def resolve_refs(value: str, *, pins: Mapping[str, Pin], components: Mapping[str, Mapping[str, str]],
                 trees: Mapping[str, Path] | None = None) -> str:
    """Replace ``${pin.SRC.FIELD}`` (``tree``: SRC's folder in ``trees``) and ``${COMPONENT.FIELD}``."""

    def sub(m: re.Match[str]) -> str:
        ref = m.group(1)
        parts = ref.split(".")
        if parts[0] == "pin":
            src, field = ".".join(parts[1:-1]), parts[-1]
            if field == "tree":
                if trees is None or src not in trees:
                    raise ConfigError(f"${{{ref}}}: {src} has no prepared tree here", hint="the patch stage makes it")
                return str(trees[src])
            pin = pins[src]
            values = {"commit": pin.commit, "short": pin.commit[:7], "build_number": pin.build_number or "",
                      "branch": pin.branch or ""}
            return values[field]
        comp, _, field = ref.partition(".")
        if comp not in components or field not in components[comp]:
            known = ", ".join(sorted(components.get(comp, {}))) or "(none)"
            raise ConfigError(f"reference ${{{ref}}}: {comp} has no {field!r}", hint=f"fields of {comp}: {known}")
        return components[comp][field]

    return INTERPOLATION_RE.sub(sub, value)


def build_key(req: BuildRequest, toolchain: Toolchain) -> str:
    """Everything that shapes the build goes into its key; a change in any of it gives a new dir."""
    return key_of_inputs(key_doc(req, toolchain))


def key_of_inputs(doc: Mapping[str, object]) -> str:  # what key_doc gives, or a statement records
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def key_doc(req: BuildRequest, toolchain: Toolchain) -> dict:
    """What the build key hashes (the binary cache maps the workspace out of it). Pure. Not the assembly: a
    changed rule re-assembles the prefix in the same build dir (its stamp records that digest)."""
    return {
        "schema": STAMP_SCHEMA, "recipe": req.recipe, "component": req.component.name,
        "source_dir": str(req.source_dir), "source_commit": req.source_commit,
        "patch_digest": req.patch_digest,  # not the patched head: the key is known before the tree is made
        "build_type": req.component.build_type, "defines": list(req.defines), "targets": list(req.component.targets),
        "env": list(req.env), "toolchain": {k: v for k, v in toolchain.as_dict().items() if k != "launcher"},
        "path_maps": path_maps_of(req.languages), "languages": list(req.languages),
        **({"inputs": list(req.inputs)} if req.inputs else {}),
    }


def build_dir_for(req: BuildRequest, key: str) -> Path:
    return req.build_root / f"{req.recipe}-{req.component.name}-{key[:16]}"


def parse_progress(line: str) -> tuple[int, int] | None:
    m = NINJA_PROGRESS.match(line)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2))


# --------------------------------------------------------------------------- toolchain probing


def probe_toolchain(tools: Tools, defines: Sequence[tuple[str, str]], env: Mapping[str, str],
                    launcher: Launcher = NO_LAUNCHER) -> Toolchain:
    problem = missing_compiler(defines, env)
    if problem is not None:
        raise problem
    cc = compiler_path("c", defines, env) or ""
    cxx = compiler_path("cxx", defines, env) or ""
    return Toolchain(
        cmake=tools.cmake_version,
        ninja=tools.ninja_version,
        c_compiler=f"{cc}: {version_line(cc) or ''}",
        cxx_compiler=f"{cxx}: {version_line(cxx) or ''}",
        launcher=launcher.label if launcher.active else None,
    )


def built_without_compiler(req: BuildRequest) -> tuple[Toolchain, str] | None:
    """With no compiler to probe: a finished build folder of this very configuration, made
    by a compiler that is gone now (its recorded toolchain gives its key again), with its
    toolchain and key; None when there is none."""
    for stamp_path in sorted(req.build_root.glob(f"{req.recipe}-{req.component.name}-*/onebit-build.json")):
        try:
            stamp = read_state(stamp_path, STAMP_KIND, STAMP_SCHEMA)
            recorded = Toolchain(**stamp["request"]["toolchain"])
        except (StateError, KeyError, TypeError):
            continue
        key = build_key(req, recorded)
        if stamp.get("key") == key and stamp.get("complete") and build_dir_for(req, key) == stamp_path.parent:
            return recorded, key
    return None


# --------------------------------------------------------------------------- the stage


def key_of(req: BuildRequest, tools: Tools, environ: Mapping[str, str] | None = None
           ) -> tuple[Toolchain, str, ToolMissingError | None]:
    """The toolchain and build key of a request. With no compiler, a finished build folder of
    this very configuration still gives them (with the reason nothing can compile); raises
    ToolMissingError when there is none either."""
    env = {**(os.environ if environ is None else environ), **dict(req.env)}
    try:
        toolchain = probe_toolchain(tools, req.defines, env, req.launcher)
        return toolchain, build_key(req, toolchain), None
    except ToolMissingError as missing:
        found = built_without_compiler(req)
        if found is None:
            raise ToolMissingError(f"{missing.message}; {req.component.name} is not built yet",
                                   hint=missing.hint) from None
        return found[0], found[1], missing


def configure_defines(req: BuildRequest, build_dir: Path,
                      environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """What the initial cache sets besides the launchers: the request's defines with the
    source and build folders mapped out of every object."""
    env = {**(os.environ if environ is None else environ), **dict(req.env)}
    return with_prefix_maps(req.defines, prefix_maps(req.source_dir, build_dir), req.languages, environ=env,
                            plain_debug=bool(req.launcher.dist) and debug_build(req.defines, req.component.build_type),
                            launcher_kind=req.launcher.kind)


def init_cache_of(defines: Sequence[tuple[str, str]], launcher: Launcher, languages: Sequence[str],
                  glslc: Sequence[tuple[str, str]] = ()) -> str:
    """The text of ``CMakeInit.txt``: the defines, the launchers (always written, empty without
    one: the folder may have had one) and the shader launcher. Pure."""
    return init_cache_text([*defines, *launcher_defines(launcher, languages), *glslc])


def build(req: BuildRequest, tools: Tools | None = None) -> BuildResult:
    t0 = time.monotonic()
    tools = tools or find_tools()
    env = dict(req.env)
    toolchain, key, gone = key_of(req, tools)  # gone: no compiler, only a finished build can be used
    bdir = build_dir_for(req, key)
    stamp_path = bdir / "onebit-build.json"
    maps = prefix_maps(req.source_dir, bdir)
    defines = configure_defines(req, bdir)
    conf = configure_argv(tools, req.source_dir, bdir, req.component.build_type, bdir / "CMakeInit.txt")
    bld = build_argv(tools, bdir, req.component.targets, req.jobs)

    def result(outs: tuple[Output, ...], reused: bool, cache: dict) -> BuildResult:
        return BuildResult(component=req.component.name, build_dir=bdir, key=key, reused=reused, outputs=outs,
                           toolchain=toolchain, configure_argv=tuple(conf), build_argv=tuple(bld),
                           seconds=time.monotonic() - t0, defines=defines, prefix_maps=maps, compiler_cache=cache,
                           key_inputs=key_doc(req, toolchain))

    reused = None if req.fresh else _reusable(req, key, bdir)
    if reused is not None:
        note = "build folder reused: nothing compiled"
        return result(reused, True, {**describe(req.launcher), "stats": None, "note": note})
    if gone is not None:
        raise ToolMissingError(f"{gone.message}; the build of {req.component.name} in {bdir} must be made again",
                               hint=gone.hint)

    if req.fresh and bdir.exists():
        ui.info(f"  --fresh: emptying {bdir}")
        shutil.rmtree(bdir)
    bdir.mkdir(parents=True, exist_ok=True)
    write_state(stamp_path, STAMP_KIND, STAMP_SCHEMA,
                {"key": key, "complete": False, "request": _request_doc(req, toolchain)})
    cache = _configure_and_build(req, tools, bdir, defines, conf, bld, env)
    outs = declared_outputs(req.component, bdir) + _assemble_prefix(req, bdir, tools)
    write_state(stamp_path, STAMP_KIND, STAMP_SCHEMA, {
        "key": key, "complete": True, "request": _request_doc(req, toolchain), "assemble": _assemble_digest(req),
        "outputs": [{"name": o.name, "path": str(o.path), "sha256": o.sha256, "size": o.size} for o in outs],
    })
    return result(outs, False, cache)


def _reusable(req: BuildRequest, key: str, bdir: Path) -> tuple[Output, ...] | None:
    """The outputs of a finished build folder with this key whose outputs are unchanged
    (nothing to do); None when it must be built."""
    try:
        stamp = read_state(bdir / "onebit-build.json", STAMP_KIND, STAMP_SCHEMA)
        if stamp.get("key") == key and stamp.get("complete") and stamp.get("assemble") == _assemble_digest(req):
            outs = declared_outputs(req.component, bdir) + _prefix_output(req, bdir)
            recorded = {o["name"]: o["sha256"] for o in stamp.get("outputs", [])}
            if all(recorded.get(o.name) == o.sha256 for o in outs):
                return outs
    except (FileNotFoundError, StateError, BuildError):
        pass
    return None


def _configure_and_build(req: BuildRequest, tools: Tools, bdir: Path, defines: tuple[tuple[str, str], ...],
                         conf: list[str], bld: list[str], env: dict[str, str]) -> dict:
    """Configure and build through the compiler cache; what the cache did (its one warning
    line, if any, printed)."""
    session = CacheSession(req.launcher, source_dir=req.source_dir, build_dir=bdir, defines=defines,
                           build_type=req.component.build_type, ninja=tools.ninja)
    shader_run = None
    try:
        with session:
            shader_run = shaders.prepare(session.launcher, bdir, defines, redis_endpoint=session.redis_endpoint)
            # The launchers are always written (empty without one): the folder may have had one.
            glslc = shader_run.defines if shader_run else ()
            write_init_cache(tools, req.source_dir, bdir, req.component.build_type,
                             init_cache_of(defines, session.launcher, req.languages, glslc))
            run_env = {**env, **session.env}
            ui.info(f"  configuring {req.component.name} ({bdir.name})")
            run(conf, log=req.log, env=run_env, what=f"configure of {req.component.name}",
                hint=f"see the CMake output above; full log {req.log}")
            with ui.StepProgress(f"building {req.component.name}") as bar:
                def on_line(line: str) -> None:
                    prog = parse_progress(line)
                    if prog:
                        bar.update(*prog)
                    elif ui.is_verbose():
                        ui.detail(f"  {line}")

                nested = nested_project_env(session.launcher, prefix_maps(req.source_dir, bdir),
                                            {**os.environ, **run_env})
                run(bld, log=req.log, env={**run_env, **nested}, on_line=on_line, what=f"build of {req.component.name}",
                    tail=40)
            cross = _repair_objects(req, tools, bdir, bld, {**run_env, **nested}, session)
    except CommandError as exc:
        raise BuildError(str(exc.message), hint=f"the last lines are above; full log {req.log}",
                         detail=exc.tail) from None
    finally:
        for line in session.warnings:
            ui.warn(line)
    stats = session.report.stats
    if stats is not None and stats.hit_rate is not None:
        ui.detail(f"  compiler cache: {stats.hits}/{stats.hits + stats.misses} hits ({session.launcher.label})")
    doc = session.report.to_dict()
    if cross:
        doc["cross_file_hits"] = cross
    if shader_run is not None:
        doc["shader_cache"] = shader_run.report()
        for line in shader_run.warnings or ():
            ui.warn(line)
        if (s := doc["shader_cache"].get("stats")) and s["requests"]:
            ui.detail(f"  shader cache: {s['hits']}/{s['hits'] + s['misses']} hits")
    return doc


def _repair_objects(req: BuildRequest, tools: Tools, bdir: Path, bld: list[str], env: dict[str, str],
                    session: CacheSession) -> list[str]:
    """Objects the cache served from another source's entry (a cache keys an object on its
    preprocessed text: the second source's object records the first one's file name), and those
    build servers compiled before a spot-check found one that differs (``cache.dist_watch``):
    compiled again here, without the cache, and linked again."""
    env = {**os.environ, **env}
    fixed, failed = repair_cross_file_hits(bdir, ninja=tools.ninja, env=env) if session.launcher.active else ([], [])
    remote = session.dist_after_build(lambda names: replace_objects(bdir, names, ninja=tools.ninja, env=env))
    for why in failed + remote[1]:
        ui.warn(f"compiler cache: {why}; the outputs may differ from a build without the cache")
    for n, what in ((len(fixed), "the cache served from another source's entry"),
                    (len(remote[0]), "build servers made before distribution stopped")):
        if n:
            ui.info(f"  {n} object(s) {what} compiled again without it")
    if fixed or remote[0]:
        run(bld, log=req.log, env=env, what=f"relink of {req.component.name}", tail=40)
    return fixed


def _assemble_digest(req: BuildRequest) -> str | None:
    return req.assemble.digest if req.assemble else None


def _prefix_output(req: BuildRequest, bdir: Path) -> tuple[Output, ...]:
    """The assembled prefix as it is now (an output named ``prefix``); missing is an error."""
    if req.assemble is None:
        return ()
    prefix = prefix_path(bdir)
    if not prefix.is_dir():
        raise BuildError(f"{req.component.name}: the assembled prefix {prefix} is missing", hint="run the build again")
    # Each shared library in it is an output of its own too: the manifest lists (and install
    # carries) every library the prefix provides, those bundled from the build folder included.
    lib = prefix / "lib"
    libs = sorted(p for p in lib.glob("*.so*") if p.is_file() and not p.is_symlink()) if lib.is_dir() else []
    return (Output(name="prefix", path=prefix, sha256=tree_digest(prefix), size=0),
            *(Output(name=f"prefix/lib/{p.name}", path=p, sha256=sha256_file(p), size=p.stat().st_size) for p in libs))


def _assemble_prefix(req: BuildRequest, bdir: Path, tools: Tools) -> tuple[Output, ...]:
    if req.assemble is None:
        return ()
    with ui.StepProgress(f"assembling {req.component.name}"):
        assemble(req.assemble, build_dir=bdir, source_dir=req.source_dir, log=req.log, cmake=tools.cmake)
    return _prefix_output(req, bdir)


def _request_doc(req: BuildRequest, toolchain: Toolchain) -> dict[str, object]:
    return {
        "recipe": req.recipe, "component": req.component.name, "source_dir": str(req.source_dir),
        "source_commit": req.source_commit, "source_head": req.source_head, "patch_digest": req.patch_digest,
        "build_type": req.component.build_type, "defines": dict(req.defines), "targets": list(req.component.targets),
        "toolchain": toolchain.as_dict(), "path_maps": path_maps_of(req.languages), "host": platform.platform(),
    }
