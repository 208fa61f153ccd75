"""A GPU backend's run-time kernel cache (a recipe's ``jit_cache``): where it is, what it holds,
and removing its entries. The folder belongs to the backend, not to the tool: only files that
match the recipe's entry patterns, directly inside it, are ever listed or removed."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onebit_build.spec.jit_cache_spec import JitCacheSpec


@dataclass(frozen=True, kw_only=True)
class JitCache:
    folder: Path
    given_by: str  # the variable that named it, or "home" for the backend's default
    entries: tuple[Path, ...]
    size: int  # bytes of the entries

    @property
    def where(self) -> str:
        return f"${self.given_by}" if self.given_by != "home" else "the backend's default"


def cache_folder(spec: JitCacheSpec, environ: Mapping[str, str]) -> tuple[Path | None, str]:
    """The folder the backend uses, as it decides: the variable when set and not empty, else the
    recipe's folder under $HOME (None without a home: the backend then keeps no cache). Pure."""
    given = environ.get(spec.env, "")
    if given:
        return Path(given), spec.env
    home = environ.get("HOME", "")
    return (Path(home) / spec.home, "home") if home else (None, "home")


def matches(name: str, spec: JitCacheSpec) -> bool:
    """Whether a file name is one of the cache's entries. Pure."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in spec.entries)


def scan(spec: JitCacheSpec, environ: Mapping[str, str]) -> JitCache | None:
    """The cache as it is now (no folder yet: no entries); None when there is no home."""
    folder, given_by = cache_folder(spec, environ)
    if folder is None:
        return None
    found: list[Path] = []
    size = 0
    if folder.is_dir():
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False) and matches(entry.name, spec):
                found.append(Path(entry.path))
                size += entry.stat(follow_symlinks=False).st_size
    return JitCache(folder=folder, given_by=given_by, entries=tuple(found), size=size)


def remove_entries(cache: JitCache) -> int:
    """Remove the entries found (one that is already gone is skipped); returns how many went."""
    gone = 0
    for path in cache.entries:
        try:
            path.unlink()
            gone += 1
        except FileNotFoundError:
            continue
    return gone
