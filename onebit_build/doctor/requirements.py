"""Requirements: what a recipe's ``requires`` section asks of this machine, checked before the
first configure, every one of them (fail complete: one run names everything that is missing).

For the Strix Halo recipe these model what the pinned sources check while configuring:

- CMake at least the sources' ``cmake_minimum_required``;
- the AMDGPU toolchain that ROCm/hrx's ``iree_runtime_configure_amdgpu_toolchain`` asks for
  when ``IREE_HAL_DRIVER_AMDGPU=ON``: a Clang-family C compiler, that compiles a minimal
  ``amdgcn-amd-amdhsa`` object, ``llvm-ar``, ``llvm-link``, ``ld.lld`` and ``llvm-objcopy``
  (each where ``clang -print-prog-name`` says, else on PATH) and Clang's resource headers;
- the C++ standard the fork sets (``CMAKE_CXX_STANDARD`` in the fetched tree), accepted by
  the compiler that builds it;
- Python 3 for the fork's catalog scripts; a Vulkan ICD that lists the GPU (run time).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from onebit_build.building.compilers import compiler_path
from onebit_build.building.cmake import find_tools
from onebit_build.sources.downloads import cache_dir, recipe_downloads, unpacked_tree
from onebit_build.sources.patch import newest_prepared
from onebit_build.core import ui
from onebit_build.spec.recipe import Recipe
from onebit_build.core.errors import OnebitError, ToolMissingError
from onebit_build.spec.pins import Pins
from onebit_build.core.proc import PROBE_TIMEOUT_S, capture
from onebit_build.spec.requires_spec import CxxStandard, RequiresSpec, version_tuple
from onebit_build.core.workspace import Workspace

AMDGPU_TOOLS = ("llvm-ar", "llvm-link", "ld.lld", "llvm-objcopy")
PROBE_ARGS = ("-target", "amdgcn-amd-amdhsa", "-mcpu=gfx900", "-nogpulib", "-x", "c", "-std=c11", "-c", "-emit-llvm")
CXX_STANDARD_RE = re.compile(r"^\s*set\s*\(\s*CMAKE_CXX_STANDARD\s+(\d+)\s*\)", re.M | re.I)


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    ok: bool | None  # None: could not be checked yet (said why in detail)
    detail: str
    fix: str | None = None


def cmake_check(want: str, have: str | None) -> Check:
    """The CMake the build uses against the sources' minimum. Pure."""
    if have is None:
        return Check(
            name=f"CMake >= {want}",
            ok=False,
            detail="no CMake found",
            fix=f"pip install 'cmake>={want}' in the tool's venv",
        )
    ok = version_tuple(have) >= version_tuple(want)
    return Check(
        name=f"CMake >= {want}",
        ok=ok,
        detail=f"CMake {have}" + ("" if ok else f" is older than {want}"),
        fix=None if ok else f"pip install 'cmake>={want}' in the tool's venv, or put a newer cmake first on PATH",
    )


def python_check(want: str, environ: Mapping[str, str]) -> Check:
    """The ``python3`` on PATH (what CMake's FindPython3 finds first) against the minimum."""
    name = f"Python >= {want}"
    exe = shutil.which("python3", path=environ.get("PATH"))
    out = (
        capture([exe, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], timeout=PROBE_TIMEOUT_S)
        if exe
        else None
    )
    have = out.stdout.strip() if out is not None and out.returncode == 0 else None
    if have is None:
        return Check(
            name=name,
            ok=False,
            detail="no python3 on PATH",
            fix=f"install Python {want}+ as python3 (Debian: apt-get install python3)",
        )
    ok = version_tuple(have) >= version_tuple(want)
    return Check(
        name=name,
        ok=ok,
        detail=f"{exe}: {have}" + ("" if ok else f", older than {want}"),
        fix=None if ok else f"install Python {want} or newer as python3 on PATH",
    )


def is_clang(compiler: str) -> bool | None:
    """Whether a C compiler is Clang-family (``__clang__`` predefined, as CMake's compiler
    identification sees it); None when it does not run."""
    out = capture([compiler, "-dM", "-E", "-x", "c", os.devnull], timeout=PROBE_TIMEOUT_S)
    if out.returncode != 0:
        return None
    return re.search(r"^#define __clang__ ", out.stdout, re.M) is not None


def _tool(compiler: str, tool: str, environ: Mapping[str, str]) -> str | None:
    """Where the runtime's toolchain file finds ``tool``: ``-print-prog-name`` first, then PATH."""
    out = capture([compiler, f"-print-prog-name={tool}"], timeout=PROBE_TIMEOUT_S)
    named = out.stdout.strip() if out.returncode == 0 else ""
    if named and os.path.isabs(named) and os.path.isfile(named):
        return named
    names = (tool, "lld") if tool == "ld.lld" else (tool,)
    return next((p for n in names if (p := shutil.which(n, path=environ.get("PATH")))), None)


def amdgpu_checks(component: str, compiler: str, environ: Mapping[str, str]) -> list[Check]:
    """Every piece of the AMDGPU toolchain one component's configure checks, each on its own."""
    label = f"{component}: "
    fix_cc = "use TheRock's amdclang (--toolchain-root DIR or the recipe's root variable)"
    clang = is_clang(compiler) if os.access(compiler, os.X_OK) else None
    if clang is None:
        detail = f"{compiler} is missing or does not run"
    else:
        detail = f"{compiler}" + (
            " is Clang" if clang else " is not Clang-family; IREE_HAL_DRIVER_AMDGPU=ON needs Clang"
        )
    # Each piece is checked even when the compiler is missing: one run lists all that is.
    checks = [Check(name=label + "Clang C compiler", ok=bool(clang), detail=detail, fix=None if clang else fix_cc)]
    with tempfile.TemporaryDirectory(prefix="onebit-amdgcn-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("void onebit_amdgcn_probe(void) {}\n")
        out = capture([compiler, *PROBE_ARGS, src, "-o", Path(tmp) / "probe.bc"], timeout=PROBE_TIMEOUT_S)
    why = (out.stderr.strip().splitlines() or [""])[-1][:160]
    checks.append(
        Check(
            name=label + "amdgcn-amd-amdhsa probe",
            ok=out.returncode == 0,
            detail="compiles a minimal amdgcn object" if out.returncode == 0 else f"{compiler} cannot: {why}",
            fix=None if out.returncode == 0 else "use a Clang built with the AMDGPU target (TheRock's amdclang)",
        )
    )
    for tool in AMDGPU_TOOLS:
        found = _tool(compiler, tool, environ)
        checks.append(
            Check(
                name=label + tool,
                ok=found is not None,
                detail=found or f"neither {compiler} -print-prog-name nor PATH has it",
                fix=None
                if found
                else f"use TheRock's LLVM (it ships {tool}), or install LLVM/lld so {tool} is on PATH",
            )
        )
    res = capture([compiler, "-print-resource-dir"], timeout=PROBE_TIMEOUT_S)
    rdir = res.stdout.strip()
    ok = res.returncode == 0 and bool(rdir) and (Path(rdir) / "include").is_dir()
    checks.append(
        Check(
            name=label + "Clang resource headers",
            ok=ok,
            detail=f"{rdir}/include" if ok else f"{compiler} names no resource include folder",
            fix=None if ok else "reinstall the toolchain: its Clang builtin headers are missing",
        )
    )
    return checks


def read_cxx_standard(text: str) -> int | None:
    """The C++ standard a CMake file requires: its last ``set(CMAKE_CXX_STANDARD N)``, or,
    where it picks one by what the compiler offers (``cxx_std_N IN_LIST
    CMAKE_CXX_COMPILE_FEATURES``, as later versions of the fork do), the lowest it accepts. Pure."""
    found = [int(n) for n in CXX_STANDARD_RE.findall(text)]
    if not found:
        return None
    return min(found) if re.search(r"IN_LIST\s+CMAKE_CXX_COMPILE_FEATURES", text) else found[-1]


def cxx_standard_check(spec: CxxStandard, tree: Path | None, cxx: str | None, *, use_expect: bool = True) -> Check:
    """The fork's C++ standard (from its fetched tree, else the recipe's note) against the C++
    compiler that builds it."""
    name = f"{spec.component}: C++ standard"
    where = f"{spec.file} at the pin"
    standard = spec.expect
    if tree is not None and (tree / spec.file).is_file():
        got = read_cxx_standard((tree / spec.file).read_text(errors="replace"))
        if got is None:
            return Check(name=name, ok=True, detail=f"{tree / spec.file} sets no CMAKE_CXX_STANDARD")
        standard, where = got, str(tree / spec.file)
    elif not use_expect:
        return Check(name=name, ok=None, detail=f"{spec.file} is read from the fetched tree, checked after the fetch")
    else:
        where = f"the recipe ({spec.file} read upstream near the pin; the fetched tree's value is used once fetched)"
    if not cxx:
        return Check(
            name=name,
            ok=False,
            detail=f"C++{standard} ({where}) but no C++ compiler",
            fix="install one (apt-get install g++) or set CXX",
        )
    with tempfile.TemporaryDirectory(prefix="onebit-cxx-") as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("int main() { return 0; }\n")
        out = capture([cxx, f"-std=c++{standard}", "-fsyntax-only", src], timeout=PROBE_TIMEOUT_S)
    ok = out.returncode == 0
    return Check(
        name=name,
        ok=ok,
        detail=f"C++{standard} ({where}): {cxx} " + ("accepts" if ok else "rejects") + f" -std=c++{standard}",
        fix=None
        if ok
        else f"build {spec.component} with a compiler that accepts -std=c++{standard} "
        "(set CXX, or -D CMAKE_CXX_COMPILER=<TheRock>/bin/amdclang++ for it)",
    )


def vulkan_device_check(device: str, environ: Mapping[str, str]) -> Check:
    """A Vulkan ICD lists the GPU (``vulkaninfo --summary`` deviceName lines)."""
    name = f"Vulkan ICD with {device}"
    vk = shutil.which("vulkaninfo", path=environ.get("PATH"))
    if not vk:
        return Check(
            name=name,
            ok=False,
            detail="vulkaninfo not found, so the Vulkan devices cannot be listed",
            fix="install vulkan-tools and Mesa's RADV (apt-get install vulkan-tools mesa-vulkan-drivers)",
        )
    out = capture([vk, "--summary"], timeout=PROBE_TIMEOUT_S, env=dict(environ))
    names = re.findall(r"deviceName\s*=\s*(.+)", out.stdout)
    ok = any(device.lower() in n.lower() for n in names)
    return Check(
        name=name,
        ok=ok,
        detail=f"vulkaninfo lists: {', '.join(n.strip() for n in names) or 'no device'}",
        fix=None if ok else f"install Mesa's RADV driver (mesa-vulkan-drivers) and check /dev/dri access for {device}",
    )


@dataclass(frozen=True, kw_only=True)
class RequirementsInput:
    """What the checks need to know about this machine and the recipe's build."""

    requires: RequiresSpec
    cmake_version: str | None
    c_compilers: Mapping[str, str]  # component -> its resolved C compiler
    cxx_compiler: str | None  # the C++ compiler of the cxx_standard component
    tree: Path | None  # the fetched tree of the cxx_standard component, when there is one
    environ: Mapping[str, str]


def requirement_checks(inp: RequirementsInput, *, run_time: bool = True, use_expect: bool = True) -> list[Check]:
    """Every requirement, each as its own check; run-time ones (the GPU's ICD) only when asked;
    without ``use_expect`` the C++ standard waits for the fetched tree."""
    req = inp.requires
    checks: list[Check] = []
    if req.cmake:
        checks.append(cmake_check(req.cmake, inp.cmake_version))
    if req.python:
        checks.append(python_check(req.python, inp.environ))
    seen: set[str] = set()
    for comp in req.amdgpu_clang:
        cc = inp.c_compilers.get(comp)
        if cc is None or cc in seen:
            continue
        seen.add(cc)
        checks += amdgpu_checks(comp, cc, inp.environ)
    if req.cxx_standard:
        checks.append(cxx_standard_check(req.cxx_standard, inp.tree, inp.cxx_compiler, use_expect=use_expect))
    if run_time and req.vulkan_device:
        checks.append(vulkan_device_check(req.vulkan_device, inp.environ))
    return checks


def download_checks(recipe: Recipe, ws: Workspace, mirror_dirs: tuple[Path, ...], offline: bool) -> list[Check]:
    """Each configure-time download: cached or in a mirror dir, else fetched on the first run
    (offline: missing)."""
    checks = []
    for spec in recipe_downloads(recipe):
        label = f"download {spec.name}"
        mirrored = [d / spec.file_name for d in mirror_dirs if (d / spec.file_name).is_file()]
        if unpacked_tree(ws, spec) is not None:
            checks.append(Check(name=label, ok=True, detail=f"cached in {cache_dir(ws, spec)}"))
        elif mirrored:
            checks.append(Check(name=label, ok=True, detail=f"mirror {mirrored[0]} (sha256 checked when fetched)"))
        elif offline:
            checks.append(Check(name=label, ok=False,
                                detail=f"{spec.file_name} is neither cached nor in a mirror dir (offline)",
                                fix=f"run once with network access, or put {spec.file_name} (sha256 {spec.sha256}) "
                                    "in a --mirror-dir"))
        else:
            checks.append(Check(name=label, ok=None,
                                detail=f"fetched by the first run from {spec.url} (sha256 {spec.sha256[:16]})",
                                fix=f"without network: put {spec.file_name} in a --mirror-dir"))
    return checks


def gather(recipe: Recipe, pins: Pins, ws: Workspace, *, planned: Mapping[str, Sequence[tuple[str, str]]] | None,
           environ: Mapping[str, str]) -> RequirementsInput | None:
    """The inputs of the recipe's requirement checks on this machine; None without ``requires``.
    The compilers are read from ``planned``, each component's defines as the plan resolved
    them (``job/plan.py``); without a plan, only from defines that refer to nothing."""
    req = recipe.requires
    if req is None:
        return None

    def defines(name: str) -> Sequence[tuple[str, str]]:
        if planned is not None:
            return planned.get(name, ())
        return [(k, v) for k, v in recipe.component(name).defines if "${" not in v]

    c_compilers = {name: value for name in req.amdgpu_clang if (value := dict(defines(name)).get("CMAKE_C_COMPILER"))}
    cxx = tree = None
    if req.cxx_standard:
        comp = recipe.component(req.cxx_standard.component)
        named = compiler_path("cxx", defines(comp.name), environ)
        cxx = shutil.which(named, path=environ.get("PATH")) or named if named else None
        tree = newest_prepared(ws.src_dir, comp.source, pins.get(comp.source).commit)
    try:
        cmake_version: str | None = find_tools().cmake_version
    except OnebitError:
        cmake_version = None
    return RequirementsInput(
        requires=req, cmake_version=cmake_version, c_compilers=c_compilers, cxx_compiler=cxx, tree=tree, environ=environ
    )


def check_before_build(recipe: Recipe, pins: Pins, ws: Workspace, *, planned: Mapping[str, Sequence[tuple[str, str]]],
                       tree: Path | None = None) -> None:
    """Every build-time requirement, all missing ones printed at once, then one error (exit
    code 7) when any is missing. A run calls it first (the C++ standard then waits for the
    fetched tree) and again with the prepared ``tree`` before configuring."""
    inp = gather(recipe, pins, ws, planned=planned, environ=os.environ)
    if inp is None:
        return
    if tree is not None:
        inp = replace(inp, tree=tree)
    missing = [c for c in requirement_checks(inp, run_time=False, use_expect=False) if c.ok is False]
    for c in missing:
        ui.warn(f"missing: {c.name}: {c.detail}" + (f"; fix: {c.fix}" if c.fix else ""))
    if missing:
        raise ToolMissingError(
            f"{len(missing)} requirement(s) of recipe {recipe.name} are missing (each is listed above)",
            hint=f"fix them all, then run again; 'onebit-build --recipe {recipe.name} doctor' checks everything",
        )
