"""The Strix Halo build end to end on small real stand-ins for its three sources.

They are tiny CMake projects in real git repositories, with real patch series, shaped
like the real sources where the build tool touches them:

- ``hrx``: libhrx (a shared library with install/export rules and a PM4-probe that fails
  like gfx1151's), libloomc (linked with an export version script that hides a function
  the AMDGPU binding calls) and the AMDGPU binding as an object library. Its series turns
  the install/export rules off, drops the version script, and treats the failed probe as
  native AQL: without the series the llama stand-in cannot link or list HRX20.
- ``hrx-system``: the same tree plus ``loom-link``, which turns a ``.loom`` file into a
  deterministic ``.loombc`` that records the input's absolute path like the real tool.
  A later commit removes ``--mode=selective`` (the commit the pin must stay before).
- ``llama.cpp-hrx``: finds the ``hrx`` package, runs loom-link once per entry of
  ``ggml/src/ggml-hrx2/catalog/artifacts.json`` into
  ``<build>/ggml/src/ggml-hrx2/generated/catalog/artifacts/``, and builds a
  ``llama-server`` whose ``--list-devices`` shows HRX20 (when the HSA runtime is given and
  the probe is patched) and Vulkan0.

Each stand-in also checks the configure defines the real recipe passes, so the real
``recipes/strix-halo.yaml`` is what the tests build.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from _support import GIT_ENV, REPO, git

KERNELS = ("add_rms_norm_mul", "get_rows", "mul_mat_f32", "mul_mat_q4_0", "quantize_q8_1", "rms_norm")

HRX_TOP = """\
cmake_minimum_required(VERSION 3.20)
project(hrx_standin C)
# The real recipe passes these; a list must arrive as a CMake list.
list(LENGTH IREE_HAL_AMDGPU_TARGETS _targets)
if(NOT _targets EQUAL 7)
  message(FATAL_ERROR "IREE_HAL_AMDGPU_TARGETS is not a list of 7: '${IREE_HAL_AMDGPU_TARGETS}'")
endif()
if(NOT LOOM_TARGET_AMDGPU OR NOT IREE_DEPENDENCY_MODE STREQUAL "pinned" OR NOT BUILD_SHARED_LIBS)
  message(FATAL_ERROR "the HRX configure flags did not arrive")
endif()
if(DEFINED IREE_ROCM_PATH)
  message(FATAL_ERROR "IREE_ROCM_PATH must stay unset")
endif()
option(LIBHRX_BUILD "build libhrx" ON)
add_subdirectory(loom/binding/c)
add_subdirectory(loom/src/loom/tools/loom-link)
if(LIBHRX_BUILD)
  add_subdirectory(libhrx)
endif()
"""

LIBHRX_CMAKE = """\
add_subdirectory(src/libhrx)
install(TARGETS libhrx_src_libhrx_hrx EXPORT hrx-targets
  LIBRARY DESTINATION lib)
install(FILES include/hrx_runtime.h DESTINATION include/hrx)
install(EXPORT hrx-targets
  NAMESPACE hrx::
  DESTINATION lib/cmake/hrx)
export(EXPORT hrx-targets
  NAMESPACE hrx::
  FILE "${CMAKE_CURRENT_BINARY_DIR}/cmake/hrx/hrx-targets.cmake")
"""

LIBHRX_SRC_CMAKE = """\
add_library(libhrx_src_libhrx_hrx SHARED hrx.c
  ${PROJECT_SOURCE_DIR}/runtime/src/iree/hal/drivers/amdgpu/util/aql_ring.c)
set_target_properties(libhrx_src_libhrx_hrx PROPERTIES OUTPUT_NAME hrx VERSION 0.1.0 SOVERSION 0)
target_include_directories(libhrx_src_libhrx_hrx PUBLIC ${PROJECT_SOURCE_DIR}/libhrx/include)
"""

HRX_H = """\
#ifndef HRX_RUNTIME_H
#define HRX_RUNTIME_H
/* 0: native AQL, 1: PM4-emulated, negative: the device cannot be used. */
int hrx_queue_mode(void);
const char *hrx_version(void);
#endif
"""

HRX_C = """\
#include "hrx_runtime.h"
const char *hrx_version(void) { return "hrx stand-in 0.1.0"; }
"""

AQL_RING_C = """\
#include "hrx_runtime.h"

/* Stand-in for HSA_AMD_AGENT_INFO_PM4_EMULATION: gfx1151's runtime rejects it. */
static int query_pm4_emulation(int *out) {
  (void)out;
  return -1;
}

int hrx_queue_mode(void) {
  int pm4_emulation = 0;
  if (query_pm4_emulation(&pm4_emulation) != 0) {
    return -1;
  }
  return pm4_emulation;
}
"""

LOOMC_CMAKE = """\
add_library(loomc_shared SHARED src/loomc.c)
set_target_properties(loomc_shared PROPERTIES OUTPUT_NAME loomc VERSION 0.1.0 SOVERSION 0)
target_include_directories(loomc_shared PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
target_link_options(loomc_shared PRIVATE
  "-Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/cmake/loomc_exports.lds")
install(TARGETS loomc_shared EXPORT loomc-targets LIBRARY DESTINATION lib)
install(EXPORT loomc-targets
  NAMESPACE loomc::
  DESTINATION lib/cmake/loomc)
export(EXPORT loomc-targets
  NAMESPACE loomc::
  FILE "${CMAKE_CURRENT_BINARY_DIR}/cmake/loomc/loomc-targets.cmake")
add_subdirectory(target/amdgpu)
"""

LOOMC_H = """\
#ifndef LOOMC_H
#define LOOMC_H
int loomc_version(void);
int loomc_link_module(const char *name);
#endif
"""

LOOMC_C = """\
#include <string.h>
#include "loomc/loomc.h"
int loomc_version(void) { return 1; }
int loomc_link_module(const char *name) { return (int)strlen(name); }
"""

LOOMC_LDS = "{ global: loomc_version; local: *; };\n"

AMDGPU_CMAKE = """\
add_library(loom_binding_c_target_amdgpu_amdgpu.objects OBJECT amdgpu.c)
set_target_properties(loom_binding_c_target_amdgpu_amdgpu.objects PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(loom_binding_c_target_amdgpu_amdgpu.objects PRIVATE ${PROJECT_SOURCE_DIR}/loom/binding/c/include)
"""

AMDGPU_C = """\
#include "loomc/loomc.h"
int loomc_amdgpu_target_count(void) { return loomc_link_module("gfx1151") > 0 ? 1 : 0; }
"""

LOOM_LINK_CMAKE = """\
add_executable(loom_tools_loom-link_loom-link loom_link.c)
set_target_properties(loom_tools_loom-link_loom-link PROPERTIES OUTPUT_NAME loom-link)
"""

LOOM_LINK_C = """\
#include <stdio.h>
#include <string.h>

/* loom-link --mode=selective -o OUT IN: bytecode that records IN's path, like the real tool. */
int main(int argc, char **argv) {
  const char *mode = NULL, *out = NULL, *in = NULL;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--mode=", 7) == 0) mode = argv[i] + 7;
    else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
    else in = argv[i];
  }
  if (!mode || strcmp(mode, "selective") != 0) {
    fprintf(stderr, "loom-link: unknown mode '%s'\\n", mode ? mode : "");
    return 2;
  }
  if (!out || !in) { fprintf(stderr, "usage: loom-link --mode=selective -o OUT IN\\n"); return 2; }
  FILE *fi = fopen(in, "rb");
  FILE *fo = fopen(out, "wb");
  if (!fi || !fo) { perror("loom-link"); return 1; }
  unsigned long h = 1469598103UL;
  unsigned char buf[4096];
  size_t n;
  fprintf(fo, "LOOMBC1\\nsource %s\\n", in);
  while ((n = fread(buf, 1, sizeof buf, fi)) > 0) {
    for (size_t i = 0; i < n; ++i) { h = (h ^ buf[i]) * 16777619UL; buf[i] ^= 0x5a; }
    fwrite(buf, 1, n, fo);
  }
  fprintf(fo, "\\nhash %08lx\\n", h & 0xffffffffUL);
  return fclose(fo) != 0 || fclose(fi) != 0;
}
"""

LLAMA_TOP = """\
cmake_minimum_required(VERSION 3.20)
project(llama_standin C)
option(GGML_HRX2 "HRX backend" OFF)
option(GGML_VULKAN "Vulkan backend" OFF)
if(NOT GGML_HRX2 OR NOT GGML_VULKAN OR NOT LLAMA_BUILD_SERVER)
  message(FATAL_ERROR "GGML_HRX2, GGML_VULKAN and LLAMA_BUILD_SERVER must be ON")
endif()
if(NOT EXISTS "${GGML_HRX2_LOOM_LINK_EXECUTABLE}")
  message(FATAL_ERROR "no loom-link at '${GGML_HRX2_LOOM_LINK_EXECUTABLE}'")
endif()
find_package(hrx CONFIG REQUIRED)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_subdirectory(ggml/src/ggml-hrx2)
add_executable(llama-server tools/server/server.c)
target_compile_definitions(llama-server PRIVATE BUILD_COMMIT="${LLAMA_BUILD_COMMIT}")
target_link_libraries(llama-server PRIVATE ggml-hrx2 hrx::hrx loom::binding::c::target::amdgpu)
add_executable(llama-bench tools/bench/bench.c)
"""

HRX2_CMAKE = """\
file(READ "${CMAKE_CURRENT_SOURCE_DIR}/catalog/artifacts.json" _catalog)
string(JSON _count LENGTH "${_catalog}" artifacts)
set(_dir "${CMAKE_CURRENT_BINARY_DIR}/generated/catalog/artifacts")
file(MAKE_DIRECTORY "${_dir}")
set(_outputs)
math(EXPR _last "${_count} - 1")
foreach(_i RANGE ${_last})
  string(JSON _name GET "${_catalog}" artifacts ${_i} name)
  string(REGEX REPLACE "\\\\.loombc$" "" _name "${_name}")
  add_custom_command(
    OUTPUT "${_dir}/${_name}.loombc"
    COMMAND "${GGML_HRX2_LOOM_LINK_EXECUTABLE}" --mode=selective -o "${_dir}/${_name}.loombc"
            "${CMAKE_CURRENT_SOURCE_DIR}/kernels/${_name}.loom"
    DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/kernels/${_name}.loom" "${GGML_HRX2_LOOM_LINK_EXECUTABLE}"
    VERBATIM)
  list(APPEND _outputs "${_dir}/${_name}.loombc")
endforeach()
add_custom_target(ggml-hrx2-catalog DEPENDS ${_outputs})
add_library(ggml-hrx2 SHARED ggml-hrx2.c)
add_dependencies(ggml-hrx2 ggml-hrx2-catalog)
target_compile_definitions(ggml-hrx2 PRIVATE GGML_HRX2_ARTIFACTS=${_count})
"""

HRX2_C = """\
int ggml_hrx2_artifact_count(void) { return GGML_HRX2_ARTIFACTS; }
"""

SERVER_C = """\
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hrx_runtime.h"

int ggml_hrx2_artifact_count(void);
int loomc_amdgpu_target_count(void);

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--list-devices") == 0) {
    const char *hsa = getenv("IREE_HAL_AMDGPU_LIBHSA_PATH");
    printf("Available devices:\\n");
    if (hsa && *hsa && access(hsa, R_OK) == 0 && hrx_queue_mode() >= 0)
      printf("  HRX20: Stand-in Radeon 8060S Graphics (gfx1151)\\n");
    printf("  Vulkan0: Stand-in Radeon 8060S Graphics (RADV STRIX_HALO)\\n");
    return 0;
  }
  printf("llama-server stand-in %s: %d kernels, %d amdgpu target, %s\\n", BUILD_COMMIT,
         ggml_hrx2_artifact_count(), loomc_amdgpu_target_count(), hrx_version());
  return 0;
}
"""

BENCH_C = "int main(void) { return 0; }\n"


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def commit(repo: Path, files: dict[str, str], message: str, remove: tuple[str, ...] = ()) -> str:
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        git(repo, "init", "-q", "-b", "main")
    write_files(repo, files)
    for rel in remove:
        (repo / rel).unlink()
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def hrx_tree() -> dict[str, str]:
    return {
        "CMakeLists.txt": HRX_TOP,
        "libhrx/CMakeLists.txt": LIBHRX_CMAKE,
        "libhrx/src/libhrx/CMakeLists.txt": LIBHRX_SRC_CMAKE,
        "libhrx/src/libhrx/hrx.c": HRX_C,
        "libhrx/include/hrx_runtime.h": HRX_H,
        "runtime/src/iree/hal/drivers/amdgpu/util/aql_ring.c": AQL_RING_C,
        "loom/binding/c/CMakeLists.txt": LOOMC_CMAKE,
        "loom/binding/c/cmake/loomc_exports.lds": LOOMC_LDS,
        "loom/binding/c/include/loomc/loomc.h": LOOMC_H,
        "loom/binding/c/src/loomc.c": LOOMC_C,
        "loom/binding/c/target/amdgpu/CMakeLists.txt": AMDGPU_CMAKE,
        "loom/binding/c/target/amdgpu/amdgpu.c": AMDGPU_C,
        "loom/src/loom/tools/loom-link/CMakeLists.txt": LOOM_LINK_CMAKE,
        "loom/src/loom/tools/loom-link/loom_link.c": LOOM_LINK_C,
    }


# The stand-in series, as (message, {path: (old, new)}) edits of the pinned tree.
NO_INSTALL_EXPORT = ("libhrx: leave out the install and export rules of hrx-targets", {
    "libhrx/CMakeLists.txt": (LIBHRX_CMAKE, "add_subdirectory(src/libhrx)\ninstall(FILES include/hrx_runtime.h DESTINATION include/hrx)\n"),
})
NO_VERSION_SCRIPT = ("loomc: drop the export version script and the export rules", {
    "loom/binding/c/CMakeLists.txt": (LOOMC_CMAKE, LOOMC_CMAKE.split("target_link_options")[0]
                                      + "install(TARGETS loomc_shared EXPORT loomc-targets LIBRARY DESTINATION lib)\n"
                                      + "add_subdirectory(target/amdgpu)\n"),
})
PM4_NATIVE = ("amdgpu: treat a failed PM4-emulation probe as native AQL", {
    "runtime/src/iree/hal/drivers/amdgpu/util/aql_ring.c": (
        "    return -1;\n  }\n  return pm4_emulation;", "    pm4_emulation = 0;\n  }\n  return pm4_emulation;"),
})


def make_series(repo: Path, base: str, edits: list[tuple[str, dict[str, tuple[str, str]]]], out_dir: Path) -> list[Path]:
    """Commit each edit on top of ``base``, write them with format-patch, reset to ``base``."""
    for message, changes in edits:
        files = {}
        for rel, (old, new) in changes.items():
            text = (repo / rel).read_text()
            assert old in text, f"{rel}: stand-in edit does not match"
            files[rel] = text.replace(old, new, 1)
        commit(repo, files, message)
    out_dir.mkdir(parents=True, exist_ok=True)
    git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", "-o", str(out_dir), f"{base}..HEAD")
    git(repo, "reset", "-q", "--hard", base)
    return sorted(out_dir.glob("*.patch"))


def llama_tree() -> dict[str, str]:
    entries = [{"name": k} if i % 2 else {"name": f"{k}.loombc", "family": "gfx11"} for i, k in enumerate(KERNELS)]
    import json

    files = {
        "CMakeLists.txt": LLAMA_TOP,
        "ggml/src/ggml-hrx2/CMakeLists.txt": HRX2_CMAKE,
        "ggml/src/ggml-hrx2/ggml-hrx2.c": HRX2_C,
        "ggml/src/ggml-hrx2/catalog/artifacts.json": json.dumps({"artifacts": entries}, indent=2) + "\n",
        "tools/server/server.c": SERVER_C,
        "tools/bench/bench.c": BENCH_C,
    }
    for i, k in enumerate(KERNELS):
        files[f"ggml/src/ggml-hrx2/kernels/{k}.loom"] = f"kernel @{k}(%x: tensor) {{ // route {i}\n  return %x\n}}\n"
    return files


def fake_toolchain(root: Path) -> Path:
    """A TheRock-shaped folder: bin/amdclang(++) that run the system compilers,
    lib/llvm/bin/llvm-ar (the system ar) and lib/libhsa-runtime64.so.1."""
    for name, real in (("amdclang", "cc"), ("amdclang++", "c++")):
        p = root / "bin" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        target = shutil.which(real) or shutil.which("gcc" if real == "cc" else "g++")
        assert target, f"no {real} on this machine"
        p.write_text(f"#!/bin/sh\nexec {target} \"$@\"\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    ar = root / "lib" / "llvm" / "bin" / "llvm-ar"
    ar.parent.mkdir(parents=True, exist_ok=True)
    system_ar = shutil.which("ar")
    assert system_ar, "no ar on this machine"
    os.symlink(system_ar, ar)
    (root / "lib" / "libhsa-runtime64.so.1").write_bytes(b"\x7fELF stand-in HSA runtime\n")
    return root


def bare(repo: Path, mirrors: Path, name: str) -> Path:
    mirrors.mkdir(parents=True, exist_ok=True)
    dest = mirrors / f"{name}.git"
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(dest)], check=True, env={**os.environ, **GIT_ENV})
    return dest


def make_standins(base: Path) -> dict[str, object]:
    """Repositories, mirrors, patch series and a project folder using the real recipe."""
    repos, mirrors, series = base / "repos", base / "mirrors", base / "series"
    hrx_commit = commit(repos / "hrx", hrx_tree(), "hrx stand-in")
    hrx_patches = make_series(repos / "hrx", hrx_commit, [NO_INSTALL_EXPORT, NO_VERSION_SCRIPT, PM4_NATIVE], series / "hrx")
    sys_commit = commit(repos / "hrx-system", hrx_tree(), "hrx-system stand-in")
    sys_patches = make_series(repos / "hrx-system", sys_commit, [NO_VERSION_SCRIPT], series / "hrx-system")
    # The commit the pin must stay before: it removes --mode=selective.
    text = LOOM_LINK_C.replace('strcmp(mode, "selective") != 0', 'strcmp(mode, "whole") != 0')
    removal = commit(repos / "hrx-system", {"loom/src/loom/tools/loom-link/loom_link.c": text}, "loom-link: remove --mode=selective")
    llama_commit = commit(repos / "llama", llama_tree(), "llama.cpp fork stand-in")
    for name, repo in (("hrx", "hrx"), ("hrx-system", "hrx-system"), ("llama.cpp-hrx", "llama")):
        bare(repos / repo, mirrors, name)
    return {
        "hrx": hrx_commit, "hrx-system": sys_commit, "removal": removal, "llama.cpp-hrx": llama_commit,
        "patches": {"hrx": hrx_patches, "hrx-system": sys_patches}, "mirrors": mirrors,
    }


def project(root: Path, s: dict[str, object], *, system_commit: str | None = None) -> Path:
    """A project folder with the REAL strix-halo recipe and template, pins that name the
    stand-ins (abbreviated like the real ones) and the stand-in patch series."""
    (root / "recipes" / "strix-halo").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "recipes" / "strix-halo.yaml", root / "recipes" / "strix-halo.yaml")
    shutil.copy(REPO / "recipes" / "strix-halo" / "hrx-config.cmake.in", root / "recipes" / "strix-halo" / "hrx-config.cmake.in")
    sys_commit = system_commit or str(s["hrx-system"])
    (root / "pins.yaml").write_text(
        "schema: 1\nsources:\n"
        f"  hrx:\n    url: https://example.invalid/hrx.git\n    commit: {str(s['hrx'])[:7]}\n    abbreviated: true\n"
        f"  hrx-system:\n    url: https://example.invalid/hrx-system.git\n    commit: {sys_commit[:8]}\n    abbreviated: true\n"
        f"    note: must stay before {s['removal']}, which removed loom-link --mode=selective\n"
        f"    before: {s['removal']}\n"
        f"  llama.cpp-hrx:\n    url: https://example.invalid/llama.git\n    branch: 1bit-engine/hrx-vulkan\n    commit: {s['llama.cpp-hrx']}\n"
    )
    for source, files in dict(s["patches"]).items():  # type: ignore[arg-type]
        d = root / "patches" / source
        d.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy(f, d / f.name)
    return root


# --------------------------------------------------------------------------- the tests

import json  # noqa: E402

import pytest  # noqa: E402

from _support import run_cli  # noqa: E402
from onebit_build.fsutil import sha256_file  # noqa: E402
from onebit_build.manifest import read_manifest  # noqa: E402


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    base = tmp_path_factory.mktemp("hrx")
    s = make_standins(base)
    root = project(base / "proj", s)
    tc = fake_toolchain(base / "therock")
    return {"s": s, "root": root, "tc": tc, "ws": base / "ws", "base": base}


def cli(st, *args, env=None, timeout=600):
    return run_cli(st["root"], "--workspace", str(st["ws"]), "--mirror-dir", str(st["s"]["mirrors"]), "--hrx", "on", *args,
                   env=env, timeout=timeout)


@pytest.fixture(scope="module")
def built(standins):
    out = cli(standins, "--toolchain-root", str(standins["tc"]), "build")
    assert out.returncode == 0, out.stderr
    man = read_manifest(standins["ws"] / "manifests" / "strix-halo.json")
    return {**standins, "out": out, "man": man}


def comp(man, name):
    return next(c for c in man["components"] if c["name"] == name)


def test_build_order_and_defines(built):
    man, tc, err = built["man"], built["tc"], built["out"].stderr
    assert [c["name"] for c in man["components"]] == ["hrx-runtime", "loom-link", "llama"]
    # The stages ran in that order too.
    positions = [err.index(f"configuring {n} ") for n in ("hrx-runtime", "loom-link", "llama")]
    assert positions == sorted(positions)
    rt, ll, llama = comp(man, "hrx-runtime"), comp(man, "loom-link"), comp(man, "llama")
    for c in (rt, ll):
        d = c["defines"]
        assert d["CMAKE_C_COMPILER"] == f"{tc}/bin/amdclang" and d["CMAKE_CXX_COMPILER"] == f"{tc}/bin/amdclang++"
        assert d["CMAKE_AR"] == f"{tc}/lib/llvm/bin/llvm-ar"
        assert d["IREE_HAL_AMDGPU_TARGETS"] == "gfx9-generic;gfx90a;gfx9-4-generic;gfx10-1-generic;gfx10-3-generic;gfx11-generic;gfx12-generic"
        assert "IREE_ROCM_PATH" not in d
    assert ll["defines"]["LIBHRX_BUILD"] == "OFF" and "LIBHRX_BUILD" not in rt["defines"]
    assert rt["targets"] == ["libhrx_src_libhrx_hrx", "loomc_shared", "loom_binding_c_target_amdgpu_amdgpu.objects"]
    assert ll["targets"] == ["loom_tools_loom-link_loom-link"]
    assert llama["targets"] == ["llama-server", "llama-bench"]
    # Later components got the earlier ones' outputs by name.
    prefix = next(o["path"] for o in rt["outputs"] if o["name"] == "prefix")
    loom_link = next(o["path"] for o in ll["outputs"] if o["name"] == "loom-link")
    assert prefix == f"{rt['build_dir']}/onebit-prefix"
    assert llama["defines"]["hrx_DIR"] == f"{prefix}/cmake/hrx"
    assert llama["defines"]["GGML_HRX2_LOOM_LINK_EXECUTABLE"] == loom_link == f"{ll['build_dir']}/loom/src/loom/tools/loom-link/loom-link"
    assert llama["defines"]["GGML_HRX2"] == "ON" and llama["defines"]["GGML_VULKAN"] == "ON"
    assert llama["defines"]["LLAMA_BUILD_COMMIT"] == str(built["s"]["llama.cpp-hrx"])[:7]
    # The abbreviated pins were resolved and locked.
    lock = (built["root"] / "pins.lock").read_text()
    assert str(built["s"]["hrx"]) in lock and str(built["s"]["hrx-system"]) in lock


def test_patch_series_applied_and_prefix_assembled(built):
    man = built["man"]
    srcs = {s["name"]: s for s in man["sources"]}
    assert [p["name"][:4] for p in srcs["hrx"]["patches"]] == ["0001", "0002", "0003"]
    assert [p["name"][:4] for p in srcs["hrx-system"]["patches"]] == ["0001"]
    prefix = Path(next(o["path"] for o in comp(man, "hrx-runtime")["outputs"] if o["name"] == "prefix"))
    lib = prefix / "lib"
    assert (lib / "libhrx.so").is_symlink() and (lib / "libhrx.so.0.1.0").is_file() and (lib / "libloomc.so.0").exists()
    assert (prefix / "include" / "hrx_runtime.h").is_file() and (prefix / "include" / "loomc" / "loomc.h").is_file()
    members = subprocess.run(["ar", "t", str(lib / "libloomc_amdgpu.a")], capture_output=True, text=True, check=True).stdout.split()
    assert members == ["amdgpu.c.o"]
    config = (prefix / "cmake" / "hrx" / "hrx-config.cmake").read_text()
    assert "loom::binding::c::target::amdgpu" in config and "hrx-runtime" in config
    # Assembled, not installed: the export rules are off, so no targets file exists anywhere.
    assert not list(Path(comp(man, "hrx-runtime")["build_dir"]).rglob("hrx-targets.cmake"))
    # The server links (libloomc without its version script) and, given the HSA runtime,
    # lists HRX20 (the probe patch) next to Vulkan0.
    server = next(o["path"] for o in comp(man, "llama")["outputs"] if o["name"] == "llama-server")
    env = {**os.environ, "IREE_HAL_AMDGPU_LIBHSA_PATH": str(built["tc"] / "lib" / "libhsa-runtime64.so.1")}
    listing = subprocess.run([server, "--list-devices"], capture_output=True, text=True, env=env, check=True).stdout
    assert "HRX20" in listing and "gfx1151" in listing and "Vulkan0" in listing
    env.pop("IREE_HAL_AMDGPU_LIBHSA_PATH")
    assert "HRX20" not in subprocess.run([server, "--list-devices"], capture_output=True, text=True, env=env, check=True).stdout


def test_artifacts_counted_hashed_and_from_canonical_paths(built):
    man = built["man"]
    llama = comp(man, "llama")
    tree = next(s["tree"] for s in man["sources"] if s["name"] == "llama.cpp-hrx")
    patch_digest = next(s["patch_digest"] for s in man["sources"] if s["name"] == "llama.cpp-hrx")
    assert tree == str(built["ws"] / "src" / f"llama.cpp-hrx-{str(built['s']['llama.cpp-hrx'])[:12]}-{patch_digest[:12]}")
    catalog = json.loads((Path(tree) / "ggml/src/ggml-hrx2/catalog/artifacts.json").read_text())["artifacts"]
    sets = llama["artifacts"]
    assert [s["kind"] for s in sets] == ["loombc"]
    loombc = sets[0]
    assert loombc["count"] == len(catalog) == len(KERNELS)
    assert sorted(i["name"] for i in loombc["items"]) == sorted(f"{k}.loombc" for k in KERNELS)
    assert loombc["facts"]["source_dir"] == tree
    root = Path(llama["build_dir"]) / "ggml/src/ggml-hrx2/generated/catalog/artifacts"
    for item in loombc["items"]:
        f = root / item["name"]
        assert item["sha256"] == sha256_file(f)
        # loom-link recorded the kernel's path inside the canonical tree.
        assert f"source {tree}/ggml/src/ggml-hrx2/kernels/{item['name'][:-len('.loombc')]}.loom\n".encode() in f.read_bytes()


def test_verify_reference_and_rebuild(built, tmp_path):
    ref = tmp_path / "strix-halo-reference.json"
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--write-reference", str(ref))
    assert out.returncode == 0, out.stderr
    doc = json.loads(ref.read_text())
    assert doc["recipe"] == "strix-halo"
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--reference", str(ref))
    assert out.returncode == 0, out.stderr
    assert f"{len(KERNELS)}/{len(KERNELS)} byte-identical" in out.stderr
    # A reference whose bytes differ fails; one built from another path only warns.
    bad = json.loads(ref.read_text())
    llama = next(c for c in bad["components"] if c["name"] == "llama")
    llama["artifacts"][0]["items"][0]["sha256"] = "0" * 64
    llama["artifacts"][0]["facts"]["source_dir"] = "/elsewhere/llama.cpp-hrx"
    ref.write_text(json.dumps(bad))
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--reference", str(ref))
    assert out.returncode == 11
    assert f"{len(KERNELS) - 1}/{len(KERNELS)} byte-identical" in out.stderr and "differs" in out.stderr
    assert "built from another path" in out.stderr
    # The whole stack again in another build folder: the kernels come out byte-identical
    # (same canonical source paths). The only binary that differs is llama-server, whose
    # run path names the prefix inside the other build folder.
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--rebuild")
    assert f"HRX2 Loom bytecode: {len(KERNELS)}/{len(KERNELS)} byte-identical" in out.stderr, out.stderr
    differing = [line.split()[1] for line in out.stderr.splitlines() if line.strip().startswith("differs ")]
    assert differing == ["llama-server"], out.stderr
    assert out.returncode == 11


def test_rerun_is_a_noop_and_a_damaged_prefix_is_reassembled(built):
    out = cli(built, "--toolchain-root", str(built["tc"]), "build")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("(up to date)") == 3
    prefix = Path(next(o["path"] for o in comp(built["man"], "hrx-runtime")["outputs"] if o["name"] == "prefix"))
    (prefix / "include" / "hrx_runtime.h").unlink()
    out = cli(built, "--toolchain-root", str(built["tc"]), "build")
    assert out.returncode == 0, out.stderr
    assert "hrx-runtime (up to date)" not in out.stderr and (prefix / "include" / "hrx_runtime.h").is_file()
    # The llama build depends on the prefix's bytes, which came back identical: reused.
    assert "llama (up to date)" in out.stderr


def test_doctor_lists_the_gpu_once_built(built):
    out = cli(built, "doctor", env={"ONEBIT_TOOLCHAIN_ROOT": str(built["tc"])})
    assert "ok    GPU devices" in out.stdout and "HRX20, Vulkan0" in out.stdout, out.stdout
    assert "gfx1151 is listed" in out.stdout
    assert "amdclang++" in out.stdout and "source hrx-system" in out.stdout


def test_hrx_system_pin_must_stay_before_the_removal(standins, tmp_path):
    s = standins["s"]
    root = project(tmp_path / "late", s, system_commit=str(s["removal"]))
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "--mirror-dir", str(s["mirrors"]), "--hrx", "on", "fetch")
    assert out.returncode == 2, out.stderr
    assert "must stay before" in out.stderr and str(s["removal"])[:12] in out.stderr


def test_missing_toolchain_fails_before_building(standins, tmp_path):
    out = run_cli(standins["root"], "--workspace", str(tmp_path / "ws"), "--mirror-dir", str(standins["s"]["mirrors"]),
                  "--hrx", "on", "--toolchain-root", str(tmp_path / "no-therock"), "build")
    assert out.returncode == 9, out.stderr
    assert f"{tmp_path}/no-therock/bin/amdclang not found" in out.stderr
