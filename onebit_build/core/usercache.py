"""The tool's small cache in the user's cache folder: answers of the quick commands (the
recipe table, the completion scripts), each stored with the key of everything it was made
from and used only while that key still holds, so that a stale answer is never printed.

A key is a sha256 over text parts; :func:`code_stamp` is the part for the code itself (this
package and the libraries named), judged as Python judges its compiled modules: a source file
by its size and modification time. Reading and writing never fail a command: an unreadable,
corrupt or unwritable cache means the answer is made afresh.

A matching key proves nothing about the payload: the key is made from public inputs, and
anyone who can write the file can keep it while changing what follows. So each entry is
sealed with an HMAC under a random secret of this user (``answers.secret``: a regular file
the user owns that no one else may read); an entry whose seal does not hold is made afresh.
Writing an answer that is printed then takes the secret, which another user cannot read and
cannot plant (the file must be the user's own).
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from onebit_build import __version__
from onebit_build.core.project import PACKAGE_DIR
from onebit_build.core.safepath import read_regular

SCHEMA = 2  # 2: entries carry a seal
SECRET_FILE = "answers.secret"
SECRET_BYTES = 32
MAX_ENTRY_BYTES = 16 << 20  # an answer kept here (a recipe table, a completion script) is a few KiB


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
    """The payload stored at ``path`` for ``key``, or None (none, another key, unreadable, or
    a seal that does not hold)."""
    try:
        # a FIFO or a device there: refused at once, never waited on
        doc = json.loads(read_regular(path, limit=MAX_ENTRY_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or (doc.get("kind"), doc.get("schema"), doc.get("key")) != (kind, SCHEMA, key):
        return None
    payload = doc.get("payload")
    secret = _secret(path.parent, make=False)
    if not isinstance(payload, dict) or secret is None or not isinstance(doc.get("seal"), str):
        return None
    return payload if hmac.compare_digest(doc["seal"], seal(secret, kind, key, payload)) else None


def write(path: Path, kind: str, key: str, payload: dict[str, Any]) -> bool:
    """Store ``payload`` for ``key`` at ``path`` (atomically), sealed; False when it cannot be
    written (or the secret cannot be kept)."""
    from onebit_build.core.fsutil import write_state  # only when something was made afresh

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        secret = _secret(path.parent, make=True)
        if secret is None:
            return False
        write_state(path, kind, SCHEMA, {"key": key, "payload": payload, "seal": seal(secret, kind, key, payload)})
    except OSError:
        return False
    return True


def seal(secret: bytes, kind: str, key: str, payload: dict[str, Any]) -> str:
    """The HMAC of an entry: its kind, its key and its payload as canonical JSON. Pure."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hmac.new(secret, key_of(kind, key, text).encode(), hashlib.sha256).hexdigest()


def _secret(folder: Path, *, make: bool) -> bytes | None:
    """This user's secret in ``folder``: only from a regular file the user owns, that no one
    else may read or write, never through a link. ``make``: a new one replaces a missing or
    untrusted file. None when there is none to trust."""
    path = folder / SECRET_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        fd = None
    if fd is not None:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            trusted = (st.st_mode & 0o170000 == 0o100000 and st.st_uid == os.getuid() and not st.st_mode & 0o077
                       and st.st_size == SECRET_BYTES)
            data = f.read(SECRET_BYTES) if trusted else b""
        if len(data) == SECRET_BYTES:
            return data
    return _new_secret(path) if make else None


def _new_secret(path: Path) -> bytes | None:
    """A new random secret written to ``path`` (mode 0600, swapped in whole)."""
    data = os.urandom(SECRET_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    return data
