"""Which builds use one shared sccache server at the same time.

The server of the local cache is shared by every build of a user and configuration, and
sccache counts its statistics over all of them: a build's figures (the server's counts after
the build minus before) then include the compiles of any build that ran beside it. Each build
signs in here while it runs (a file named by its pid in a folder beside the server's socket,
and a counter of sign-ins), so that its report can say how many others shared the figures:
those signed in when it started, and those that signed in after."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from onebit_build.core.workspace import pid_alive


@contextlib.contextmanager
def _locked(folder: Path):
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _others(folder: Path) -> set[int]:
    """The pids of the other builds signed in; those of builds that died are removed."""
    found = set()
    for entry in folder.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if pid_alive(int(entry.name)):
            found.add(int(entry.name))
        else:
            entry.unlink(missing_ok=True)
    return found


def _count(folder: Path) -> int:
    try:
        return int((folder / "count").read_text() or 0)
    except (OSError, ValueError):
        return 0


class ServerUse:
    """One build's sign-in with the shared server of socket ``sock``. Never fails a build:
    where the folder cannot be used, nothing is known (``others()`` is None)."""

    def __init__(self, sock: Path):
        self.folder = sock.with_name(sock.name + ".builds")
        self._at_start: set[int] | None = None
        self._count = 0

    def enter(self) -> "ServerUse":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with _locked(self.folder):
                self._at_start = _others(self.folder)
                self._count = _count(self.folder) + 1
                (self.folder / "count").write_text(str(self._count))
                (self.folder / str(os.getpid())).write_text("")
        except OSError:
            self._at_start = None
        return self

    def others(self) -> int | None:
        """Signs out; how many other builds used the server while this one ran."""
        if self._at_start is None:
            return None
        try:
            with _locked(self.folder):
                (self.folder / str(os.getpid())).unlink(missing_ok=True)
                later = _count(self.folder) - self._count
        except OSError:
            return None
        self._at_start, at_start = None, self._at_start
        return len(at_start) + max(0, later)
