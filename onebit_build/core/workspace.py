"""Where everything lives on disk, and the lock that keeps two runs apart."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from onebit_build.core.errors import ConfigError, LockError, WorkspaceError, is_disk_full
from onebit_build.core.names import file_part
from onebit_build.core.safepath import resolved
from onebit_build.core.usercache import cache_home


def default_workspace() -> Path:
    env = os.environ.get("ONEBIT_WORKSPACE")
    if env:
        return Path(env)
    return cache_home(os.environ) / "onebit-build"


SHARED_TEST_WORKSPACE = "onebit-build-test"


def shared_test_workspace() -> Path:
    """The workspace the project's test command keeps between runs on purpose (the real build
    and model its slow tests share): ``$ONEBIT_TEST_WORKSPACE``, else beside the default one."""
    env = os.environ.get("ONEBIT_TEST_WORKSPACE")
    return Path(env) if env else cache_home(os.environ) / SHARED_TEST_WORKSPACE


def kept_by_tests() -> list[Path]:
    """What the test command keeps between runs: its shared workspaces (``NAME``, ``NAME-*``)
    and the lock files beside them (``NAME.*``). ``gc`` lists them and removes them when asked."""
    ws = shared_test_workspace()
    try:
        entries = list(ws.parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in entries if p.name == ws.name or p.name.startswith((f"{ws.name}-", f"{ws.name}.")))


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
        return self.git_dir / f"{file_part(source)}.git"

    def new_run_dir(self, recipe: str, command: str) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = self.runs / f"{stamp}-{file_part(recipe)}-{command}"
        path = base
        n = 1
        while path.exists():
            n += 1
            path = Path(f"{base}-{n}")
        path.mkdir(parents=True)
        return path


class FileLock:
    """An exclusive ``flock`` on ``path`` whose file names its holder (pid, host, command,
    since when). When it is held: fail at once naming the holder (``wait_s`` 0), or wait up
    to ``wait_s`` seconds, telling ``on_wait`` once. Subclasses word the errors."""

    def __init__(self, path: Path, command: str, *, wait_s: float = 0.0, poll_s: float = 0.5,
                 on_wait: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.command = command
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.on_wait = on_wait
        self._fd: int | None = None

    def busy(self, holder: str) -> LockError:
        return LockError(f"{self.path} is held by {holder}", hint="wait for that run to finish")

    def timed_out(self, holder: str) -> LockError:
        return LockError(f"{self.path} is still held by {holder} after waiting {self.wait_s:g} s",
                         hint="try again later")

    def waiting(self, holder: str) -> str:
        return f"waiting for {self.path}: held by {holder} (up to {self.wait_s:g} s)"

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + max(0.0, self.wait_s)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = describe_holder(_read_holder(fd))
                if self.wait_s <= 0 or time.monotonic() >= deadline:
                    os.close(fd)
                    raise (self.busy(holder) if self.wait_s <= 0 else self.timed_out(holder)) from None
                if not told:
                    if self.on_wait is not None:
                        self.on_wait(self.waiting(holder))
                    told = True
                time.sleep(self.poll_s)
        self._fd = fd
        try:
            _name_holder(fd, {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                              "since": time.strftime("%Y-%m-%d %H:%M:%S")})
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None


def _name_holder(fd: int, doc: dict[str, object]) -> None:
    """Write the holder into the held lock's file, best-effort: the lock is the flock, and a
    full disk (where ``gc`` must still run) leaves the file naming no holder."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(doc).encode(), 0)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        try:
            os.ftruncate(fd, 0)  # never half a holder
        except OSError:
            pass


class WorkspaceLock(FileLock):
    """The workspace lock, held for a whole run so that two runs never share a workspace.

    The lock that counts is taken on the workspace folder itself, which cannot be removed
    from under a holder the way a lock file can; the lock file beside it names the holder."""

    def busy(self, holder: str) -> LockError:
        return LockError(f"workspace {self.path.parent} is in use by {holder}",
                         hint="wait for that run to finish, or use another --workspace")

    def __enter__(self):
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(dfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(dfd)
            holder = _holder_of(self.path)
            if holder == describe_holder({}):
                holder = "another run (its lock file was removed while it ran)"
            raise self.busy(holder) from None
        self._dfd = dfd
        try:
            return super().__enter__()
        except BaseException:
            self._release_dir()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._release_dir()

    def _release_dir(self) -> None:
        dfd = getattr(self, "_dfd", None)
        if dfd is not None:
            fcntl.flock(dfd, fcntl.LOCK_UN)
            os.close(dfd)
            self._dfd = None


def _holder_of(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return describe_holder({})
    try:
        return describe_holder(_read_holder(fd))
    finally:
        os.close(fd)


def check_folder(root: Path) -> Path:
    """``root`` unless a workspace there could not be a folder: a file (or a FIFO, a device)
    in its place is one line with the fix. Every command checks it while its options are
    parsed, the ones that only read the workspace (``builds``, ``location``, ``gc``) too."""
    if root.exists() and not root.is_dir():
        raise WorkspaceError(f"workspace {root} is a file, not a folder",
                             hint="give --workspace a folder (it is created when missing)")
    return root


def check_usable(root: Path) -> None:
    """Refuse a workspace that is a file or cannot be written, in one line with the fix."""
    check_folder(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise WorkspaceError(
            f"workspace {root} is not writable ({exc.strerror or exc})",
            hint="choose a writable --workspace (or $ONEBIT_WORKSPACE), or fix the folder's permissions",
        ) from None
    ws = Workspace(root=root)
    for sub in (ws.git_dir, ws.downloads, ws.src_dir, ws.build_dir, ws.models, ws.runs):
        if os.path.lexists(sub) and not sub.is_dir():  # a file, a link to nowhere, a link that loops
            what = "a link that leads to no folder" if sub.is_symlink() else "a file"
            raise WorkspaceError(f"workspace folder {sub} is {what}, not a folder",
                                 hint=f"remove it (the tool makes {sub.name}/ again), or choose another --workspace")


def check_target_folder(path: Path, flag: str, *, inside: tuple[str, ...] = ()) -> None:
    """A folder a command will create or write into (``--prefix``, ``--out``), checked before
    anything runs: a file in its place, or a folder that cannot be written, is one line
    naming it; so is a file where one of the folders ``inside`` it goes (``bin``,
    ``share/onebit-build``). Nothing is created."""
    for rel in map(Path, inside):
        for part in (*reversed(rel.parents[:-1]), rel):  # share, then share/onebit-build
            _no_file_at(path / part, flag, path)
    there = path
    while not there.exists() and not there.is_symlink() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        what = "is a file, not a folder" if there == path else f"cannot be made: {there} is a file"
        raise WorkspaceError(f"{flag} {path} {what}", hint=f"give {flag} a folder (it is created when missing)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=there)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        at = "" if there == path else f" at {there}"
        raise WorkspaceError(f"{flag} {path} is not writable ({exc.strerror or exc}{at})",
                             hint=f"choose a writable {flag}, or fix the permissions of {there}") from None


def _no_file_at(folder: Path, flag: str, path: Path) -> None:
    if os.path.lexists(folder) and not folder.is_dir():
        raise WorkspaceError(f"{flag} {path}: {folder} is a file, not a folder",
                             hint=f"remove {folder}, or give {flag} another folder")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_TMP_PID = re.compile(r"^\.(?:.*[.-])?(?:tmp|export|joining|download)-(\d+)(?:[.-].*)?$")


def sweep_killed(ws: Workspace, *, dry_run: bool = False) -> list[Path]:
    """Remove (``dry_run``: only list) what killed runs left in the folders the workspace's
    commands write into: sources, models, downloads. Every command that takes the workspace
    calls this, and ``gc`` shows it. Returns those paths."""
    return [p for folder in (ws.src_dir, ws.models, ws.downloads) for p in sweep_stale(folder, dry_run=dry_run)]


def sweep_stale(folder: Path, *, dry_run: bool = False) -> list[Path]:
    """Remove temporary folders and files left in ``folder`` by runs that were killed
    (their names carry the owner's pid, and that process is gone). Returns what went."""
    gone: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return gone
    for p in entries:
        m = _TMP_PID.match(p.name)
        if not m or pid_alive(int(m.group(1))):
            continue
        if dry_run:
            pass
        elif p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        gone.append(p)
    return gone


def describe_holder(doc: dict[str, object]) -> str:
    if not doc:
        return "another process (the lock file names no holder yet)"
    return (f"pid {doc.get('pid', '?')} on {doc.get('host', '?')} ({doc.get('command', '?')}, since "
            f"{doc.get('since', '?')})")


def _read_holder(fd: int) -> dict[str, object]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        doc = json.loads(os.read(fd, 8192).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


# --------------------------------------------------------------------------- mirror folders

MIRROR_ENV = "ONEBIT_MIRROR_DIR"


def mirror_dirs_from(cli_dirs: list[str] | None) -> tuple[Path, ...]:
    """The mirror folders of ``--mirror-dir`` and $ONEBIT_MIRROR_DIR. A folder that does not
    exist is refused (a typo would otherwise silently send the run to the network)."""
    named = [(Path(d), "--mirror-dir") for d in (cli_dirs or [])]
    env = os.environ.get(MIRROR_ENV)
    if env:
        named += [(Path(p), f"${MIRROR_ENV}") for p in env.split(os.pathsep) if p]
    for d, origin in named:
        if not d.is_dir():
            raise ConfigError(f"{origin} {d}: no such folder",
                              hint="give a folder that holds NAME.git or NAME.bundle mirrors, or drop the option")
    return tuple(resolved(d, origin) for d, origin in named)
