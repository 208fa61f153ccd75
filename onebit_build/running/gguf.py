"""The metadata header of a GGUF model file, read without loading the tensors.

The file may be anything a user passes with ``--model``: every length and count in it is
checked against what is left of the file before it is used, so a damaged or hostile header
is a ValueError naming the problem, never a huge read, an overflow or a deep recursion.

Not llama.cpp's ``gguf`` package (the tests use it to write models): its GGUFReader imports
numpy (1.3 s), trusts the header's counts, and on the hostile headers of tests/test_hostile.py
raises IndexError, accepts a 2^64-1 byte string, or ran past 60 s at 2.8 GB for a 2^64-1
item array in a 100-byte file. This reader needs one string key and must stay bounded.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

GGUF_MAGIC = b"GGUF"
# Sizes of GGUF's fixed-width value types (uint8 .. float64, bool); 8 is a string, 9 an array.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# Arrays of arrays are legal but no model nests them deeply; a deeper header is hostile.
_MAX_DEPTH = 4
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


class _Reader:
    """Bounded reads from the bytes of a GGUF file (a memory map: no read is copied but the
    strings asked for)."""

    def __init__(self, data, path: Path):
        self.data, self.pos, self.size, self.path = data, 0, len(data), path

    def damaged(self, what: str) -> ValueError:
        return ValueError(f"{self.path}: damaged GGUF header: {what}")

    def take(self, n: int) -> int:
        """Move past ``n`` bytes; the offset they start at."""
        if n > self.size - self.pos:
            raise self.damaged(f"{n} bytes wanted at offset {self.pos}, {self.size - self.pos} left in the file")
        at = self.pos
        self.pos += n
        return at

    def u32(self) -> int:
        return _U32.unpack_from(self.data, self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack_from(self.data, self.take(8))[0]

    def string(self) -> bytes:
        n = self.u64()
        at = self.take(n)
        return bytes(self.data[at:at + n])

    def skip(self, kind: int, depth: int = 0) -> None:
        if kind in _FIXED:
            self.take(_FIXED[kind])
        elif kind == _STRING:
            self.take(self.u64())
        elif kind == _ARRAY:
            if depth >= _MAX_DEPTH:
                raise self.damaged(f"arrays nested deeper than {_MAX_DEPTH}")
            inner, count = self.u32(), self.u64()
            if inner in _FIXED:
                self.take(_FIXED[inner] * count)
            elif count > self.size - self.pos:  # every item takes at least one byte
                raise self.damaged(f"an array of {count} items at offset {self.pos} cannot fit in the file")
            elif inner == _STRING:
                for _ in range(count):
                    self.take(self.u64())
            else:
                for _ in range(count):
                    self.skip(inner, depth + 1)
        else:
            raise self.damaged(f"unknown value type {kind}")


def gguf_string_value(path: Path, key: str | None) -> str | None:
    """The string value of one metadata key of a GGUF file (version 2 or 3), read from its
    header without loading the tensors; None when the key is absent. ``key=None`` reads the
    whole header (a check that it is sound). ValueError for a file that is not a sound GGUF."""
    with path.open("rb") as f:
        if path.stat().st_size < 24:
            raise ValueError(f"{path}: not a GGUF file (only {path.stat().st_size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            value = _find(_Reader(data, path), key)
            return value if isinstance(value, str) else None


def _find(r: _Reader, key: str | None, *, whole: bool = False) -> str | int | None:
    if r.data[:4] != GGUF_MAGIC:
        raise ValueError(f"{r.path}: not a GGUF file")
    r.take(4)
    if r.u32() not in (2, 3):
        raise ValueError(f"{r.path}: GGUF version not supported")
    r.u64()  # tensor count
    for _ in range(r.u64()):
        name, kind = r.string().decode("utf-8", "replace"), r.u32()
        if name == key and kind == _STRING and not whole:
            return r.string().decode("utf-8", "replace")
        if name == key and whole and kind in _UNSIGNED:
            return int.from_bytes(r.data[r.take(_FIXED[kind]):r.pos], "little")
        r.skip(kind)
    return None


# GGUF's unsigned whole-number types: uint8, uint16, uint32, uint64.
_UNSIGNED = (0, 2, 4, 10)


def block_count(path: Path) -> int | None:
    """The model's repeating layers (``<architecture>.block_count``), what llama.cpp's -ngl
    counts; None when the header does not say. ValueError for a file that is not a sound GGUF."""
    arch = gguf_string_value(path, "general.architecture")
    if not arch:
        return None
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        value = _find(_Reader(data, path), f"{arch}.block_count", whole=True)
    return value if isinstance(value, int) else None


def header_problem(path: Path) -> str | None:
    """What is wrong with the metadata header of a GGUF file; None when it reads whole."""
    try:
        gguf_string_value(path, None)
    except (OSError, ValueError) as exc:
        return str(exc)
    return None


def chat_template(path: Path) -> str | None:
    """The model's own chat template (``tokenizer.chat_template``); None for a base model
    without one (llama-server then falls back to a generic template that such a model does
    not follow)."""
    value = gguf_string_value(path, "tokenizer.chat_template")
    return value if value and value.strip() else None


def has_chat_template(path: Path) -> bool | None:
    """Whether the model carries its own chat template; None when its header is unreadable."""
    try:
        return chat_template(path) is not None
    except (OSError, ValueError):
        return None
