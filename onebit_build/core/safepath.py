"""Paths given by the user and files read from them, handled so that nothing hangs and nothing
turns into a traceback: :func:`read_regular` opens only regular files and never blocks (a FIFO
or a device in a recipe folder or the answers cache is refused at once), and :func:`resolved`
makes a path absolute, a loop of symbolic links on it becoming one configuration error that
names the option (or variable) the path came from."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from onebit_build.core import ui
from onebit_build.core.errors import ConfigError


class NotRegularFile(OSError):
    """The path names something that is not a regular file (a FIFO, a device, a folder)."""

    def __init__(self, path: Path, kind: str):
        super().__init__(errno.EINVAL, f"is {kind}, not a regular file", str(path))
        self.kind = kind


def file_kind(mode: int) -> str:
    """What ``mode`` (an ``st_mode``) is, in words. Pure."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file at ``path``. Opened without blocking, so that a FIFO with
    no writer answers at once; anything but a regular file raises :class:`NotRegularFile`.
    Other failures are the OSError of the system call (FileNotFoundError, PermissionError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(Path(path), file_kind(mode))
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_WARNED: set[tuple[str, str]] = set()


def warn_if_shared(path: Path, origin: str) -> None:
    """Warn (once a run for each file) when the secret in ``path`` (a key, a token) can be read
    by the group or by others; ``origin`` is the option or variable that named it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if mode & (stat.S_IRGRP | stat.S_IROTH) and (origin, str(path)) not in _WARNED:
        _WARNED.add((origin, str(path)))
        ui.warn(f"{origin} {path} can be read by other users (mode {stat.S_IMODE(mode):o}): chmod 600 it")


def resolved(path: str | os.PathLike[str], origin: str) -> Path:
    """``path`` with ``~`` expanded, made absolute and its links followed, as Path.resolve()
    does (a path that does not exist yet is fine). A loop of symbolic links on the way is a
    ConfigError naming ``origin``, the option or environment variable the path came from.
    Python 3.12 and older raise a loop as RuntimeError or OSError (ELOOP) even when not strict;
    3.13 raises it only in strict mode, so strict mode is asked first, then the lenient one for
    a path that does not exist yet."""
    given = Path(path).expanduser()
    for strict in (True, False):
        try:
            return given.resolve(strict=strict)
        except RuntimeError:
            break
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                break
            if not strict:
                raise
    raise ConfigError(f"{origin} {given}: a loop of symbolic links (a link that leads back to itself)",
                      hint=f"point {origin} at a real file or folder, or remove the looping link")
