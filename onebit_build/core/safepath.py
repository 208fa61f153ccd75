"""Paths given by the user and files read from them, handled so that nothing hangs and nothing
turns into a traceback. :func:`read_regular` is the one reader of a file someone named (an
option, a variable, a recipe folder, a statement to check): it opens only regular files, never
blocks (a FIFO or a device is refused at once) and refuses a file larger than its cap before
reading a byte; :func:`read_named` is the same read as one line naming the option and the cap.
:func:`check_kind` checks what a path option names before any work (a file, a folder, or
either; a path to write may be missing), and :func:`resolved` makes a path absolute, a loop of
symbolic links on it becoming one configuration error that names the option (or variable) the
path came from."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, OnebitError


class NotRegularFile(OSError):
    """The path names something that is not a regular file (a FIFO, a device, a folder)."""

    def __init__(self, path: Path, kind: str):
        super().__init__(errno.EINVAL, f"is {kind}, not a regular file", str(path))
        self.kind = kind


class TooLarge(OSError):
    """The file is larger than the reader's cap; nothing of it was read."""

    def __init__(self, path: Path, size: int, limit: int):
        super().__init__(errno.EFBIG, f"is {size_text(size)}, more than the {size_text(limit)} it may hold", str(path))
        self.size = size
        self.limit = limit


def size_text(n: int) -> str:
    """A size in the unit that writes it whole or shortest (``64 KiB``, ``1.0 GiB``). Pure."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}" if n % scale == 0 else f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def file_kind(mode: int) -> str:
    """What ``mode`` (an ``st_mode``) is, in words. Pure."""
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_regular(path: Path, *, limit: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them. Opened without
    blocking, so that a FIFO with no writer answers at once; anything but a regular file raises
    :class:`NotRegularFile`, a file larger than ``limit`` :class:`TooLarge` before a byte is
    read (and when it grows while read). Other failures are the OSError of the system call
    (FileNotFoundError, PermissionError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(Path(path), file_kind(st.st_mode))
        if st.st_size > limit:
            raise TooLarge(Path(path), st.st_size, limit)
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise TooLarge(Path(path), max(size, os.fstat(fd).st_size), limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_named(path: Path, origin: str, *, limit: int, what: str, hint: str,
               error: type[OnebitError] = ConfigError) -> bytes:
    """The bytes of the file ``origin`` (an option, a variable, ``PATH``) names, read as
    :func:`read_regular` reads, each failure one ``error`` naming ``origin``, the path and
    what is wrong: no such file, a FIFO or a folder (named as what it is), larger than the cap
    (the cap named), unreadable. ``what``: what the file holds, for the cap's message (``a PEM
    key``); ``hint``: the remedy."""
    try:
        return read_regular(path, limit=limit)
    except FileNotFoundError:
        raise error(f"{origin} {path}: no such file", hint=hint) from None
    except NotRegularFile as exc:
        raise error(f"{origin} {path} is {exc.kind}, not a file", hint=hint) from None
    except TooLarge as exc:
        raise error(f"{origin} {path} is {size_text(exc.size)}, more than the {size_text(limit)} {what} may hold",
                    hint=hint) from None
    except OSError as exc:
        raise error(f"{origin} {path} cannot be read ({exc.strerror or exc})", hint=hint) from None


FILE, FOLDER, FILE_OR_FOLDER = "a file", "a folder", "a file or a folder"


def check_kind(path: Path, origin: str, want: str, *, missing_ok: bool = False) -> Path:
    """``path`` when it names what ``origin`` takes (``want``: :data:`FILE`, :data:`FOLDER` or
    :data:`FILE_OR_FOLDER`), checked before any work: else one ConfigError naming what is
    there (a FIFO, a device, a folder, nothing). ``missing_ok``: a path the command will write,
    which may be missing (its folders are made), but not below a file. Links are followed."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not missing_ok:
            raise ConfigError(f"{origin} {path}: no such {want.removeprefix('a ').replace(' a ', ' ')}",
                              hint=f"give {origin} {want} that exists") from None
        return path
    except NotADirectoryError:  # a file on the way
        above = next((p for p in path.parents if os.path.isfile(p)), path.parent)
        raise ConfigError(f"{origin} {path} cannot be {'made' if missing_ok else 'found'}: {above} is not a folder",
                          hint=f"give {origin} a path below a folder") from None
    except OSError as exc:
        raise ConfigError(f"{origin} {path} cannot be used ({exc.strerror or exc})",
                          hint=f"give {origin} {want} you can read") from None
    fits = {FILE: stat.S_ISREG(mode), FOLDER: stat.S_ISDIR(mode),
            FILE_OR_FOLDER: stat.S_ISREG(mode) or stat.S_ISDIR(mode)}[want]
    if not fits:
        kind = "a file" if stat.S_ISREG(mode) else file_kind(mode)
        raise ConfigError(f"{origin} {path} is {kind}, not {want}",
                          hint=f"give {origin} {want}" + ("; it is made when missing" if missing_ok else ""))
    return path


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
