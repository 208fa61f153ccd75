"""CUDA cubin artifacts: the SASS digest, and collection from a real CUDA shared library.

The collection tests compile a two-kernel library with nvcc and read it with cuobjdump; no
GPU is needed. Where either tool is missing they are skipped with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from _support import cuda_wheel_bin
from onebit_build.checking.artifacts import CUBIN_CACHE, collect_cubin, sass_code_digest
from onebit_build.core.errors import VerifyError

SASS = """
Fatbin elf code:
================
arch = sm_90
code version = [1,8]
host = linux
compile_size = 64bit

	code for sm_90
		Function : _Z5scalePfi
	.headerflags	@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R0, SR_TID.X ;
"""


def test_sass_digest_ignores_file_name_lines():
    other_header = (SASS.replace("arch = sm_90", "arch = sm_90 ")
                    .replace("Fatbin elf code:", "Fatbin elf code: /tmp/x1.cubin"))
    assert sass_code_digest(other_header) == sass_code_digest(SASS)


def test_sass_digest_sees_code_and_function_names():
    assert sass_code_digest(SASS.replace("SR_TID.X", "SR_TID.Y")) != sass_code_digest(SASS)
    assert sass_code_digest(SASS.replace("_Z5scalePfi", "_Z5shiftPfi")) != sass_code_digest(SASS)


WHEEL_BIN = cuda_wheel_bin()
NVCC = shutil.which("nvcc")
CUOBJDUMP = shutil.which("cuobjdump") or (str(WHEEL_BIN / "cuobjdump") if WHEEL_BIN else None)
needs_cuda_tools = pytest.mark.skipif(
    NVCC is None or CUOBJDUMP is None,
    reason=f"needs nvcc and cuobjdump on PATH (nvcc: {NVCC or 'missing'}, cuobjdump: {CUOBJDUMP or 'missing'})",
)

KERNEL_A = ("__global__ void scale(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
            "if (i < n) x[i] *= %s; }\n")
KERNEL_B = ("__global__ void shift(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; "
            "if (i < n) x[i] += 1.0f; }\n")


@pytest.fixture(autouse=True)
def _tools_on_path(monkeypatch):
    """collect_cubin finds cuobjdump (and cuobjdump nvdisasm) on PATH: add the wheels' folder."""
    if WHEEL_BIN is not None and shutil.which("cuobjdump") is None:
        monkeypatch.setenv("PATH", f"{WHEEL_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def build_library(build_dir: Path, factor: str) -> Path:
    """A shared library named like ggml's, with (at least) one cubin per source file."""
    src = build_dir / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "a.cu").write_text(KERNEL_A % factor)
    (src / "b.cu").write_text(KERNEL_B)
    out = build_dir / "bin" / "libggml-cuda.so"
    out.parent.mkdir(parents=True, exist_ok=True)
    # As in a CMake build folder: the cache names the compiler (whose version the facts record).
    (build_dir / "CMakeCache.txt").write_text(f"CMAKE_CUDA_COMPILER:FILEPATH={NVCC}\n")
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90", "-o", str(out), str(src / "a.cu"),
                    str(src / "b.cu")],
                   check=True, capture_output=True)
    return out


@needs_cuda_tools
def test_collect_cubin_lists_each_cubin_and_caches_by_library_hash(tmp_path, monkeypatch):
    tools_path = os.environ["PATH"]
    no_tools = str(tmp_path / "no-tools")
    build_library(tmp_path, "2.0f")
    first = collect_cubin(tmp_path, jobs=2)
    assert first.kind == "cubin"
    digests = {a.name: dict(a.extra)["sass_sha256"] for a in first.items}
    assert len(first.items) >= 2  # one per source file, and whatever nvcc adds
    assert len(set(digests.values())) >= 2
    assert (tmp_path / CUBIN_CACHE).exists()

    # Unchanged library: answered from the cache, cuobjdump is not needed.
    monkeypatch.setenv("PATH", no_tools)
    assert collect_cubin(tmp_path) == first

    # Changed library: the cache no longer applies; without cuobjdump that is an error ...
    monkeypatch.setenv("PATH", tools_path)
    build_library(tmp_path, "3.0f")
    monkeypatch.setenv("PATH", no_tools)
    with pytest.raises(VerifyError, match="cuobjdump not found"):
        collect_cubin(tmp_path)

    # ... and with it, only the changed kernel's digest moves.
    monkeypatch.setenv("PATH", tools_path)
    second = collect_cubin(tmp_path)
    assert {a.name for a in second.items} == set(digests)
    changed = {a.name for a in second.items if dict(a.extra)["sass_sha256"] != digests[a.name]}
    assert len(changed) == 1


@needs_cuda_tools
def test_collect_cubin_recomputes_over_a_damaged_cache(tmp_path):
    build_library(tmp_path, "2.0f")
    first = collect_cubin(tmp_path)
    (tmp_path / CUBIN_CACHE).write_text("{ not json")
    assert collect_cubin(tmp_path) == first
    assert (tmp_path / CUBIN_CACHE).read_text().startswith("{\n")
