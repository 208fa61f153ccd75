"""doctor: every missing item of the Strix Halo recipe is named with its fix."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from _support import REPO, cuda_wheel_bin, make_repo, run_cli
from onebit_build.spec.recipe import load_recipe
from onebit_build.spec.pins import load_pins
from onebit_build.core.proc import capture
from onebit_build.doctor.machine import (DoctorRequest, listed_versions, render, run_doctor, same_cmake_value,
                                         stale_defines)
from onebit_build.doctor.gpu_tools import vulkan_header_version, vulkan_minimum
from onebit_build.sources.fetch import _sdist_dir
from onebit_build.checking.manifest import write_manifest
from onebit_build.core.workspace import Workspace
from onebit_build.running.devices import parse_list_devices
from _hrx_standins import bare, fake_toolchain

HEADER = """\
#define VK_HEADER_VERSION {patch}
#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 3, VK_HEADER_VERSION)
"""


def sdk(tmp_path: Path, patch: int) -> Path:
    d = tmp_path / f"vulkan-sdk-{patch}"
    (d / "include" / "vulkan").mkdir(parents=True)
    (d / "include" / "vulkan" / "vulkan_core.h").write_text(HEADER.format(patch=patch))
    return d


def strix_halo():
    pins = load_pins(REPO / "pins.yaml")
    return pins, load_recipe(REPO / "recipes" / "strix-halo.yaml", pins)


def planned(recipe, pins, ws: Workspace, *, toolchain_root: str, environ) -> dict:
    """Each component's defines as the plan resolves them: what the doctor command hands over."""
    from onebit_build.job.plan import make_plan

    plan = make_plan(recipe, pins, workspace=ws, patches_dir=REPO / "patches", recipes_dir=REPO / "recipes",
                     toolchain_root=toolchain_root, environ=environ)
    return {c.name: c.requested for c in plan.components}


def by_name(report):
    return {c.name: c for c in report.checks}


def test_pure_parsers():
    assert vulkan_header_version(HEADER.format(patch=275)) == (1, 3, 275)
    assert vulkan_header_version("#define VK_HEADER_VERSION 239\n") == (1, 3, 239)
    assert vulkan_header_version("nothing") is None
    text = ("Available devices:\n  Vulkan0: AMD Radeon 8060S Graphics (RADV STRIX_HALO)\n"
            "  HRX20: AMD Radeon 8060S (gfx1151)\n")
    assert parse_list_devices(text) == ("Vulkan0", "HRX20")


def test_everything_present(tmp_path):
    pins, recipe = strix_halo()
    root = fake_toolchain(tmp_path / "therock")
    mirrors = tmp_path / "mirrors"
    repo = tmp_path / "repo"
    make_repo(repo, {"README": "x\n"})
    for name in ("hrx", "hrx-system", "llama.cpp-hrx"):
        bare(repo, mirrors, name)
    env = {"PATH": os.environ["PATH"], "VULKAN_SDK": str(sdk(tmp_path, 275))}
    ws = Workspace(root=tmp_path / "ws")
    report = run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=ws, mirror_dirs=(mirrors,),
                                      toolchain_root=str(root), environ=env,
                                      planned=planned(recipe, pins, ws, toolchain_root=str(root), environ=env)))
    checks = by_name(report)
    for name in ("toolchain root", "amdclang", "amdclang++", "ASM compiler", "archiver (CMAKE_AR)", "HSA runtime",
                 "CMake", "Ninja", "Vulkan headers", "source hrx", "source hrx-system", "source llama.cpp-hrx"):
        assert checks[name].ok is True, (name, checks[name])
    assert "1.3.275" in checks["Vulkan headers"].detail
    # The recipe assembles with amdclang too (as the hand-written build did).
    assert checks["ASM compiler"].detail.startswith(f"{root}/bin/amdclang (CMAKE_ASM_COMPILER): ")
    assert checks["source hrx"].detail.startswith("mirror ")
    # Not built: the GPU cannot be listed yet, which is said, not counted as a failure.
    assert checks["GPU"].ok is None and "not built yet" in checks["GPU"].detail
    # The AMDGPU toolchain of the fake TheRock (the real clang) passes piece by piece.
    for name in ("hrx-runtime: Clang C compiler", "hrx-runtime: amdgcn-amd-amdhsa probe", "hrx-runtime: ld.lld"):
        assert checks[name].ok is True, (name, checks[name])
    if checks["glslc"].ok:
        # What this machine really lacks: no Radeon 8060S, and maybe a C++ compiler for C++26.
        cxx26 = capture(["c++", "-std=c++26", "-fsyntax-only", "-x", "c++", os.devnull]).returncode == 0
        expected = {"Vulkan ICD with Radeon 8060S"} | (set() if cxx26 else {"llama: C++ standard"})
        assert {c.name for c in report.problems} == expected, render(report)


def test_each_missing_item_has_its_fix(tmp_path):
    pins, recipe = strix_halo()
    env = {"PATH": os.environ["PATH"], "VULKAN_SDK": str(sdk(tmp_path, 239))}
    report = run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=Workspace(root=tmp_path / "ws"), offline=True,
                                      toolchain_root=str(tmp_path / "no-therock"), environ=env))
    checks = by_name(report)
    assert not report.ok
    for name in ("toolchain root", "amdclang", "amdclang++", "ASM compiler", "HSA runtime", "Vulkan headers",
                 "source hrx"):
        assert checks[name].ok is False and checks[name].fix, name
    assert "--toolchain-root" in checks["toolchain root"].fix
    assert "older than 1.3.261" in checks["Vulkan headers"].detail
    assert "--mirror-dir" in checks["source hrx"].fix
    text = "\n".join(render(report))
    assert text.count("fix: ") >= 6 and "problem(s) to fix" in text


def test_given_libhsa_and_unreachable_url(tmp_path):
    pins, recipe = strix_halo()
    root = fake_toolchain(tmp_path / "therock")
    (root / "lib" / "libhsa-runtime64.so.1").unlink()
    given = tmp_path / "libhsa-runtime64.so.1"
    given.write_bytes(b"x")
    env = {"PATH": os.environ["PATH"], "IREE_HAL_AMDGPU_LIBHSA_PATH": str(given)}
    from dataclasses import replace

    local = tmp_path / "reachable"
    make_repo(local, {"README": "x\n"})
    sources = dict(pins.sources)
    sources["hrx"] = replace(sources["hrx"], url=str(local))
    sources["hrx-system"] = replace(sources["hrx-system"], url=str(tmp_path / "gone.git"))
    report = run_doctor(DoctorRequest(recipe=recipe, pins=replace(pins, sources=sources),
                                      workspace=Workspace(root=tmp_path / "ws"), toolchain_root=str(root), environ=env))
    checks = by_name(report)
    assert checks["HSA runtime"].ok is True and "given in $IREE_HAL_AMDGPU_LIBHSA_PATH" in checks["HSA runtime"].detail
    assert checks["source hrx"].ok is True and "answers" in checks["source hrx"].detail
    assert checks["source hrx-system"].ok is False and "not reachable" in checks["source hrx-system"].detail


def test_cli_doctor_exit_code(tmp_path):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--hrx", "on", "--offline", "doctor",
                  env={"ONEBIT_TOOLCHAIN_ROOT": str(tmp_path / "none")})
    assert out.returncode == 7, out.stderr
    assert "doctor for recipe strix-halo" in out.stdout and "FAIL  amdclang" in out.stdout
    assert not (tmp_path / "ws").exists()


def cuda_recipe():
    pins = load_pins(REPO / "pins.yaml")
    return pins, load_recipe(REPO / "recipes" / "cuda.yaml", pins)


def test_listed_versions():
    text = "llama-cpp-python (0.3.36)\nAvailable versions: 0.3.36, 0.3.35, 0.2.90\n"
    assert listed_versions(text) == ["0.3.36", "0.3.35", "0.2.90"]
    assert listed_versions("WARNING: no index\n") == []


def test_cuda_tools_missing_are_named_with_fixes(tmp_path):
    pins, recipe = cuda_recipe()
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    checks = by_name(run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=Workspace(root=tmp_path / "ws"),
                                              offline=True, environ={"PATH": str(empty)})))
    for tool in ("nvcc", "cuobjdump", "nvdisasm"):
        assert checks[tool].ok is False and checks[tool].fix, tool
    assert "nvidia-cuda-cuobjdump" in checks["cuobjdump"].fix
    # Offline with nothing cached: the source is a problem, with the mirror-dir remedy.
    assert checks["source llama.cpp"].ok is False and "--mirror-dir" in checks["source llama.cpp"].fix


def test_cuda_tools_present(tmp_path):
    bins = [Path(p).parent for p in (shutil.which("nvcc"), shutil.which("cuobjdump"), shutil.which("nvdisasm")) if p]
    if cuda_wheel_bin() is not None:
        bins.append(cuda_wheel_bin())
    path = os.pathsep.join(str(b) for b in bins)
    missing = [t for t in ("nvcc", "cuobjdump", "nvdisasm") if shutil.which(t, path=path) is None]
    if missing:
        pytest.skip(f"not on this machine: {', '.join(missing)}")
    pins, recipe = cuda_recipe()
    checks = by_name(run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=Workspace(root=tmp_path / "ws"),
                                              offline=True, environ={"PATH": path})))
    for tool in ("nvcc", "cuobjdump", "nvdisasm"):
        assert checks[tool].ok is True and "release" in checks[tool].detail, checks[tool]


def test_cached_sdist_store_counts_as_cached(tmp_path):
    pins, recipe = cuda_recipe()
    m = pins.get("llama.cpp").mirrors[0]
    ws = Workspace(root=tmp_path / "ws")
    base = _sdist_dir(ws, m)
    (base / "store" / m.git_dir).mkdir(parents=True)
    (base / "archive.sha256").write_text(m.sha256 + "\n")
    checks = by_name(run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=ws, offline=True,
                                              environ={"PATH": os.environ["PATH"]})))
    assert checks["source llama.cpp"].ok is True and m.label in checks["source llama.cpp"].detail


def test_cmake_values_and_stale_defines():
    assert same_cmake_value("ON", "TRUE") and same_cmake_value("OFF", "0") and not same_cmake_value("ON", "OFF")
    assert same_cmake_value("pinned", "pinned") and not same_cmake_value("ON", None)
    assert stale_defines((("IREE_HAL_DRIVER_AMDGPU", "ON"), ("BUILD_SHARED_LIBS", "ON")),
                         {"IREE_HAL_DRIVER_AMDGPU": "OFF",
                          "BUILD_SHARED_LIBS": "ON"}) == ["IREE_HAL_DRIVER_AMDGPU=ON (built with OFF)"]


def test_a_build_that_predates_the_recipe_is_named(tmp_path):
    """A runtime built before the recipe passed IREE_HAL_DRIVER_AMDGPU=ON has no GPU driver:
    doctor, checking the built components against the plan, says so (and how to fix it)
    instead of only finding HRX20 missing."""
    pins, recipe = strix_halo()
    ws = Workspace(root=tmp_path / "ws")
    from onebit_build.job.plan import make_plan

    the_plan = make_plan(recipe, pins, workspace=ws, patches_dir=REPO / "patches", recipes_dir=REPO / "recipes",
                         toolchain_root=str(tmp_path / "none"))
    planned = {c.name: c.requested for c in the_plan.components}  # what the doctor command passes
    comps = []
    for c in recipe.components:
        bdir = tmp_path / "build" / c.name
        bdir.mkdir(parents=True)
        # The cache a build of the plan holds, but for one define in the runtime's.
        lines = [f"{k}:STRING={v}" for k, v in planned[c.name]]
        if c.name == "hrx-runtime":
            lines = [ln for ln in lines
                     if not ln.startswith("IREE_HAL_DRIVER_AMDGPU:")] + ["IREE_HAL_DRIVER_AMDGPU:BOOL=OFF"]
        (bdir / "CMakeCache.txt").write_text("# cache\n" + "\n".join(lines) + "\n")
        comps.append({"name": c.name, "build_dir": str(bdir), "outputs": []})
    write_manifest(ws.root / "manifests" / "strix-halo.json", {"recipe": {"name": "strix-halo"}, "components": comps})
    checks = by_name(run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=ws, offline=True,
                                              toolchain_root=str(tmp_path / "none"),
                                              environ={"PATH": os.environ["PATH"]}, planned=planned)))
    stale = checks["built hrx-runtime"]
    assert stale.ok is None and "IREE_HAL_DRIVER_AMDGPU=ON (built with OFF)" in stale.detail and "build" in stale.fix
    assert checks["built loom-link"].ok is True and checks["built llama"].ok is True


def test_git_compilers_and_workspace_are_checked(tmp_path):
    pins = load_pins(REPO / "pins.yaml")
    recipe = load_recipe(REPO / "recipes" / "default.yaml", pins)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    as_file = tmp_path / "ws-file"
    as_file.write_text("x")
    checks = by_name(run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=Workspace(root=as_file),
                                              offline=True, environ={"PATH": str(empty)})))
    assert checks["git"].ok is False and "apt-get install git" in checks["git"].fix
    assert checks["C compiler"].ok is False and "build-essential" in checks["C compiler"].fix
    assert checks["C++ compiler"].ok is False
    assert checks["workspace"].ok is False and "is a file" in checks["workspace"].detail
    present = by_name(run_doctor(DoctorRequest(recipe=recipe, pins=pins,
                                               workspace=Workspace(root=tmp_path / "new" / "ws"),
                                               offline=True, environ={"PATH": os.environ["PATH"]})))
    assert present["git"].ok and present["git"].detail.startswith("git version")
    assert present["C compiler"].ok and present["C++ compiler"].ok
    assert present["workspace"].ok and "created on first run" in present["workspace"].detail
    assert not (tmp_path / "new").exists(), "doctor creates nothing"


def test_cli_doctor_json(tmp_path):
    import json

    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--hrx", "on", "--offline", "doctor", "--json",
                  env={"ONEBIT_TOOLCHAIN_ROOT": str(tmp_path / "none")})
    assert out.returncode == 7, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kind"] == "onebit-build-doctor" and doc["schema"] == 1
    assert doc["recipe"] == "strix-halo" and doc["ok"] is False
    names = {c["name"]: c for c in doc["checks"]}
    assert names["amdclang"]["ok"] is False and names["amdclang"]["fix"]
    assert names["git"]["ok"] is True


def _vulkan_header_check(root, tmp_path):
    out = run_cli(root, "--root", str(root), "--workspace", str(tmp_path / "ws"), "--recipe", "vulkan", "doctor",
                  "--json", "--offline")
    doc = json.loads(out.stdout)
    return next(c for c in doc["checks"] if c["name"] == "Vulkan headers")


def test_vulkan_header_minimum_follows_the_recipes_patches(tmp_path):
    header = Path("/usr/include/vulkan/vulkan_core.h")
    if not header.is_file():
        pytest.skip("no Vulkan headers installed here (libvulkan-dev)")
    version = vulkan_header_version(header.read_text(errors="replace"))
    if not (1, 3, 239) <= version < (1, 3, 261):
        pytest.skip(f"the headers here are {version}: the case needs ones the compat patch alone makes work")
    # The project as it is: the compat patch declares 1.3.239, so these headers pass.
    ours = _vulkan_header_check(REPO, tmp_path)
    assert ours["ok"] is True and "0001-vulkan-older-headers-compat.patch" in ours["detail"]
    # The same project without the patch's declaration: ggml-vulkan's own minimum applies.
    root = tmp_path / "p"
    for part in ("pins.yaml", "pins.lock", "recipes", "patches", "references", "smoke"):
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, root / part)
        elif src.exists():
            root.mkdir(exist_ok=True)
            shutil.copy2(src, root / part)
    patch = root / "patches" / "llama.cpp" / "0001-vulkan-older-headers-compat.patch"
    patch.write_text("".join(line for line in patch.read_text().splitlines(True)
                             if not line.startswith("Vulkan-Headers-")))
    theirs = _vulkan_header_check(root, tmp_path)
    assert theirs["ok"] is False and "older than 1.3.261" in theirs["detail"]


def test_vulkan_minimum_is_the_lowest_a_patch_declares(tmp_path):
    a, b, c = (tmp_path / n for n in ("0001-a.patch", "0002-b.patch", "0003-c.patch"))
    a.write_text("Subject: a\n\nVulkan-Headers-Minimum: 1.3.250\n---\n diff\n")
    b.write_text("Subject: b\n\nVulkan-Headers-Minimum: 1.3.239\n---\n diff\n")
    c.write_text("Subject: c\n---\n+Vulkan-Headers-Minimum: 1.0.0\n")  # in the diff, not the message: ignored
    assert vulkan_minimum([a, b, c]) == ((1, 3, 239), "with 0002-b.patch")
    assert vulkan_minimum([c]) == ((1, 3, 261), "VK_EXT_layer_settings")
