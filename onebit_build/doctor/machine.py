"""Doctor: check this machine for everything a recipe needs, and say how to fix each gap.

For a recipe it checks, in order:

- the toolchain of its ``toolchain:`` section: the root folder, every compiler its
  components name (e.g. TheRock's amdclang and amdclang++, and amdclang for assembly),
  the archiver and the HSA runtime library the smoke stage loads;
- CMake and Ninja, with their versions;
- for Vulkan: glslc and Vulkan headers recent enough for ggml-vulkan;
- for CUDA: nvcc, and cuobjdump and nvdisasm where the recipe lists cubin artifacts;
- each pinned source: in a mirror dir, cached, its sdist mirror cached or listed by the
  package index, or its git URL reachable;
- the caches beyond this machine: the sccache-dist scheduler ``--compiler-cache-dist`` names
  (``sccache --dist-status``) and the shared store of the shader cache (S3, WebDAV or Redis);
- once the recipe is built: each component's CMake cache holds the recipe's fixed defines
  (a build made before the recipe changed, e.g. without ``IREE_HAL_DRIVER_AMDGPU=ON``, is
  named), and ``llama-server --list-devices`` shows every smoke device and the recipe's
  GPU architecture (before that, ``vulkaninfo`` gives an earlier hint).

Nothing is installed or changed; reading and short probes only.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onebit_build.checking.artifacts import read_cmake_cache
from onebit_build.building.builder import resolve_refs
from onebit_build.building.compilers import compiler_path
from onebit_build.spec.recipe import Recipe
from onebit_build.spec.pins import Pins
from onebit_build.spec.interpolate import tree_sources
from onebit_build.core.errors import OnebitError
from onebit_build.core.fsutil import StateError
from onebit_build.core.proc import PROBE_TIMEOUT_S, capture, probe, version_line
from onebit_build.sources.fetch import local_mirror_candidates, sdist_store_cached
from onebit_build.checking.manifest import Manifest, load_latest
from onebit_build.sources.patch import list_patches
from onebit_build.core.gitops import Git
from onebit_build.building.toolchain import (ToolchainSettings, resolve_toolchain, runtime_env,
                                             toolchain_refs)
from onebit_build.core.workspace import Workspace
from onebit_build.running.devices import parse_list_devices
from onebit_build.doctor.requirements import Check, download_checks, gather, requirement_checks
from onebit_build.doctor.binary_cache import binary_cache_checks
from onebit_build.doctor.caches import cache_checks
from onebit_build.doctor.gpu_tools import cuda_checks, vulkan_checks
from onebit_build.doctor.hsa import hsa_runtime_check
from onebit_build.building.cache.request import CacheRequest
from onebit_build.building.cmake import CMAKE_MIN, NINJA_MIN, find_tools

LIST_DEVICES_TIMEOUT_S = 120.0


@dataclass(frozen=True, kw_only=True)
class DoctorRequest:
    recipe: Recipe
    pins: Pins
    workspace: Workspace
    mirror_dirs: tuple[Path, ...] = ()
    offline: bool = False
    toolchain_root: str | None = None
    environ: Mapping[str, str] | None = None
    patch_root: Path | None = None  # the project's patches/: what the series makes work counts
    # Each component's defines as the plan resolves them (job.plan.ComponentPlan.requested):
    # what a build in effect must hold. None: the built components are not checked.
    planned: Mapping[str, tuple[tuple[str, str], ...]] | None = None
    cache: CacheRequest | None = None  # --compiler-cache*: the scheduler and the shader cache's store
    binary_cache: tuple[str | None, str] = (None, "--binary-cache")  # the registry named, and by what


@dataclass(frozen=True, kw_only=True)
class DoctorReport:
    recipe: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)

    @property
    def problems(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.ok is False)


# --------------------------------------------------------------------------- checks


# Compiler defines checked in the toolchain, with the check's name (None: the program's name).
COMPILER_DEFINES = {"CMAKE_C_COMPILER": None, "CMAKE_CXX_COMPILER": None, "CMAKE_ASM_COMPILER": "ASM compiler"}


def toolchain_checks(recipe: Recipe, tc: ToolchainSettings, environ: Mapping[str, str]) -> list[Check]:
    spec = tc.spec
    where = f"--toolchain-root DIR or ${spec.root_env}"
    checks = []
    if tc.root.is_dir():
        checks.append(Check(name="toolchain root", ok=True, detail=f"{tc.root} (from {tc.root_from})"))
    else:
        checks.append(Check(name="toolchain root", ok=False, detail=f"{tc.root} does not exist (from {tc.root_from})",
                            fix=f"install TheRock there, or point {where} at the folder that holds bin/amdclang"))
    fields = {"toolchain": {**tc.fields(), "ar": tc.ar or "", "libhsa": tc.libhsa or ""}}
    seen: list[tuple[str, str]] = []
    for comp in recipe.components:
        for key, value in comp.defines:
            if key in COMPILER_DEFINES and "toolchain." in value:
                path = resolve_refs(value, pins={}, components=fields)
                # The assembler gets a check of its own even when it is the C compiler.
                label = COMPILER_DEFINES[key] or Path(path).name
                if (label, path) in seen:
                    continue
                seen.append((label, path))
                name = Path(path).name
                version = version_line(path) if os.access(path, os.X_OK) else None
                where_from = f" ({key})" if COMPILER_DEFINES[key] else ""
                if version is not None:
                    checks.append(Check(name=label, ok=True, detail=f"{path}{where_from}: {version}"))
                else:
                    checks.append(Check(name=label, ok=False, detail=f"{path}{where_from} is missing or does not run",
                                        fix=f"install TheRock (it provides bin/{name}) or point {where} at it"))
    if any("ar" in toolchain_refs(c.defines) for c in recipe.components):
        if tc.ar:
            checks.append(Check(name="archiver (CMAKE_AR)", ok=True,
                                detail=f"{tc.ar}: {version_line(tc.ar) or 'version unknown'}"))
        else:
            checks.append(Check(name="archiver (CMAKE_AR)", ok=False, detail=f"none of {', '.join(spec.ar)} found",
                                fix="install binutils (Debian: apt-get install binutils) or LLVM's llvm-ar"))
    for key in [k for k, v in recipe.smoke.env if "libhsa" in toolchain_refs(((k, v),))]:
        checks.append(hsa_runtime_check(key, tc.libhsa, tc.root, spec.libhsa, environ))
    return checks


def system_checks(workspace: Path, environ: Mapping[str, str]) -> list[Check]:
    """git, a C and a C++ compiler, and a workspace that can be written."""
    path = environ.get("PATH", os.defpath)
    checks = []
    git_exe = shutil.which("git", path=path)
    checks.append(Check(name="git", ok=git_exe is not None,
                        detail=(version_line(git_exe) or git_exe) if git_exe else "not on PATH",
                        fix=None if git_exe else "install git (Debian: apt-get install git)"))
    for label, kind, var in (("C compiler", "c", "CC"), ("C++ compiler", "cxx", "CXX")):
        chosen = environ.get(var)
        named = compiler_path(kind, (), environ)
        found = shutil.which(named, path=path) if named else None
        checks.append(Check(name=label, ok=found is not None,
                            detail=(version_line(found) or found) if found
                            else (f"${var}={chosen} not found" if chosen else "none on PATH"),
                            fix=None if found
                            else "install one (Debian: apt-get install build-essential) or set " + var))
    checks.append(workspace_check(workspace))
    return checks


def workspace_check(root: Path) -> Check:
    """Whether the workspace is (or can be made) a writable folder; creates nothing."""
    if root.exists() and not root.is_dir():
        return Check(name="workspace", ok=False, detail=f"{root} is a file", fix="give --workspace a folder")
    probe = root
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        return Check(name="workspace", ok=False, detail=f"{probe} is not writable",
                     fix="choose a writable --workspace or fix its permissions")
    return Check(name="workspace", ok=True, detail=f"{root}{'' if root.exists() else ' (created on first run)'}")


def build_tool_checks() -> list[Check]:
    try:
        tools = find_tools()
    except OnebitError as exc:
        name = "CMake" if "CMake" in exc.message else "Ninja"
        want = CMAKE_MIN if name == "CMake" else NINJA_MIN
        return [Check(name=name, ok=False, detail=f"{name} {want} not found", fix=exc.hint)]
    return [
        Check(name="CMake", ok=True, detail=f"{tools.cmake_version} ({tools.cmake})"),
        Check(name="Ninja", ok=True, detail=f"{tools.ninja_version} ({tools.ninja})"),
    ]


def index_lists(package: str, version: str, environ: Mapping[str, str]) -> bool:
    """Whether the package index pip is configured with lists ``package==version``."""
    text = probe([sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check", package],
                 env=environ)
    return text is not None and version in listed_versions(text)


def listed_versions(text: str) -> list[str]:
    """The versions of ``pip index versions`` output ('Available versions: a, b, ...')."""
    for line in text.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def source_checks(req: DoctorRequest, environ: Mapping[str, str]) -> list[Check]:
    checks = []
    given_as = {src: f"{k} of {c.name}"  # a source a component takes as a folder, e.g. HRX_SOURCE_DIR
                for c in req.recipe.components for k, v in c.defines for src in tree_sources([v])}
    for name in req.recipe.sources_in_order():
        pin = req.pins.get(name)
        label = f"source {name}" + (f" ({given_as[name]})" if name in given_as else "")
        mirrors = local_mirror_candidates(name, req.mirror_dirs)
        bare = req.workspace.bare_repo(name)
        if mirrors:
            checks.append(Check(name=label, ok=True, detail=f"mirror {mirrors[0]}"))
            continue
        if (bare / "HEAD").exists():
            g = Git(bare, bare=True)
            cached = ([pin.commit] if pin.resolved
                      else g.run("rev-parse", f"--disambiguate={pin.commit}", check=False).out.split())
            if any(g.has_commit(c) for c in cached):
                checks.append(Check(name=label, ok=True, detail=f"cached in {bare}"))
                continue
        cached_sdist = next((m for m in pin.mirrors if sdist_store_cached(m, ws=req.workspace)), None)
        if cached_sdist is not None:
            checks.append(Check(name=label, ok=True,
                                detail=f"{cached_sdist.label} cached in {req.workspace.downloads}"))
            continue
        if req.offline:
            checks.append(Check(name=label, ok=False,
                                detail=f"{pin.commit} is neither cached nor in a mirror dir (offline)",
                                fix=f"run once with network access, or put {name}.git / "
                                    f"{name}.bundle in a --mirror-dir"))
            continue
        listed = [m for m in pin.mirrors if index_lists(m.package, m.version, environ)]
        if listed:
            checks.append(Check(name=label, ok=True,
                                detail=f"{listed[0].label} listed by the package index (downloaded on first fetch)"))
            continue
        out = capture(["git", "ls-remote", "--exit-code", pin.url, "HEAD"], timeout=PROBE_TIMEOUT_S,
                      env={"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"})
        why = (out.stderr.strip().splitlines() or ["no answer"])[-1]
        if out.ok:
            checks.append(Check(name=label, ok=True, detail=f"{pin.url} answers"))
        else:
            where = f"{pin.url} is not reachable ({why})"
            if pin.mirrors:
                where = f"neither {', '.join(m.label for m in pin.mirrors)} on the package index nor {where}"
            checks.append(Check(name=label, ok=False, detail=where,
                                fix=f"check the network, or provide {name}.git / {name}.bundle with --mirror-dir"))
    return checks


def _built_manifest(req: DoctorRequest) -> Manifest | None:
    """The manifest of the recipe's latest build; None when there is none or it is unreadable."""
    try:
        return load_latest(req.workspace, req.recipe.name)
    except (StateError, OnebitError):
        return None


TRUE_WORDS = ("ON", "TRUE", "YES", "Y", "1")
FALSE_WORDS = ("OFF", "FALSE", "NO", "N", "0", "")


def same_cmake_value(want: str, have: str | None) -> bool:
    """Whether a CMake cache value is the value a recipe gives (booleans in any spelling). Pure."""
    if have is None:
        return False
    for words in (TRUE_WORDS, FALSE_WORDS):
        if want.upper() in words and want != "":
            return have.upper() in words
    return want == have


def stale_defines(fixed: tuple[tuple[str, str], ...], cache: Mapping[str, str]) -> list[str]:
    """``KEY=VALUE`` of the recipe's fixed defines that a build's CMake cache does not hold,
    with what it holds instead. Pure."""
    out = []
    for key, want in fixed:
        have = cache.get(key)
        if not same_cmake_value(want, have):
            out.append(f"{key}={want} (built with {'no value' if have is None else have})")
    return out


def built_checks(req: DoctorRequest) -> list[Check]:
    """Each built component against the plan: its CMake cache must hold every define the plan
    resolves for it (those that name another component's folder or the toolchain's paths
    left out: they differ by folder and machine). A build made before the recipe changed is named, so that e.g.
    a runtime built without its AMDGPU driver explains a missing device."""
    man = _built_manifest(req)
    if man is None or req.planned is None:
        return []
    checks = []
    for comp in req.recipe.components:
        entry = man.component(comp.name)
        if entry is None or not entry.build_dir:
            continue
        build_dir = Path(entry.build_dir)
        cache = read_cmake_cache(build_dir)
        label = f"built {comp.name}"
        if not cache:
            checks.append(Check(name=label, ok=None, detail=f"no CMake cache in {build_dir}",
                                fix=f"run 'onebit-build --recipe {req.recipe.name} build' again"))
            continue
        # Values that name another component's folder or this machine's toolchain differ by
        # folder and machine; the rest (pins included) must be what the build holds.
        refers = {k for k, v in comp.defines if "${" in v and not v.startswith("${pin.")}
        fixed = tuple((k, v) for k, v in req.planned.get(comp.name, ()) if k not in refers)
        stale = stale_defines(fixed, cache)
        if stale:
            checks.append(Check(name=label, ok=None,
                                detail=f"{build_dir} predates the plan: it lacks {'; '.join(stale)}",
                                fix=f"run 'onebit-build --recipe {req.recipe.name} build' to "
                                    "build what the recipe says"))
        else:
            checks.append(Check(name=label, ok=True,
                                detail=f"{build_dir}: all {len(fixed)} defines of the plan in effect"))
    return checks


def _built_server(req: DoctorRequest) -> Path | None:
    man = _built_manifest(req)
    server = man.output("llama-server") if man else None
    return Path(server.path) if server and Path(server.path).is_file() else None


def gpu_checks(req: DoctorRequest, tc: ToolchainSettings | None, environ: Mapping[str, str]) -> list[Check]:
    recipe = req.recipe
    gpu = recipe.smoke.gpu
    devices = tuple(d for d in recipe.smoke.devices if d != "CPU")
    if not gpu and not devices:
        return []
    server = _built_server(req)
    if server is None:
        hint = None
        vk = shutil.which("vulkaninfo", path=environ.get("PATH"))
        if vk and gpu:
            text = capture([vk, "--summary"], timeout=PROBE_TIMEOUT_S).stdout
            hint = f"vulkaninfo {'lists' if gpu.lower() in text.lower() else 'does not list'} {gpu}"
        detail = f"not built yet, so the device list cannot be read{'; ' + hint if hint else ''}"
        return [Check(name="GPU", ok=None, detail=detail,
                      fix=f"run 'onebit-build --recipe {recipe.name} build', then doctor again")]
    try:
        env = dict(runtime_env(recipe, tc, environ))
    except OnebitError as exc:
        return [Check(name="GPU", ok=False, detail=f"cannot set the runtime environment: {exc.message}", fix=exc.hint)]
    out = capture([server, "--list-devices"], timeout=LIST_DEVICES_TIMEOUT_S, env=env)
    if out.returncode is None:
        return [Check(name="GPU", ok=False, detail=f"{server} --list-devices failed: {out.stderr}",
                      fix="rebuild, then run doctor again")]
    text = out.stdout + out.stderr
    listed = parse_list_devices(text)
    checks = []
    missing = [d for d in devices if d not in listed]
    if missing:
        checks.append(Check(name="GPU devices", ok=False,
                            detail=f"--list-devices lacks {', '.join(missing)} (lists: {', '.join(listed) or 'none'})",
                            fix="HRX needs TheRock's HSA runtime (IREE_HAL_AMDGPU_LIBHSA_PATH) and a runtime built "
                                "with its AMDGPU driver (IREE_HAL_DRIVER_AMDGPU=ON); "
                                "Vulkan needs the Mesa RADV driver"))
    elif devices:
        checks.append(Check(name="GPU devices", ok=True, detail=f"--list-devices shows {', '.join(devices)}"))
    if gpu:
        if gpu.lower() in text.lower():
            checks.append(Check(name="GPU", ok=True, detail=f"{gpu} is listed"))
        else:
            checks.append(Check(name="GPU", ok=False, detail=f"no {gpu} in the device list",
                                fix=f"this recipe is for {gpu} (Strix Halo); check the amdgpu driver and "
                                    "/dev/kfd access (group render)"))
    return checks


def run_doctor(req: DoctorRequest) -> DoctorReport:
    environ = os.environ if req.environ is None else req.environ
    recipe = req.recipe
    checks: list[Check] = []
    tc = resolve_toolchain(recipe.toolchain, override=req.toolchain_root, environ=environ) if recipe.toolchain else None
    if tc is not None:
        checks += toolchain_checks(recipe, tc, environ)
    checks += system_checks(req.workspace.root, environ)
    checks += build_tool_checks()
    inp = gather(recipe, req.pins, req.workspace, planned=req.planned, environ=environ)
    if inp is not None:
        checks += requirement_checks(inp)
    if "vulkan" in recipe.backends:
        series = list_patches(req.patch_root, recipe.server_component.source) if req.patch_root else ()
        checks += vulkan_checks(environ, [p.path for p in series])
    if "cuda" in recipe.backends:
        checks += cuda_checks(recipe, environ)
    checks += source_checks(req, environ)
    checks += download_checks(recipe, req.workspace, req.mirror_dirs, req.offline)
    checks += built_checks(req)
    checks += gpu_checks(req, tc, environ)
    checks += cache_checks(req.cache, environ)
    checks += binary_cache_checks(req.binary_cache, environ)
    return DoctorReport(recipe=recipe.name, checks=tuple(checks))


def render(report: DoctorReport) -> list[str]:
    mark = {True: "ok  ", False: "FAIL", None: "--  "}
    width = max((len(c.name) for c in report.checks), default=10)
    lines = [f"doctor for recipe {report.recipe}"]
    for c in report.checks:
        lines.append(f"  {mark[c.ok]}  {c.name:<{width}}  {c.detail}")
        if c.fix and c.ok is not True:
            lines.append(f"        {'':<{width}}  fix: {c.fix}")
    n = len(report.problems)
    lines.append(f"{n} problem(s) to fix" if n else "everything the recipe needs is here")
    return lines
