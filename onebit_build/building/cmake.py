"""A thin adapter over scikit-build-core: find CMake and Ninja by version, write the
initial cache, and produce the exact configure and build command lines."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from packaging.specifiers import SpecifierSet
from packaging.version import Version
from scikit_build_core.program_search import best_program, get_cmake_program, get_cmake_programs, get_ninja_programs

from onebit_build.core.names import is_cmake_name
from onebit_build.core.errors import ConfigError, ToolMissingError

CMAKE_MIN = ">=3.24"
NINJA_MIN = ">=1.10"


@dataclass(frozen=True, kw_only=True)
class Tools:
    cmake: Path
    cmake_version: str
    ninja: Path
    ninja_version: str


def find_tools() -> Tools:
    """CMake and Ninja by version through scikit-build-core's program search, as its
    ``CMake.default_search`` does (``CMAKE_EXECUTABLE`` first, else the cmake module, then
    PATH). That module itself is imported only to write a build folder's initial cache: it
    costs a tenth of a second at every start of the command line."""
    given = os.environ.get("CMAKE_EXECUTABLE", "")
    candidates = [get_cmake_program(Path(given))] if given else get_cmake_programs(module=True)
    cm = best_program(candidates, version=SpecifierSet(CMAKE_MIN))
    if cm is None or cm.version is None:
        raise ToolMissingError(f"CMake {CMAKE_MIN} not found",
                               hint="pip install 'cmake>=3.24' (or put a newer cmake on PATH)")
    nj = best_program(get_ninja_programs(), version=SpecifierSet(NINJA_MIN))
    if nj is None or nj.version is None:
        raise ToolMissingError(f"Ninja {NINJA_MIN} not found",
                               hint="pip install ninja (or apt-get install ninja-build)")
    return Tools(cmake=Path(cm.path), cmake_version=str(cm.version), ninja=Path(nj.path),
                 ninja_version=str(nj.version))


def bracket(value: str) -> str:
    """``value`` as a CMake bracket argument that no text inside it can close: the bracket
    gets one ``=`` more than the longest run of ``=`` after a ``]`` in the value. Pure.

    CMake drops a newline right after the opening bracket, so a value that starts with one
    gets an extra newline in front (which CMake then drops)."""
    runs = [len(m.group(1)) for m in re.finditer(r"\](=*)", value)]
    eq = "=" * (max(runs, default=-1) + 1)
    lead = "\n" if value.startswith(("\n", "\r")) else ""
    return f"[{eq}[{lead}{value}]{eq}]"


def init_cache_text(defines: Sequence[tuple[str, str]]) -> str:
    """The initial cache file (loaded with ``-C``): one ``set(NAME VALUE CACHE STRING "" FORCE)``
    per define. A name that is not a CMake variable name, or a value with a NUL byte, is a
    ConfigError: neither can be written so that it stays one value. Pure."""
    lines = []
    for name, value in defines:
        if not is_cmake_name(name):
            raise ConfigError(f"CMake define name {name!r} is not a variable name",
                              hint="use letters, digits and '_' only, not starting with a digit")
        if "\0" in value:
            raise ConfigError(f"CMake define {name}: the value holds a NUL byte", hint="remove it from the value")
        lines.append(f'set({name} {bracket(value)} CACHE STRING "" FORCE)\n')
    return "".join(lines)


def write_init_cache(tools: Tools, source_dir: Path, build_dir: Path, build_type: str, text: str) -> Path:
    """Write ``CMakeInit.txt`` (loaded with ``-C``): ``text``, every define quoted by
    :func:`init_cache_text`. scikit-build-core records which source the build dir belongs to
    (and clears a cache made from another); the file itself is written here, because its
    fixed bracket quoting lets a value close the argument."""
    from scikit_build_core.cmake import CMake, CMaker

    maker = CMaker(
        CMake(version=Version(tools.cmake_version), cmake_path=tools.cmake),
        source_dir=source_dir,
        build_dir=build_dir,
        build_type=build_type,
    )
    maker.init_cache_file.write_text(text, encoding="utf-8")
    return maker.init_cache_file


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
