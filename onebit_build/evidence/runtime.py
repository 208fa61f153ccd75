"""The shared libraries a binary loads at run time from the system, read from its ELF
dependencies (no program of it runs): its program interpreter and every ``DT_NEEDED``
library, followed through the libraries found, resolved as the loader does: first through
the file's RUNPATH (``elfdeps``: those inside the build are its own outputs), then through
the loader's cache (``ldconfig -p``), then the usual system folders.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from onebit_build.building.elfdeps import inside, read_elf, resolve
from onebit_build.core.proc import capture

_CACHE_LINE = re.compile(r"^\s*(?P<name>\S+) \((?P<flags>[^)]*)\) => (?P<path>/\S+)$")
# ldconfig's word for an ELF machine (e_machine as pyelftools names it).
_LDCONFIG_ARCH = {"EM_X86_64": "x86-64", "EM_AARCH64": "AArch64", "EM_386": "", "EM_RISCV": "riscv64"}
_DIRS = ("/lib/{triplet}", "/usr/lib/{triplet}", "/lib64", "/usr/lib64", "/lib", "/usr/lib")
_TRIPLETS = {"EM_X86_64": "x86_64-linux-gnu", "EM_AARCH64": "aarch64-linux-gnu", "EM_RISCV": "riscv64-linux-gnu"}


@dataclass(frozen=True, kw_only=True)
class RuntimeLib:
    name: str  # the name the loader asks for (libstdc++.so.6), or the interpreter's path
    path: Path  # where the loader finds it here


def _elf_facts(path: Path) -> tuple[str, str | None]:
    """(e_machine, program interpreter or None) of an ELF file; ("", None) otherwise."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            interp = next((seg.get_interp_name() for seg in elf.iter_segments() if seg["p_type"] == "PT_INTERP"), None)
            return str(elf["e_machine"]), interp
    except (OSError, ELFError):
        return "", None


def parse_ldconfig(text: str, machine: str) -> dict[str, Path]:
    """``ldconfig -p`` output -> {name: path} for libraries of this ELF machine. Pure."""
    want = _LDCONFIG_ARCH.get(machine, "")
    out: dict[str, Path] = {}
    for line in text.splitlines():
        m = _CACHE_LINE.match(line)
        if m is None:
            continue
        flags = m.group("flags").split(",")
        if want and not any(f.strip() == want for f in flags[1:]) or not want and len(flags) > 1:
            continue
        out.setdefault(m.group("name"), Path(m.group("path")))
    return out


def loader_cache(machine: str) -> dict[str, Path]:
    for prog in ("ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"):
        done = capture([prog, "-p"], timeout=30)
        if done.ok:
            return parse_ldconfig(done.stdout, machine)
    return {}


def _system_path(name: str, cache: dict[str, Path], machine: str) -> Path | None:
    if name in cache and cache[name].exists():
        return cache[name]
    triplet = _TRIPLETS.get(machine, "")
    for d in _DIRS:
        cand = Path(d.format(triplet=triplet)) / name
        if "{" not in d or triplet:
            if cand.exists():
                return cand
    return None


def runtime_libraries(binary: Path, own: Iterable[Path]) -> list[RuntimeLib]:
    """The system libraries ``binary`` loads, directly or through the libraries it loads
    (those under the ``own`` folders, the build's, are followed but not listed)."""
    roots = [Path(r) for r in own]
    machine, interp = _elf_facts(binary)
    cache = loader_cache(machine)
    found: dict[str, tuple[str, Path]] = {}  # by the real file: one entry per library
    if interp:
        found[os.path.realpath(interp)] = (interp, Path(interp))
    todo, seen = [binary], set()
    while todo:
        path = todo.pop()
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        info = read_elf(path)
        for name in info.needed if info else ():
            hit = resolve(name, info) or _system_path(name, cache, machine)
            if hit is None:
                continue
            todo.append(hit)
            if not any(inside(hit, r) for r in roots):
                found.setdefault(os.path.realpath(hit), (name, hit))
    return sorted((RuntimeLib(name=n, path=p) for n, p in found.values()), key=lambda lib: lib.name)
