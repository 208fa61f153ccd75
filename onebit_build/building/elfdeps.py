"""The shared libraries a binary loads, as the dynamic loader finds them: DT_NEEDED, resolved
through DT_RUNPATH (or DT_RPATH) with ``$ORIGIN`` expanded. Read with pyelftools.

Used to make a prefix self-contained: every library a binary needs that the loader would find
inside a build folder is copied next to it, and a tree is checked to load nothing from
outside itself but the system's own libraries."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile


@dataclass(frozen=True, kw_only=True)
class ElfInfo:
    path: Path
    soname: str | None
    needed: tuple[str, ...]
    runpath: tuple[str, ...]  # as written, $ORIGIN not expanded


def read_elf(path: Path) -> ElfInfo | None:
    """The dynamic entries of an ELF file; None for anything that is not a dynamic ELF."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return None
            f.seek(0)
            elf = ELFFile(f)
            needed: list[str] = []
            runpath: list[str] = []
            rpath: list[str] = []
            soname = None
            for section in elf.iter_sections():
                if not isinstance(section, DynamicSection):
                    continue
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag == "DT_RUNPATH":
                        runpath += [p for p in tag.runpath.split(":") if p]
                    elif tag.entry.d_tag == "DT_RPATH":
                        rpath += [p for p in tag.rpath.split(":") if p]
                    elif tag.entry.d_tag == "DT_SONAME":
                        soname = tag.soname
    except (OSError, ELFError):
        return None
    return ElfInfo(path=path, soname=soname, needed=tuple(needed), runpath=tuple(runpath or rpath))


def search_dirs(info: ElfInfo) -> list[Path]:
    """The folders its RUNPATH names, ``$ORIGIN`` (or ``${ORIGIN}``) being the file's own folder."""
    origin = str(info.path.parent)
    return [Path(p.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)) for p in info.runpath]


def resolve(name: str, info: ElfInfo) -> Path | None:
    """Where the loader finds ``name`` for this file through its RUNPATH; None when it is not
    there (then it comes from the system's search path, or not at all)."""
    for d in search_dirs(info):
        cand = d / name
        if cand.exists():
            return cand
    return None


def inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def build_tree_libraries(binaries: list[Path], root: Path) -> dict[str, Path]:
    """Every library the binaries load, directly or through each other, that the loader finds
    under ``root`` (a build folder): {name the loader asks for: the file it finds}."""
    found: dict[str, Path] = {}
    todo = list(binaries)
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        info = read_elf(path)
        if info is None:
            continue
        for name in info.needed:
            hit = resolve(name, info)
            if hit is not None and inside(hit, root) and name not in found:
                found[name] = hit
                todo.append(hit)
    return found


def copy_libraries(libs: dict[str, Path], dest: Path) -> list[Path]:
    """Copy each library into ``dest`` under the name the loader asks for (a file, not a link);
    one that is already there is left alone. Returns what was copied."""
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for name, src in sorted(libs.items()):
        target = dest / name
        if target.exists() or target.is_symlink():
            continue
        tmp = target.with_name(f".{name}.tmp")
        shutil.copy2(src.resolve(), tmp)
        os.replace(tmp, target)
        done.append(target)
    return done


def outside_loads(tree: Path, forbidden: Path) -> list[str]:
    """``file: name -> path`` for every library an ELF file of ``tree`` would load from under
    ``forbidden`` (a build folder) instead of from the tree or the system. Empty: self-contained."""
    problems = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
        info = read_elf(path)
        if info is None:
            continue
        for name in info.needed:
            cands = [d / name for d in search_dirs(info) if (d / name).exists()]
            # Found only outside the tree, in the build folder: gone once that is deleted.
            if cands and not any(inside(c, tree) for c in cands) and any(inside(c, forbidden) for c in cands):
                problems.append(f"{path.relative_to(tree)}: {name} -> {cands[0]}")
    return problems
