"""Which C and C++ compilers a build uses: the recipe's ``CMAKE_<LANG>_COMPILER``, else ``CC`` /
``CXX``, else the first of cc, gcc, clang (c++, g++, clang++) on PATH; and why none can be used."""

from __future__ import annotations

import os
import shutil
from typing import Mapping, Sequence

from onebit_build.core.errors import ToolMissingError


def compiler_path(kind: str, defines: Sequence[tuple[str, str]], env: Mapping[str, str]) -> str | None:
    key = "CMAKE_C_COMPILER" if kind == "c" else "CMAKE_CXX_COMPILER"
    for k, v in defines:
        if k == key:
            return v
    var = "CC" if kind == "c" else "CXX"
    if env.get(var):
        return env[var]
    for cand in (["cc", "gcc", "clang"] if kind == "c" else ["c++", "g++", "clang++"]):
        found = shutil.which(cand, path=env.get("PATH"))
        if found:
            return found
    return None


C_CANDIDATES = ("cc", "gcc", "clang")
CXX_CANDIDATES = ("c++", "g++", "clang++")
COMPILER_FIX = "install one (Debian: apt-get install build-essential) or set CC/CXX to one that exists"


def missing_compiler(defines: Sequence[tuple[str, str]], env: Mapping[str, str]) -> ToolMissingError | None:
    """Why no C/C++ compiler can be used (None when both are there)."""
    cc = compiler_path("c", defines, env)
    cxx = compiler_path("cxx", defines, env)
    if cc is None or cxx is None:
        looked = ", ".join(C_CANDIDATES if cc is None else CXX_CANDIDATES)
        kind = "C" if cc is None else "C++"
        return ToolMissingError(f"no {kind} compiler found on PATH (looked for {looked})", hint=COMPILER_FIX)
    for c in (cc, cxx):
        if not (shutil.which(c, path=env.get("PATH")) or (os.sep in c and os.access(c, os.X_OK))):
            return ToolMissingError(f"compiler {c} not found", hint=COMPILER_FIX)
    return None
