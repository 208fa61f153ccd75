"""Typed errors. Each carries an exit code and a message that says what to do next."""

from __future__ import annotations

import errno


class OnebitError(Exception):
    """Base class: the CLI prints ``str(err)`` on one line and exits with ``exit_code``."""

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class ConfigError(OnebitError):
    exit_code = 2
    kind = "config"


class LockError(OnebitError):
    exit_code = 3
    kind = "lock"


class FetchError(OnebitError):
    exit_code = 4
    kind = "fetch"


class IntegrityError(FetchError):
    exit_code = 5
    kind = "integrity"


class PatchError(OnebitError):
    exit_code = 6
    kind = "patch"


class ToolMissingError(OnebitError):
    exit_code = 7
    kind = "tool"


class CommandError(OnebitError):
    """A subprocess failed. Carries the command, its exit code, the log path and the log tail."""

    exit_code = 8
    kind = "command"

    def __init__(
        self,
        message: str,
        *,
        argv: list[str],
        returncode: int,
        log_path: str | None,
        tail: str,
        hint: str | None = None,
    ):
        super().__init__(message, hint=hint, detail=tail)
        self.argv = argv
        self.returncode = returncode
        self.log_path = log_path
        self.tail = tail


class BuildError(OnebitError):
    exit_code = 9
    kind = "build"


class SmokeError(OnebitError):
    exit_code = 10
    kind = "smoke"


class VerifyError(OnebitError):
    exit_code = 11
    kind = "verify"


class NotAvailableError(OnebitError):
    exit_code = 12
    kind = "unavailable"


class SpaceError(OnebitError):
    """The disk filled up; what was half-written has been removed."""

    exit_code = 13
    kind = "disk"


class WorkspaceError(OnebitError):
    """The workspace cannot be used (a file, not writable)."""

    exit_code = 2
    kind = "workspace"


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full: the one test for it."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
