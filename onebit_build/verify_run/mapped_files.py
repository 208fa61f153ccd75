"""Provenance: the code a running llama-server actually executes is the build's own.

Read from the live process, not from ``ldd`` (which only predicts what the loader would
pick): ``/proc/PID/maps`` lists every file the process has mapped. Each mapped shared
library named ``libggml*``, ``libllama*`` or ``libmtmd*``, every mapped file that carries
the name of one of the build's outputs, and the executable itself must be

- a file the build's manifest records as an output (at the build's own path: a system
  ``libggml*.so``, or one that ``LD_LIBRARY_PATH`` brought in from another build, fails);
- with the sha256 the manifest records for it;
- the same file the process mapped (same device and inode; not deleted or replaced since).

``LD_LIBRARY_PATH`` and ``LD_PRELOAD`` of the process are reported as notes: what counts is
what was mapped. The checks are pure (:func:`judge`); :func:`inspect_process` gathers the
facts from ``/proc``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import psutil

from onebit_build.core.fsutil import sha256_file

CHECKED_NAMES = re.compile(r"^lib(?:ggml|llama|mtmd)[^/]*\.so(?:\.[0-9.]+)?$")
DELETED = " (deleted)"
ENV_NOTED = ("LD_LIBRARY_PATH", "LD_PRELOAD")

OWN = "own"
FOREIGN = "foreign"  # not at a path the manifest records
CHANGED = "changed"  # the file's sha256 is not the one recorded
REPLACED = "replaced"  # deleted or replaced on disk since it was mapped
UNREADABLE = "unreadable"


@dataclass(frozen=True, kw_only=True)
class MappedFile:
    path: str
    device: tuple[int, int]  # major, minor
    inode: int
    deleted: bool = False


@dataclass(frozen=True, kw_only=True)
class OnDisk:
    """What the path holds now."""

    sha256: str
    device: tuple[int, int]
    inode: int


@dataclass(frozen=True, kw_only=True)
class FileCheck:
    path: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OWN

    def line(self) -> str:
        return f"{self.status:<10} {self.path}" + (f"  ({self.detail})" if self.detail else "")


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """The provenance of one live server."""

    side: str  # "new" or "working"
    device: str
    pid: int
    executable: str
    checks: tuple[FileCheck, ...]
    notes: tuple[str, ...] = ()
    error: str = ""  # the process could not be inspected

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def failures(self) -> tuple[FileCheck, ...]:
        return tuple(c for c in self.checks if not c.ok)

    def summary(self) -> str:
        if self.error:
            return f"{self.side} on {self.device}: could not be inspected ({self.error})"
        bad = self.failures
        libs = sum(1 for c in self.checks if c.path != self.executable)
        if not bad:
            return (f"{self.side} on {self.device}: the executable and {libs} mapped "
                    f"librar{'y' if libs == 1 else 'ies'} are the build's own")
        return (f"{self.side} on {self.device}: "
                + "; ".join(f"{Path(c.path).name} {c.status} ({c.detail})" for c in bad))

    def to_dict(self) -> dict:
        return {"side": self.side, "device": self.device, "pid": self.pid, "executable": self.executable, "ok": self.ok,
                "error": self.error, "notes": list(self.notes),
                "files": [{"path": c.path, "status": c.status, "detail": c.detail} for c in self.checks]}


def parse_maps(text: str) -> tuple[MappedFile, ...]:
    """The files a ``/proc/PID/maps`` text names, each once, in the order first mapped.
    Anonymous and pseudo mappings (``[heap]``, ``[vdso]``...) are left out."""
    seen: dict[str, MappedFile] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6:
            continue
        _addr, _perms, _offset, dev, inode, path = parts
        path = path.strip()
        if not path.startswith("/"):
            continue
        deleted = path.endswith(DELETED)
        if deleted:
            path = path[: -len(DELETED)]
        try:
            major, minor = (int(x, 16) for x in dev.split(":"))
            ino = int(inode)
        except ValueError:
            continue
        if ino == 0:
            continue
        if path not in seen:
            seen[path] = MappedFile(path=path, device=(major, minor), inode=ino, deleted=deleted)
    return tuple(seen.values())


def to_check(mapped: Iterable[MappedFile], *, executable: str, expected: dict[str, str]) -> tuple[MappedFile, ...]:
    """The mapped files provenance judges: the executable, the ``libggml*``/``libllama*``/
    ``libmtmd*`` libraries, and any file named like one of the build's outputs."""
    names = {Path(p).name for p in expected}
    out = []
    for m in mapped:
        name = Path(m.path).name
        if m.path == executable or CHECKED_NAMES.match(name) or name in names or m.path in expected:
            out.append(m)
    return tuple(out)


def judge_file(m: MappedFile, *, expected: dict[str, str], on_disk: OnDisk | None) -> FileCheck:
    """One mapped file against the manifest's record (``expected``: path -> sha256)."""
    if m.path not in expected:
        return FileCheck(path=m.path, status=FOREIGN,
                         detail="not an output of this build (a system library, or LD_LIBRARY_PATH "
                                "pointing at another build)")
    if m.deleted:
        return FileCheck(path=m.path, status=REPLACED, detail="deleted or replaced on disk after the server mapped it")
    if on_disk is None:
        return FileCheck(path=m.path, status=UNREADABLE, detail="the file could not be read")
    if (on_disk.device, on_disk.inode) != (m.device, m.inode):
        return FileCheck(path=m.path, status=REPLACED, detail="the path now holds another file than the one mapped")
    if on_disk.sha256 != expected[m.path]:
        return FileCheck(path=m.path, status=CHANGED,
                         detail=f"sha256 {on_disk.sha256[:16]}, the manifest records {expected[m.path][:16]}")
    return FileCheck(path=m.path, status=OWN)


def judge(mapped: Iterable[MappedFile], *, executable: str, expected: dict[str, str],
          on_disk: dict[str, OnDisk | None]) -> tuple[FileCheck, ...]:
    """Every file provenance judges, checked. The executable must be among the mapped
    files (a process always maps its executable; a missing one fails as unreadable)."""
    chosen = to_check(mapped, executable=executable, expected=expected)
    checks = [judge_file(m, expected=expected, on_disk=on_disk.get(m.path)) for m in chosen]
    if not any(m.path == executable for m in chosen):
        checks.insert(0, FileCheck(path=executable, status=UNREADABLE,
                                   detail="the executable is not among the mapped files"))
    return tuple(checks)


def env_notes(environ: dict[str, str]) -> tuple[str, ...]:
    return tuple(f"{k}={environ[k]}" for k in ENV_NOTED if environ.get(k))


# --------------------------------------------------------------------------- reading /proc


def _on_disk(path: str, hasher: Callable[[Path], str]) -> OnDisk | None:
    try:
        st = os.stat(path)
        return OnDisk(sha256=hasher(Path(path)), device=(os.major(st.st_dev), os.minor(st.st_dev)), inode=st.st_ino)
    except OSError:
        return None


def read_environ(pid: int) -> dict[str, str]:
    try:
        return psutil.Process(pid).environ()
    except psutil.Error:
        return {}


def inspect_process(pid: int, *, side: str, device: str, expected: dict[str, str],
                    hasher: Callable[[Path], str] = sha256_file) -> Provenance:
    """The provenance of the live process ``pid`` against ``expected`` (real path -> sha256
    of every output of the build, as the manifest records them)."""
    expected = {os.path.realpath(p): h for p, h in expected.items()}
    # /proc/PID/maps is read here, not through psutil: its memory_maps() gives paths and
    # sizes but not the device and inode that tell the mapped file from one put in its place.
    try:
        executable = os.readlink(f"/proc/{pid}/exe")
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError as exc:
        return Provenance(side=side, device=device, pid=pid, executable="", checks=(),
                          error=f"/proc/{pid} could not be read ({exc.strerror or exc}); is the server still running?")
    if executable.endswith(DELETED):
        executable = executable[: -len(DELETED)]
    mapped = parse_maps(maps)
    chosen = to_check(mapped, executable=executable, expected=expected)
    on_disk = {m.path: _on_disk(m.path, hasher) for m in chosen}
    checks = judge(mapped, executable=executable, expected=expected, on_disk=on_disk)
    return Provenance(side=side, device=device, pid=pid, executable=executable, checks=checks,
                      notes=env_notes(read_environ(pid)))
