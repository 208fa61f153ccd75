"""The tool's small cache in the user's cache folder: answers of the quick commands (the
recipe table, the completion scripts), each stored with the key of everything it was made
from and used only while that key still holds, so that a stale answer is never printed.

A key is a sha256 over text parts; :func:`code_stamp` is the part for the code itself (this
package and the libraries named), judged as Python judges its compiled modules: a source file
by its size and modification time. Reading and writing never fail a command: an unreadable,
corrupt or unwritable cache means the answer is made afresh.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from onebit_build import __version__
from onebit_build.core.project import PACKAGE_DIR
from onebit_build.core.safepath import read_regular

SCHEMA = 1


def cache_home(env: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``: the user's cache folder (a relative
    ``$XDG_CACHE_HOME`` is ignored, as the XDG base directory rules say). Pure."""
    given = env.get("XDG_CACHE_HOME") or ""
    if os.path.isabs(given):
        return Path(given)
    return Path(env.get("HOME") or Path.home()) / ".cache"


def tool_dir(env: Mapping[str, str]) -> Path:
    """The folder of these answers: beside the default workspace (``onebit-build``), not in it,
    so that no workspace, wherever it is, holds them."""
    return cache_home(env) / "onebit-build-answers"


def key_of(*parts: str) -> str:
    """One key for ``parts`` in order (a part cannot run into the next one). Pure."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogateescape")
        h.update(f"{len(data)}:".encode() + data)
    return h.hexdigest()


def code_stamp(libraries: tuple[str, ...] = (), package_dir: Path = PACKAGE_DIR) -> str:
    """The tool's version, Python's, and the size and modification time of every module of the
    package and of each library in ``libraries`` (found, not imported); a missing one counts
    as missing."""
    lines = [f"onebit-build {__version__}", f"python {sys.version}"]
    lines += _module_lines(str(package_dir), "")
    for name in libraries:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = spec.origin if spec is not None else None
        lines.append(f"{name} {origin} {_stat_text(origin)}" if origin else f"{name} missing")
    return key_of(*lines)


def _module_lines(folder: str, prefix: str) -> list[str]:
    """``relative/path.py size mtime_ns`` for each module under ``folder``, in name order."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return [f"{prefix} unreadable"]
    lines = []
    for e in entries:
        if e.name.endswith(".py") and e.is_file():
            lines.append(f"{prefix}{e.name} {_stat_text(e.path)}")
        elif e.name != "__pycache__" and e.is_dir(follow_symlinks=False):
            lines += _module_lines(e.path, f"{prefix}{e.name}/")
    return lines


def _stat_text(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "unreadable"
    return f"{st.st_size} {st.st_mtime_ns}"


def read(path: Path, kind: str, key: str) -> dict[str, Any] | None:
    """The payload stored at ``path`` for ``key``, or None (none, another key, unreadable)."""
    try:
        doc = json.loads(read_regular(path))  # a FIFO or a device there: refused at once, never waited on
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or (doc.get("kind"), doc.get("schema"), doc.get("key")) != (kind, SCHEMA, key):
        return None
    payload = doc.get("payload")
    return payload if isinstance(payload, dict) else None


def write(path: Path, kind: str, key: str, payload: dict[str, Any]) -> bool:
    """Store ``payload`` for ``key`` at ``path`` (atomically); False when it cannot be written."""
    from onebit_build.core.fsutil import write_state  # only when something was made afresh

    try:
        write_state(path, kind, SCHEMA, {"key": key, "payload": payload})
    except OSError:
        return False
    return True
