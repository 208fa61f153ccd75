"""Entries of sccache's local disk cache: which one holds an object. When verify finds that the
cache served an object the compiler does not make, this names the file to remove.

An entry (``SCCACHE_DIR/<k0>/<k1>/<key>``) is a zip archive whose members are stored
uncompressed; the object is the member ``obj``, one zstd frame."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import zstandard

OBJECT_MEMBER = "obj"
MAX_ENTRY_BYTES = 1 << 30


def entry_object(entry: Path) -> bytes | None:
    """The object an entry holds; None when the file is not an sccache entry with one."""
    try:
        with zipfile.ZipFile(entry) as z:
            info = z.getinfo(OBJECT_MEMBER)
            if info.file_size > MAX_ENTRY_BYTES:
                return None
            frame = z.read(info)
        return zstandard.ZstdDecompressor().decompress(frame, max_output_size=MAX_ENTRY_BYTES)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, zstandard.ZstdError):
        return None


def object_size(entry: Path) -> int | None:
    """The size of the object an entry holds, read from its frame header (-1: not recorded)."""
    try:
        with zipfile.ZipFile(entry) as z:
            with z.open(OBJECT_MEMBER) as member:
                head = member.read(18)
        return zstandard.frame_content_size(head)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, zstandard.ZstdError):
        return None


def find_entries(cache_dir: Path, *, sha256: str, size: int | None = None) -> list[Path]:
    """The entries under ``cache_dir`` whose object has this sha256 (and, when given, this
    size: only those are decompressed)."""
    found = []
    if not cache_dir.is_dir():
        return found
    for entry in sorted(cache_dir.glob("*/*/*")):
        if entry.is_symlink() or not entry.is_file():
            continue
        if size is not None and object_size(entry) not in (size, -1):
            continue
        data = entry_object(entry)
        if data is not None and hashlib.sha256(data).hexdigest() == sha256:
            found.append(entry)
    return found
