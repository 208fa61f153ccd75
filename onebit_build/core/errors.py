"""Typed errors. Each carries an exit code and a message that says what to do next.

:data:`EXIT_CODES` is the one table of what each exit code means: every code has one
meaning and one owner (an error class below, or the CLI's success and Ctrl-C). The README's
"Exit codes:" sentence is :func:`exit_codes_sentence`, checked by a test.
"""

from __future__ import annotations

import errno

SUCCESS = 0
INTERRUPTED = 130  # the shell's code for a run stopped by Ctrl-C (or SIGTERM)

EXIT_CODES: dict[int, str] = {
    SUCCESS: "success",
    1: "unexpected error",
    2: "usage or configuration (an option, recipe, pin or value is refused)",
    3: "workspace in use (another run holds its lock)",
    4: "fetch",
    5: "integrity (bytes are not the pinned ones)",
    6: "patch",
    7: "missing tool",
    8: "command failed",
    9: "build",
    10: "a served llama-server failed (it did not start, did not answer or failed its checks)",
    11: "verification failed (NOT VERIFIED)",
    12: "not available (no build, model or output to use)",
    13: "disk full",
    14: "unusable folder (the workspace or a folder to write is a file, not writable, or its name is too long)",
    15: "box in use (a benchmark or verification holds the bench lock)",
    16: "this system cannot run the build (a library or symbol version its programs need is missing)",
    INTERRUPTED: "interrupted",
}


def exit_codes_sentence() -> str:
    """The table as the README says it: ``Exit codes: 0 success, 1 ..., 130 interrupted.``"""
    return "Exit codes: " + ", ".join(f"{code} {meaning}" for code, meaning in sorted(EXIT_CODES.items())) + "."


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
    """The workspace is in use: another run holds its lock."""

    exit_code = 3
    kind = "lock"


class BoxLockError(LockError):
    """The machine is in use: a benchmark or verification holds the bench lock."""

    exit_code = 15
    kind = "box"


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
    """A folder the run must write cannot be used: the workspace, ``--prefix`` or ``--out`` is
    a file or not writable, or the system refused a write (permission, read-only, name too long)."""

    exit_code = 14
    kind = "workspace"


class RuntimeFloorError(OnebitError):
    """The system lacks a library, or a symbol version of one, that the build's programs need
    (its runtime floor): refused before anything is installed or started."""

    exit_code = 16
    kind = "floor"


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full: the one test for it."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
