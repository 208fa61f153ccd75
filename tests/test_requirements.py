"""A recipe's requirements, checked on this machine's real compilers and tools: each missing
piece is its own line with its fix, and one run names all of them."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from _support import run_cli
from onebit_build.core.proc import capture
from onebit_build.spec.requires_spec import CxxStandard
from onebit_build.doctor.requirements import (
    AMDGPU_TOOLS,
    amdgpu_checks,
    cmake_check,
    cxx_standard_check,
    is_clang,
    python_check,
    read_cxx_standard,
    vulkan_device_check,
)

CLANG = shutil.which("clang")
GCC = shutil.which("gcc")
needs_clang = pytest.mark.skipif(
    CLANG is None, reason="no clang on this machine (apt-get install clang lld, see .ci/run)"
)


def test_versions_are_compared_as_numbers():
    assert cmake_check("3.26", "4.4.5").ok and cmake_check("3.26", "3.26.0").ok
    old = cmake_check("3.26", "3.25.1")
    assert old.ok is False and "older than 3.26" in old.detail and "cmake>=3.26" in old.fix
    assert cmake_check("3.26", None).ok is False
    assert python_check("3.7", os.environ).ok
    missing = python_check("3.7", {"PATH": ""})
    assert missing.ok is False and "python3" in missing.fix


@needs_clang
def test_a_real_clang_passes_every_amdgpu_piece():
    checks = amdgpu_checks("hrx-runtime", CLANG, os.environ)
    assert [c.name.split(": ", 1)[1] for c in checks] == [
        "Clang C compiler",
        "amdgcn-amd-amdhsa probe",
        *AMDGPU_TOOLS,
        "Clang resource headers",
    ]
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.skipif(GCC is None, reason="no gcc on this machine")
def test_gcc_is_refused_as_the_runtimes_upstream_check_refuses_it():
    assert is_clang(GCC) is False
    checks = {c.name.split(": ", 1)[1]: c for c in amdgpu_checks("hrx-runtime", GCC, os.environ)}
    assert checks["Clang C compiler"].ok is False and "not Clang-family" in checks["Clang C compiler"].detail
    assert (
        checks["amdgcn-amd-amdhsa probe"].ok is False and "TheRock's amdclang" in checks["amdgcn-amd-amdhsa probe"].fix
    )


@needs_clang
def test_tools_not_beside_clang_nor_on_path_are_each_named(tmp_path):
    # A clang that names no tool of its own (-print-prog-name gives bare names) and an empty PATH.
    wrapper = tmp_path / "clang"
    wrapper.write_text(
        '#!/bin/sh\ncase "$1" in -print-prog-name=*) echo "${1#-print-prog-name=}"; exit 0;; esac\n'
        f'exec {CLANG} "$@"\n'
    )
    wrapper.chmod(0o755)
    checks = {c.name.split(": ", 1)[1]: c for c in amdgpu_checks("rt", str(wrapper), {"PATH": str(tmp_path)})}
    for tool in AMDGPU_TOOLS:
        assert checks[tool].ok is False and tool in checks[tool].fix, tool
    assert checks["amdgcn-amd-amdhsa probe"].ok is True


def test_the_forks_standard_is_read_from_its_tree(tmp_path):
    assert (
        read_cxx_standard(
            "set(CMAKE_C_STANDARD 11)\nset(CMAKE_CXX_STANDARD 26)\nset(CMAKE_CXX_STANDARD_REQUIRED true)\n"
        )
        == 26
    )
    assert read_cxx_standard("project(x C)\n") is None
    # The fork's later form: 26 where the compiler has it, else 17 (the lowest is required).
    picked = (
        'if("cxx_std_26" IN_LIST CMAKE_CXX_COMPILE_FEATURES)\n    set(CMAKE_CXX_STANDARD 26)\nelse()\n'
        "    set(CMAKE_CXX_STANDARD 17)\nendif()\n"
    )
    assert read_cxx_standard(picked) == 17 and read_cxx_standard(picked.replace("17", "20")) == 20
    spec = CxxStandard(component="llama", file="ggml/CMakeLists.txt", expect=26)
    cxx = shutil.which("c++")
    assert cxx, "no C++ compiler on this machine"
    assert cxx_standard_check(spec, None, cxx, use_expect=False).ok is None  # waits for the fetched tree
    (tmp_path / "ggml").mkdir()
    (tmp_path / "ggml" / "CMakeLists.txt").write_text("set(CMAKE_CXX_STANDARD 17)\n")
    ok = cxx_standard_check(spec, tmp_path, cxx)
    assert ok.ok is True and "C++17" in ok.detail and str(tmp_path) in ok.detail
    (tmp_path / "ggml" / "CMakeLists.txt").write_text("set(CMAKE_CXX_STANDARD 26)\n")
    accepts = capture([cxx, "-std=c++26", "-fsyntax-only", "-x", "c++", os.devnull]).returncode == 0
    got = cxx_standard_check(spec, tmp_path, cxx)
    assert got.ok is accepts and "C++26" in got.detail
    if not accepts:
        assert "-std=c++26" in got.fix


def test_the_vulkan_icd_must_list_the_gpu():
    missing = vulkan_device_check("Radeon 8060S", {"PATH": ""})
    assert missing.ok is False and "vulkan-tools" in missing.fix
    if shutil.which("vulkaninfo") is None:
        pytest.skip("no vulkaninfo on this machine (apt-get install vulkan-tools mesa-vulkan-drivers, see .ci/run)")
    listed = capture(["vulkaninfo", "--summary"]).stdout
    names = re.findall(r"deviceName\s*=\s*(.+)", listed)
    if not names:
        pytest.skip("vulkaninfo lists no device here (install mesa-vulkan-drivers for lavapipe)")
    first = names[0].split("(")[0].strip()
    assert vulkan_device_check(first, os.environ).ok is True
    other = vulkan_device_check("Radeon 8060S", os.environ)
    assert (other.ok is False) == all("8060S" not in n for n in names) and first in other.detail


def test_doctor_on_this_machine_lists_every_requirement_in_one_run(tmp_path):
    """No TheRock here: one doctor run names each piece of the AMDGPU toolchain, the C++
    standard, the Vulkan ICD, the configure-time download and the rest, each with its fix."""
    out = run_cli(
        Path(__file__).resolve().parent.parent,
        "--workspace",
        str(tmp_path / "ws"),
        "--hrx",
        "on",
        "--toolchain-root",
        str(tmp_path / "no-therock"),
        "doctor",
        timeout=120,
    )
    assert out.returncode == 7, out.stderr
    text = out.stdout
    for name in (
        "toolchain root",
        "CMake >= 3.26",
        "Python >= 3.7",
        "hrx-runtime: Clang C compiler",
        "hrx-runtime: amdgcn-amd-amdhsa probe",
        "hrx-runtime: llvm-ar",
        "hrx-runtime: llvm-link",
        "hrx-runtime: ld.lld",
        "hrx-runtime: llvm-objcopy",
        "hrx-runtime: Clang resource headers",
        "llama: C++ standard",
        "Vulkan ICD with Radeon 8060S",
        "download hsa_runtime_headers",
        "HSA runtime",
    ):
        assert re.search(rf"^  (ok  |FAIL|--  )  {re.escape(name)} ", text, re.M), (name, text)
    fails = re.findall(r"^  FAIL  (.+?)  ", text, re.M)
    assert "hrx-runtime: Clang C compiler" in [f.strip() for f in fails] and "Vulkan ICD with Radeon 8060S" in [
        f.strip() for f in fails
    ]
    # Every FAIL is followed by its fix.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  FAIL"):
            assert lines[i + 1].strip().startswith("fix: "), line
