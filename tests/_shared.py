"""Locks that let the test run use both cores (pytest-xdist workers) while the slow tests
share one real test workspace.

Two things are shared between the workers:

- the test workspaces themselves (the default one, and the vulkan recipe's beside it), which
  the tool locks for every command run on one (a second command fails at once with "in
  use"): every command on one goes through its lock, held for the command by the CLI helpers
  in fixtures, and for the whole test by the tests marked ``shared_workspace`` (which xdist
  also keeps on one worker per workspace, in file order);
- what is found once per run (the default build's llama-server, the model: ``once_per_run``).
  No test empties or rebuilds the default build folder in place (``--fresh`` is tested on a
  project of its own), so the tests that start its llama-server need no lock for it.

Each lock is an ``flock`` on a file beside the test workspace. A writer first takes the
lock's turnstile, so that a stream of readers on the other worker cannot starve it. Within
one process the locks are reentrant: a command run by a test that already holds the lock
passes through. Without xdist there is one process and no lock ever waits."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


class TestLock:
    """A reentrant shared/exclusive ``flock`` on ``path`` with a turnstile for writers."""

    def __init__(self, name: str):
        self.name = name
        self._fd: int | None = None
        self._mode: int | None = None
        self._depth = 0

    def path(self) -> Path:
        return beside_workspace(f"{self.name}.lock")

    def _open(self, path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    @contextlib.contextmanager
    def held(self, *, exclusive: bool):
        want = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if self._depth and (self._mode == fcntl.LOCK_EX or want == fcntl.LOCK_SH):
            self._depth += 1  # held already, strongly enough
            try:
                yield
            finally:
                self._depth -= 1
            return
        if self._depth:
            raise RuntimeError(f"the {self.name} test lock is held shared and cannot be made exclusive here")
        path = self.path()
        turnstile = self._open(path.with_suffix(".turnstile"))
        fd = self._open(path)
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            try:
                fcntl.flock(fd, want)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            self._fd, self._mode, self._depth = fd, want, 1
            yield
        finally:
            self._fd, self._mode, self._depth = None, None, 0
            os.close(fd)  # closing drops the flock
            os.close(turnstile)


def beside_workspace(suffix: str) -> Path:
    """A file next to the shared test workspace (never in it: the tool owns that folder)."""
    from conftest import workspace_for_tests

    ws = workspace_for_tests()
    return ws.with_name(f"{ws.name}.{suffix}")


WORKSPACE = TestLock("workspace")
VULKAN_WORKSPACE = TestLock("vulkan-workspace")


def workspace_lock(name: str) -> TestLock:
    """The lock of the shared test workspace ``name`` (``default`` or ``vulkan``)."""
    return {"default": WORKSPACE, "vulkan": VULKAN_WORKSPACE}[name]


def named_test_workspace(args: tuple[str, ...]) -> TestLock | None:
    """The lock of the shared test workspace a CLI argument list runs on, if it runs on one."""
    from conftest import vulkan_workspace_for_tests, workspace_for_tests

    given = {b for a, b in zip(args, args[1:]) if a == "--workspace"}
    for lock, ws in ((WORKSPACE, workspace_for_tests()), (VULKAN_WORKSPACE, vulkan_workspace_for_tests())):
        if str(ws) in given:
            return lock
    return None


def on_test_workspace(args: tuple[str, ...]):
    """The workspace lock for a command with ``args`` when it runs on a shared test
    workspace (held for the command), else nothing."""
    lock = named_test_workspace(args)
    return lock.held(exclusive=True) if lock is not None else contextlib.nullcontext()


def once_per_run(name: str, make):
    """``make()``'s value, made by one worker of this test run and read by the others (the
    first builds the real default recipe, the others reuse what it found). Without xdist,
    ``make()`` itself. The value is kept beside the test workspace as JSON, atomically."""
    import json

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return make()
    path = beside_workspace(f"{name}.json")

    def recorded():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and doc.get("run") == run else None

    doc = recorded()
    if doc is None:
        with WORKSPACE.held(exclusive=True):
            doc = recorded()
            if doc is None:
                doc = {"run": run, "value": make()}
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(doc))
                os.replace(tmp, path)
    return doc["value"]
