"""nvcc's objects independent of the build's paths: the arguments the tool gives nvcc, the nvcc
version the cubin facts (and so a reference's name) record, and a real compile of a small unit
in two folders. The real tests need nvcc (``CUDACXX``, else on PATH) and cuobjdump (PATH, else the
test extra's wheel); without them they are skipped with that reason. No GPU is needed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from _support import cuda_wheel_bin
from onebit_build.building import builder
from onebit_build.checking.artifacts import collect_cubin, nvcc_version, parse_nvcc_version
from onebit_build.building.cache import compiler as cc
from onebit_build.building.cmake import find_tools
from onebit_build.checking.references import reference_name

NVCC = os.environ.get("CUDACXX") or shutil.which("nvcc")
WHEEL_BIN = cuda_wheel_bin()
CUOBJDUMP = shutil.which("cuobjdump") or (str(WHEEL_BIN / "cuobjdump") if WHEEL_BIN else None)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc: set CUDACXX or put the CUDA toolkit's bin on PATH")
needs_cuda_tools = pytest.mark.skipif(
    NVCC is None or CUOBJDUMP is None,
    reason=f"needs nvcc (CUDACXX or PATH: {NVCC or 'missing'}) and cuobjdump ({CUOBJDUMP or 'missing'})")

NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


# --------------------------------------------------------------------------- the decisions


FIXED = ["--objdir-as-tempdir", "-Xcudafe=--orig_src_path_name=."]


def test_nvcc_gets_the_fixed_arguments_after_the_maps_and_other_compilers_do_not():
    maps = cc.prefix_maps(Path("/ws/src/llama"), Path("/ws/build/b"))
    args = cc.map_arguments(maps, "CUDA")
    assert args[0].startswith("-Xcompiler=-Xpreprocessor,-fmacro-prefix-map=/ws/build/b=.")
    assert args[1:] == FIXED == cc.nvcc_arguments("none") == cc.nvcc_arguments("ccache")
    assert cc.map_arguments(maps, "CUDA", "/usr/local/cuda/bin/nvcc")[1:] == FIXED
    for other in (cc.map_arguments(maps, "CUDA", "/usr/bin/clang++"), cc.map_arguments(maps, "CXX")):
        assert not set(FIXED) & set(other)


def test_through_sccache_nvcc_keeps_its_temporary_folder():
    """sccache 0.16 names nvcc's intermediate files itself and fails on --objdir-as-tempdir."""
    maps = cc.prefix_maps(Path("/ws/src/llama"))
    assert cc.nvcc_arguments("sccache") == ["-Xcudafe=--orig_src_path_name=."]
    assert cc.map_arguments(maps, "CUDA", launcher_kind="sccache")[1:] == cc.nvcc_arguments("sccache")


def test_the_init_cache_gives_them_to_cuda_only_after_the_recipes_flags():
    maps = cc.prefix_maps(Path("/ws/src/llama"), Path("/ws/build/b"))
    out = dict(cc.with_prefix_maps([("CMAKE_CUDA_FLAGS", "-lineinfo")], maps, ("C", "CXX", "CUDA")))
    cuda = shlex.split(out["CMAKE_CUDA_FLAGS"])
    assert cuda[0] == "-lineinfo" and cuda[-2:] == FIXED
    assert "--objdir-as-tempdir" not in out["CMAKE_CXX_FLAGS"] and "-Xcudafe" not in out["CMAKE_C_FLAGS"]
    through_sccache = dict(cc.with_prefix_maps([], maps, ("CUDA",), launcher_kind="sccache"))["CMAKE_CUDA_FLAGS"]
    assert shlex.split(through_sccache)[-1:] == cc.nvcc_arguments("sccache")


def test_a_cuda_build_has_a_build_key_of_its_own_scheme():
    assert builder.path_maps_of(("C", "CXX")) == builder.PATH_MAPS
    assert builder.path_maps_of(("C", "CXX", "CUDA")) == builder.PATH_MAPS_NVCC != builder.PATH_MAPS


def test_nvcc_version_is_read_from_its_release_line():
    assert parse_nvcc_version(NVCC_13) == "13.0.88"
    assert parse_nvcc_version(NVCC_13.replace("13.0, V13.0.88", "12.9, V12.9.86")) == "12.9.86"
    assert parse_nvcc_version("nvcc: NVIDIA (R) Cuda compiler driver\n") is None
    assert parse_nvcc_version("") is None


def test_the_cuda_reference_is_named_by_the_nvcc_version():
    fp = {"os": "Ubuntu 24.04.3 LTS", "cxx_compiler": "g++-real (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0",
          "cubin.architectures": "90-real", "cubin.nvcc": "13.0.88"}
    assert reference_name(fp) == "ubuntu-24.04.3-lts-gcc-13.3.0_nvcc-13.0.88"


def test_nvcc_version_falls_back_to_what_cmake_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    info = tmp_path / "CMakeFiles" / "4.4.3" / "CMakeCUDACompiler.cmake"
    info.parent.mkdir(parents=True)
    info.write_text('set(CMAKE_CUDA_COMPILER "/gone/nvcc")\nset(CMAKE_CUDA_COMPILER_VERSION "13.0.88")\n')
    assert nvcc_version(tmp_path, {"CMAKE_CUDA_COMPILER": str(tmp_path / "gone" / "nvcc")}) == "13.0.88"
    info.unlink()
    assert nvcc_version(tmp_path, {}) == "unknown"


@needs_nvcc
def test_nvcc_version_of_the_real_nvcc(tmp_path):
    shown = subprocess.run([NVCC, "--version"], capture_output=True, text=True, check=True).stdout
    found = nvcc_version(tmp_path, {"CMAKE_CUDA_COMPILER": NVCC})
    assert found == parse_nvcc_version(shown) and f"V{found}" in shown, shown


# --------------------------------------------------------------------------- a real compile

# __FILE__ in device code (ggml-cuda's NO_DEVICE_CODE prints it) and a device function with
# internal linkage that stays out of line: its name carries nvcc's module id.
KERNEL = """#include <cstdio>
namespace { __device__ __noinline__ float twice(float v) { return v * 2.0f; } }
__global__ void k(float *x) {
  if (x[0] < 0.0f) printf("%s:%d\\n", __FILE__, __LINE__);
  x[threadIdx.x] = twice(x[threadIdx.x]);
}
void launch(float *x) { k<<<1, 32>>>(x); }
"""


def compile_unit(where: Path, fixed: bool) -> tuple[bytes, bytes]:
    """k.cu compiled in ``where`` as CMake's Ninja rule would (from the build folder, the source
    by its absolute path, the object by a relative one), with the CUDA flags the tool's initial
    cache gives; (the object, its cubin)."""
    src, build = where / "src", where / "build"
    src.mkdir(parents=True, exist_ok=True)
    (src / "k.cu").write_text(KERNEL)
    flags = dict(cc.with_prefix_maps([], cc.prefix_maps(src, build), ("CUDA",)))["CMAKE_CUDA_FLAGS"]
    args = [a for a in shlex.split(flags) if fixed or a not in FIXED]
    obj = Path("CMakeFiles") / "k.dir" / "k.cu.o"
    (build / obj).parent.mkdir(parents=True, exist_ok=True)
    argv = [NVCC, *args, "-O3", "--generate-code=arch=compute_90,code=[sm_90]", "-Xcompiler=-fPIC",
            "-x", "cu", "-c", str(src / "k.cu"), "-o", str(obj)]
    done = subprocess.run(argv, cwd=build, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    out = build / "cubins"
    out.mkdir()
    subprocess.run([CUOBJDUMP, "-xelf", "all", str(build / obj)], cwd=out, check=True, capture_output=True)
    cubins = sorted(out.glob("*.cubin"))
    assert len(cubins) == 1, cubins
    return (build / obj).read_bytes(), cubins[0].read_bytes()


def cmake_build(where: Path) -> tuple[bytes, dict[str, str]]:
    """k.cu as a CMake project built in ``where`` with the initial cache the tool writes for a
    CUDA build without a compiler cache; (the library, its cubins' sha256 as the tool lists them,
    whose facts name the nvcc version)."""
    src, build = where / "src", where / "build"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.24)\nproject(k CXX CUDA)\n"
                                        "add_library(k SHARED k.cu)\n"
                                        "set_target_properties(k PROPERTIES CUDA_ARCHITECTURES 90-real)\n")
    (src / "k.cu").write_text(KERNEL)
    defines = cc.with_prefix_maps([("CMAKE_BUILD_TYPE", "Release"), ("CMAKE_CUDA_COMPILER", NVCC)],
                                  cc.prefix_maps(src, build), ("C", "CXX", "CUDA"))
    build.mkdir()
    (build / "CMakeInit.txt").write_text(builder.init_cache_of(defines, cc.NO_LAUNCHER, ("C", "CXX", "CUDA")))
    tools = find_tools()
    for argv in ([str(tools.cmake), "-S", str(src), "-B", str(build), "-G", "Ninja", "-C", str(build / "CMakeInit.txt"),
                  f"-DCMAKE_MAKE_PROGRAM={tools.ninja}"], [str(tools.cmake), "--build", str(build)]):
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (build / "libk.so").rename(build / "libggml-cuda.so")  # the name collect_cubin looks for
    cubins = collect_cubin(build)
    shown = subprocess.run([NVCC, "--version"], capture_output=True, text=True, check=True).stdout
    assert cubins.facts["nvcc"] == parse_nvcc_version(shown), cubins.facts
    return (build / "libggml-cuda.so").read_bytes(), {a.name: a.sha256 for a in cubins.items}


@needs_cuda_tools
def test_a_cmake_build_in_two_folders_gives_the_same_library_and_cubins(tmp_path, monkeypatch):
    """The library and its cubins, as a build with the tool's initial cache makes them, are the
    same bytes in two folders (the output and the artifacts verify compares)."""
    if shutil.which("cuobjdump") is None and WHEEL_BIN is not None:
        monkeypatch.setenv("PATH", f"{WHEEL_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    lib_one, cubins_one = cmake_build(tmp_path / "a")
    lib_two, cubins_two = cmake_build(tmp_path / "second" / "place")
    assert cubins_one == cubins_two and len(cubins_one) == 1
    assert lib_one == lib_two, "the libraries differ"
    assert b"k.cu.o.cudafe1.cpp" in lib_one and b"tmpxft_" not in lib_one


@needs_cuda_tools
def test_a_unit_compiled_in_two_folders_gives_the_same_cubin_and_object(tmp_path):
    one = compile_unit(tmp_path / "a", fixed=True)
    two = compile_unit(tmp_path / "second" / "place", fixed=True)
    assert one[1] == two[1], "the cubins differ"
    assert one[0] == two[0], "the host objects differ"
    module = b"_INTERNAL_%08x_4_k_cu_" % zlib.crc32(b".")
    assert module in one[1] and b"./k.cu" in one[1] and str(tmp_path).encode() not in one[0] + one[1]
    assert b"tmpxft_" not in one[0]


@needs_cuda_tools
def test_without_the_fixed_arguments_the_module_id_names_the_source_path(tmp_path):
    """What the fixed arguments are for: the same compile without them gives cubins of the same
    size whose internal names hold the CRC-32 of each source's real path."""
    one = compile_unit(tmp_path / "a", fixed=False)
    two = compile_unit(tmp_path / "second" / "place", fixed=False)
    assert len(one[1]) == len(two[1]) and one[1] != two[1]
    for where, (_obj, cubin) in ((tmp_path / "a", one), (tmp_path / "second" / "place", two)):
        path = str((where / "src" / "k.cu").resolve()).encode()
        assert b"_INTERNAL_%08x_4_k_cu_" % zlib.crc32(path) in cubin
