"""Programs die with the tool, grandchildren included.

Each program the tool starts leads a process group of its own (so that a build tool's own
children can be stopped with it) and gets a parent-death signal (:func:`die_with_parent`). The
signal reaches that program only: when a killed tool leaves ``git fetch`` or ``ninja`` to die,
what they started (``git index-pack``, compilers) would run on, reparented to init. So one
small watcher process per tool run holds the list of those groups, read from a pipe only the
tool writes to: when the pipe closes (the tool exited or was killed, even with -9), the
watcher kills every group still listed. A group leaves the list when its program is done.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from onebit_build.core.child_env import child_environ

_LIBC = None
if sys.platform.startswith("linux"):
    try:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - a libc is always there on Linux
        _LIBC = None

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Runs in a child between fork and exec: the child gets SIGKILL when the thread that
    started it ends, so that even a killed onebit-build leaves none of its programs behind."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# The watcher: "+PGID" lists a group, "-PGID" takes it off; at the end of its input, kill the rest.
WATCHER = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    try:
        (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
    except (ValueError, IndexError):
        pass
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""

_LOCK = threading.Lock()
_WATCHER: subprocess.Popen[str] | None = None


def _tell(line: str) -> None:
    """Send one line to the watcher, started on first use; never fails the caller."""
    global _WATCHER
    with _LOCK:
        try:
            if line.startswith("-") and _WATCHER is None:
                return  # nothing listed yet
            if _WATCHER is None or _WATCHER.poll() is not None:
                _WATCHER = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHER], stdin=subprocess.PIPE,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                                            env=child_environ(),  # none of the tool's secrets
                                            start_new_session=True)  # a Ctrl-C at the terminal leaves it be
            assert _WATCHER.stdin is not None
            _WATCHER.stdin.write(line + "\n")
            _WATCHER.stdin.flush()
        except OSError:
            pass


def own(pgid: int) -> None:
    """List the group ``pgid``: it is killed if the tool ends while it is listed."""
    _tell(f"+{pgid}")


def release(pgid: int) -> None:
    """Take the group ``pgid`` off the list (its program is done)."""
    _tell(f"-{pgid}")


@contextmanager
def interrupts_held() -> Iterator[list[int]]:
    """Hold Ctrl-C (and SIGTERM) for the body; the list says whether one came. Outside the
    main thread nothing is held (signals go to the main thread anyway)."""
    got: list[int] = []
    try:
        before = {s: signal.signal(s, lambda signum, _frame: got.append(signum))
                  for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield got
        return
    try:
        yield got
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
