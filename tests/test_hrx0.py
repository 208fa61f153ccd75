"""The hrx0 recipe (the engine's current HRX stack) end to end on small real stand-ins of its two
sources (_hrx0_standins.py), and what it adds to plan, doctor, location and gc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from _hrx0_standins import LIBHSA, MISSED, cli, failure_report, list_devices, make_project, project
from _support import REPO, run_cli
from onebit_build.checking.artifacts import read_cmake_cache
from onebit_build.checking.manifest import read_manifest
from onebit_build.spec.recipe import load_recipe
from onebit_build.spec.pins import load_pins


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return make_project(tmp_path_factory)


@pytest.fixture(scope="module")
def built(standins):
    out = cli(standins, "--toolchain-root", str(standins["tc"]), "build")
    assert out.returncode == 0, failure_report(out, standins["ws"])
    return {**standins, "out": out, "man": read_manifest(standins["ws"] / "manifests" / "hrx0.json")}


def test_one_build_of_the_fork_builds_hrx_system_from_its_pinned_tree(built):
    man, tc = built["man"], built["tc"]
    (llama,) = man["components"]
    sources = {s["name"]: s for s in man["sources"]}
    # Both pins fetched and prepared; the hrx-system tree is what the fork got as HRX_SOURCE_DIR.
    assert sources["hrx-system-hrx0"]["commit"] == built["s"]["hrx-system-hrx0"]
    assert llama["defines"]["HRX_SOURCE_DIR"] == sources["hrx-system-hrx0"]["tree"]
    assert llama["defines"]["CMAKE_C_COMPILER"] == f"{tc}/bin/amdclang"
    cache = read_cmake_cache(Path(llama["build_dir"]))
    assert cache["GGML_HRX"] == "ON" and cache["GGML_VULKAN"] == "OFF"
    assert cache["HRX_SOURCE_DIR"] == sources["hrx-system-hrx0"]["tree"]
    # hrx-system was configured inside the fork's build, with the fork's compiler and its driver on.
    sub = read_cmake_cache(Path(llama["build_dir"]) / "ggml/src/ggml-hrx/hrx/src/ggml-hrx-deps-build")
    assert sub["IREE_HAL_DRIVER_AMDGPU"] == "ON" and sub["CMAKE_C_COMPILER"] == f"{tc}/bin/amdclang"
    # The libraries the ExternalProject left in its own build folder are outputs too (hashed, installed).
    outputs = {o["name"]: o for o in llama["outputs"]}
    assert "llama-server" in outputs and {"libhrx.so.0", "libloomc.so.0"} <= set(outputs), sorted(outputs)
    assert "/ggml-hrx-deps-build/libhrx/src/libhrx/" in outputs["libhrx.so.0"]["path"]
    assert all(len(o["sha256"]) == 64 for o in outputs.values())


def test_therock_hsa_runtime_gives_hrx0_and_nothing_else(built):
    server = next(o["path"] for o in built["man"]["components"][0]["outputs"] if o["name"] == "llama-server")
    listed = list_devices(server, {"IREE_HAL_AMDGPU_LIBHSA_PATH": str(built["tc"] / "lib" / LIBHSA)})
    assert "HRX0: Stand-in Radeon 8060S Graphics (gfx1151)" in listed and "Vulkan0" not in listed


def test_distribution_hsa_runtime_leaves_no_hrx0(built):
    """It rejects the PM4 emulation probe on gfx1151: HRX registers no device, whether it is named
    in the variable or found by the loader."""
    server = next(o["path"] for o in built["man"]["components"][0]["outputs"] if o["name"] == "llama-server")
    assert "HRX0" not in list_devices(server, {"IREE_HAL_AMDGPU_LIBHSA_PATH": str(built["distro"])})
    assert "HRX0" not in list_devices(server, {"LD_LIBRARY_PATH": str(built["distro"].parent)})


def test_doctor_passes_against_the_standins(built):
    out = cli(built, "--toolchain-root", str(built["tc"]), "doctor",
              env={"IREE_HAL_AMDGPU_LIBHSA_PATH": ""})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "everything the recipe needs is here" in out.stdout
    assert "source hrx-system-hrx0 (HRX_SOURCE_DIR of llama)" in out.stdout
    assert "--list-devices shows HRX0" in out.stdout and "gfx1151 is listed" in out.stdout


def test_doctor_names_the_distribution_hsa_runtime_hrx_would_load(built, tmp_path):
    """Without TheRock's HSA runtime the loader's one would be used: doctor names it, says why HRX0
    cannot appear, and the device list of the built server agrees, in one report."""
    tc = tmp_path / "therock"
    shutil.copytree(built["tc"], tc, symlinks=True)
    (tc / "lib" / LIBHSA).unlink()
    out = cli(built, "--toolchain-root", str(tc), "doctor",
              env={"IREE_HAL_AMDGPU_LIBHSA_PATH": "", "LD_LIBRARY_PATH": str(built["distro"].parent)})
    assert out.returncode == 7, out.stdout + out.stderr
    hsa = next(ln for ln in out.stdout.splitlines() if "HSA runtime" in ln)
    assert "FAIL" in hsa and f"HRX would load {built['distro']} instead" in hsa and "PM4 emulation probe" in hsa
    assert "fix: install TheRock" in out.stdout
    assert "FAIL  GPU" in out.stdout  # the same build, doctor cannot hand HRX TheRock's runtime


def test_doctor_lists_everything_missing_at_once(tmp_path):
    """No TheRock, no network, nothing cached: every missing piece on its own line with its fix,
    and doctor's exit code is the missing-tool one."""
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", "hrx0", "--offline", "doctor",
                  env={"ONEBIT_TOOLCHAIN_ROOT": str(tmp_path / "none"), "IREE_HAL_AMDGPU_LIBHSA_PATH": ""})
    assert out.returncode == 7, out.stderr
    failed = [ln.split("  ")[2].strip() for ln in out.stdout.splitlines() if ln.startswith("  FAIL  ")]
    for name in ("toolchain root", "amdclang", "amdclang++", "HSA runtime", "llama: Clang C compiler",
                 "source llama.cpp-hrx0", "source hrx-system-hrx0 (HRX_SOURCE_DIR of llama)"):
        assert name in failed, (name, out.stdout)
    assert out.stdout.count("fix: ") >= len(failed) and not (tmp_path / "ws").exists()


def test_without_therock_nothing_is_fetched(standins, tmp_path):
    out = cli(standins, "--toolchain-root", str(tmp_path / "none"), "build", ws=tmp_path / "ws")
    assert out.returncode == 7, out.stderr
    assert "missing: llama: Clang C compiler" in out.stderr and f"{tmp_path}/none/bin/amdclang" in out.stderr
    assert MISSED["amdclang"] in failure_report(out, tmp_path / "ws")
    assert not (tmp_path / "ws" / "git").exists()


def test_hrx_system_refuses_a_compiler_that_is_not_clang(standins, tmp_path):
    """What the fork's ExternalProject meets when the build's compiler is GCC: hrx-system's
    configure stops, inside the fork's build."""
    from onebit_build.building.cmake import find_tools

    tools = find_tools()
    src = standins["base"] / "repos"
    conf = subprocess.run([str(tools.cmake), "-S", str(src / "llama"), "-B", str(tmp_path / "b"), "-G", "Ninja",
                           f"-DCMAKE_MAKE_PROGRAM={tools.ninja}", f"-DCMAKE_C_COMPILER={shutil.which('gcc')}",
                           "-DGGML_HRX=ON", f"-DHRX_SOURCE_DIR={src / 'hrx-system'}", "-DLLAMA_BUILD_UI=OFF"],
                          capture_output=True, text=True)
    assert conf.returncode == 0, conf.stderr
    out = subprocess.run([str(tools.cmake), "--build", str(tmp_path / "b")], capture_output=True, text=True,
                         env={**os.environ, "PATH": f"{Path(tools.ninja).parent}:{os.environ['PATH']}"})
    assert out.returncode != 0
    assert MISSED["amdclang"] in failure_report(subprocess.CompletedProcess([], 1, "", out.stdout + out.stderr),
                                                tmp_path / "none")


def test_without_hrx_source_dir_configure_stops(standins, tmp_path):
    root = project(tmp_path / "proj", standins["s"], recipe_without=("HRX_SOURCE_DIR",))
    ws = tmp_path / "ws"
    out = cli(standins, "--toolchain-root", str(standins["tc"]), "build", root=root, ws=ws)
    assert out.returncode == 9, out.stderr
    assert f"upstream requirement missed: {MISSED['HRX_SOURCE_DIR']}" in failure_report(out, ws)


def test_plan_hands_the_pinned_tree_as_hrx_source_dir(tmp_path):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", "hrx0", "plan")
    assert out.returncode == 0, out.stderr
    pins = load_pins(REPO / "pins.yaml")
    sha = pins.get("hrx-system-hrx0").commit
    assert f"HRX_SOURCE_DIR={tmp_path}/ws/src/hrx-system-hrx0-{sha[:12]}-" in out.stdout
    assert "GGML_VULKAN=OFF" in out.stdout and "LLAMA_ARG_FLASH_ATTN=on" in out.stdout
    assert "kernels  compiled at run time into ~/.cache/1bit/hrx-jit (or $GGML_HRX_JIT_CACHE_DIR)" in out.stdout
    doc = json.loads(run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", "hrx0", "plan", "--json").stdout)
    assert [s["name"] for s in doc["sources"]] == ["llama.cpp-hrx0", "hrx-system-hrx0"]
    assert doc["jit_cache"] == {"env": "GGML_HRX_JIT_CACHE_DIR", "home": ".cache/1bit/hrx-jit",
                                "entries": ["*.bin", "*.tmp.*"]}


def test_hrx_on_keeps_the_pinned_stack(tmp_path):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--hrx", "on", "plan", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["recipe"] == "strix-halo"


def test_the_offload_check_expects_hrx0():
    from onebit_build.running.offload import check_offload

    recipe = load_recipe(REPO / "recipes" / "hrx0.yaml", load_pins(REPO / "pins.yaml"))
    assert recipe.smoke.devices == ("HRX0",) and recipe.smoke.gpu == "gfx1151"
    assert dict(recipe.smoke.env)["LLAMA_ARG_FLASH_ATTN"] == "on"  # -fa off fails on HRX0
    on_gpu = ("load_tensors: offloaded 29/29 layers to GPU\n"
              "load_tensors:   CPU_Mapped model buffer size =    94.50 MiB\n"
              "load_tensors:         HRX0 model buffer size =   310.12 MiB\n")
    on_cpu = "load_tensors: offloaded 0/29 layers to GPU\nload_tensors:   CPU_Mapped model buffer size =   404.62 MiB\n"
    for device in recipe.smoke.devices:
        assert check_offload(device, on_gpu).passed
        assert not check_offload(device, on_cpu).passed


def test_location_and_gc_know_the_jit_cache(tmp_path):
    home = tmp_path / "home"
    cache = home / ".cache" / "1bit" / "hrx-jit"
    cache.mkdir(parents=True)
    entries = [cache / f"{'0123456789abcdef' * 2}.bin", cache / f"{'fedcba9876543210' * 2}.tmp.140245"]
    for e in entries:
        e.write_bytes(b"\0" * 1000)
    (cache / "notes.txt").write_text("not the backend's\n")
    env = {"HOME": str(home), "GGML_HRX_JIT_CACHE_DIR": ""}
    ws = ("--workspace", str(tmp_path / "ws"))
    out = run_cli(REPO, *ws, "--recipe", "hrx0", "location", "--jit-cache", env=env)
    assert out.returncode == 0 and out.stdout.strip() == str(cache), out.stderr
    other = tmp_path / "elsewhere"
    out = run_cli(REPO, *ws, "--recipe", "hrx0", "location", "--jit-cache",
                  env={**env, "GGML_HRX_JIT_CACHE_DIR": str(other)})
    assert out.stdout.strip() == str(other)
    out = run_cli(REPO, *ws, "location", "--jit-cache", env=env)
    assert out.returncode == 12 and "declares no run-time kernel cache" in out.stderr
    out = run_cli(REPO, *ws, "gc", env=env)
    assert out.returncode == 0 and f"kept the run-time kernel cache of hrx0: {cache} (2 entries" in out.stderr
    out = run_cli(REPO, *ws, "gc", "--dry-run", "--jit-cache", env=env)
    assert out.returncode == 0 and "would remove the entries of hrx0's kernel cache" in out.stderr
    assert all(e.exists() for e in entries)
    out = run_cli(REPO, *ws, "gc", "--jit-cache", env=env)
    assert out.returncode == 0, out.stderr
    assert not any(e.exists() for e in entries) and (cache / "notes.txt").exists()


@pytest.mark.parametrize("section, problem", [
    ({"env": "GGML_HRX_JIT_CACHE_DIR", "home": "/etc", "entries": ["*.bin"]}, "is not a folder inside the home"),
    ({"env": "GGML_HRX_JIT_CACHE_DIR", "home": "../..", "entries": ["*.bin"]}, "is not a folder inside the home"),
    ({"env": "GGML_HRX_JIT_CACHE_DIR", "home": ".", "entries": ["*.bin"]}, "is not a folder inside the home"),
    ({"env": "GGML_HRX_JIT_CACHE_DIR", "home": ".cache/x", "entries": ["*"]}, "would match nearly every file"),
    ({"env": "GGML_HRX_JIT_CACHE_DIR", "home": ".cache/x", "entries": ["../*.bin"]}, "is not one file pattern"),
    ({"env": "lower; rm", "home": ".cache/x", "entries": ["*.bin"]}, "is not a variable name"),
])
def test_a_jit_cache_gc_could_be_turned_on_is_refused(tmp_path, section, problem):
    import yaml

    from onebit_build.core.errors import ConfigError

    doc = yaml.safe_load((REPO / "recipes" / "hrx0.yaml").read_text())
    doc["jit_cache"] = section
    (tmp_path / "hrx0.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as exc:
        load_recipe(tmp_path / "hrx0.yaml", load_pins(REPO / "pins.yaml"))
    assert problem in str(exc.value) and "jit_cache" in str(exc.value)


def test_a_given_system_libhsa_is_named_as_the_distributions(tmp_path):
    from onebit_build.doctor.hsa import hsa_runtime_check

    lib = tmp_path / "usr" / "lib" / "x86_64-linux-gnu" / LIBHSA
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    key = "IREE_HAL_AMDGPU_LIBHSA_PATH"
    check = hsa_runtime_check(key, None, tmp_path / "therock", ("lib/" + LIBHSA,), {key: str(lib)},
                              system_dirs=(str(tmp_path / "usr" / "lib"),))
    assert check.ok is False and "is the system's" in check.detail and "PM4 emulation probe" in check.detail
    mine = tmp_path / "therock" / "lib" / LIBHSA
    assert hsa_runtime_check(key, None, tmp_path / "therock", (), {key: str(lib)}).ok is True  # not a system folder
    mine.parent.mkdir(parents=True)
    mine.write_bytes(b"\x7fELF")
    assert hsa_runtime_check(key, None, tmp_path / "therock", (), {key: str(mine)},
                             system_dirs=(str(tmp_path),)).ok is True  # TheRock's own, wherever it lies
