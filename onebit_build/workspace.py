"""Where everything lives on disk, and the lock that keeps two runs apart."""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import LockError


def default_workspace() -> Path:
    env = os.environ.get("ONEBIT_WORKSPACE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onebit-build"


@dataclass(frozen=True, kw_only=True)
class Workspace:
    root: Path

    @property
    def git_dir(self) -> Path:
        return self.root / "git"

    @property
    def downloads(self) -> Path:
        return self.root / "downloads"

    @property
    def src_dir(self) -> Path:
        return self.root / "src"

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def lock_file(self) -> Path:
        return self.root / "onebit-build.lock"

    def bare_repo(self, source: str) -> Path:
        return self.git_dir / f"{safe_name(source)}.git"

    def new_run_dir(self, recipe: str, command: str) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = self.runs / f"{stamp}-{safe_name(recipe)}-{command}"
        path = base
        n = 1
        while path.exists():
            n += 1
            path = Path(f"{base}-{n}")
        path.mkdir(parents=True)
        return path


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


class WorkspaceLock:
    """An exclusive lock on the workspace for the whole run. The lock file names its holder."""

    def __init__(self, path: Path, command: str):
        self.path = path
        self.command = command
        self._fd: int | None = None

    def __enter__(self) -> "WorkspaceLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            who = f"pid {holder.get('pid', '?')} ({holder.get('command', '?')}, since {holder.get('since', '?')})"
            raise LockError(
                f"workspace {self.path.parent} is in use by {who}",
                hint="wait for that run to finish, or use another --workspace",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": self.command, "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None


def _read_holder(fd: int) -> dict[str, object]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096)
        doc = json.loads(data.decode() or "{}")
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}
