"""A thin adapter over scikit-build-core: find CMake and Ninja by version, write the
initial cache, and produce the exact configure and build command lines."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from packaging.specifiers import SpecifierSet
from scikit_build_core.cmake import CMake, CMaker
from scikit_build_core.errors import CMakeNotFoundError
from scikit_build_core.program_search import best_program, get_ninja_programs

from onebit_build.core.errors import ToolMissingError

CMAKE_MIN = ">=3.24"
NINJA_MIN = ">=1.10"


@dataclass(frozen=True, kw_only=True)
class Tools:
    cmake: Path
    cmake_version: str
    ninja: Path
    ninja_version: str


def find_tools() -> Tools:
    try:
        cm = CMake.default_search(version=SpecifierSet(CMAKE_MIN), env=os.environ)
    except CMakeNotFoundError:
        raise ToolMissingError(f"CMake {CMAKE_MIN} not found", hint="pip install 'cmake>=3.24' (or put a newer cmake on PATH)") from None
    nj = best_program(get_ninja_programs(), version=SpecifierSet(NINJA_MIN))
    if nj is None or nj.version is None:
        raise ToolMissingError(f"Ninja {NINJA_MIN} not found", hint="pip install ninja (or apt-get install ninja-build)")
    return Tools(cmake=Path(cm.cmake_path), cmake_version=str(cm.version), ninja=Path(nj.path), ninja_version=str(nj.version))


def write_init_cache(tools: Tools, source_dir: Path, build_dir: Path, build_type: str, defines: Sequence[tuple[str, str]]) -> Path:
    """Write ``CMakeInit.txt`` (loaded with ``-C``) holding every define; scikit-build-core
    quotes the values and records which source the build dir belongs to."""
    maker = CMaker(
        CMake(version=_v(tools.cmake_version), cmake_path=tools.cmake),
        source_dir=source_dir,
        build_dir=build_dir,
        build_type=build_type,
    )
    maker.init_cache(dict(defines))
    return maker.init_cache_file


def _v(text: str):  # packaging Version, kept local to avoid a second import site
    from packaging.version import Version

    return Version(text)


def configure_argv(tools: Tools, source_dir: Path, build_dir: Path, build_type: str, init_cache: Path) -> list[str]:
    return [
        str(tools.cmake), "-S", str(source_dir), "-B", str(build_dir), "-G", "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={tools.ninja}", f"-DCMAKE_BUILD_TYPE={build_type}", "-C", str(init_cache),
    ]


def build_argv(tools: Tools, build_dir: Path, targets: Sequence[str], jobs: int | None) -> list[str]:
    argv = [str(tools.cmake), "--build", str(build_dir), "--target", *targets]
    if jobs:
        argv += ["--parallel", str(jobs)]
    return argv
