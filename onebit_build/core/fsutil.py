"""Small file-system helpers: hashing, atomic writes, versioned JSON state."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(_CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_state(path: Path, kind: str, schema: int, payload: dict[str, Any]) -> None:
    """Write a versioned JSON document: ``{"kind": ..., "schema": N, ...payload}``."""
    doc = {"kind": kind, "schema": schema, **payload}
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")


class StateError(ValueError):
    pass


def read_state(path: Path, kind: str, schema: int) -> dict[str, Any]:
    """Read a document written by :func:`write_state`; raise StateError when it is not one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise StateError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise StateError(f"{path}: expected a JSON object")
    if doc.get("kind") != kind:
        raise StateError(f"{path}: expected kind {kind!r}, found {doc.get('kind')!r}")
    if doc.get("schema") != schema:
        raise StateError(
            f"{path}: schema {doc.get('schema')!r} is not the supported schema {schema}"
        )
    return doc


def tail_lines(path: Path, n: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:])


def remove_entry(path: Path) -> None:
    """Remove ``path`` from its folder: a folder with everything under it; a symbolic link (to
    a folder or not) or a file by itself, so that a link's target is never touched."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def replace_files(changes: dict[Path, bytes | None]) -> None:
    """Write every file of ``changes`` (None: remove it), all of them or none.

    Each new content is written beside its target first; then the targets are switched one
    after another (a reader sees the old file or the new one), each old file kept as a hard
    link until all are switched. When one switch fails, every file switched so far gets its
    old bytes back (a file that was new is removed again) and the error is raised."""
    staged: dict[Path, str | None] = {}
    kept: dict[Path, Path | None] = {}  # target -> hard link to its old bytes (None: it was new)
    try:
        for path, data in changes.items():
            staged[path] = None
            if data is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
                staged[path] = tmp
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
        for path, tmp in staged.items():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            old.unlink(missing_ok=True)
            if path.exists() or path.is_symlink():
                os.link(path, old, follow_symlinks=False)
                kept[path] = old
            else:
                kept[path] = None
            if tmp is not None:
                os.replace(tmp, path)
            elif kept[path] is not None:
                path.unlink()
    except BaseException:
        for path, old in reversed(list(kept.items())):
            if old is not None:
                os.replace(old, path)
            else:
                path.unlink(missing_ok=True)
        raise
    finally:
        for tmp in staged.values():
            if tmp is not None and os.path.lexists(tmp):
                os.unlink(tmp)
        for old in kept.values():
            if old is not None and os.path.lexists(old):
                os.unlink(old)
