"""Terminal output: one line per stage, details only with -v, a progress bar for long steps.

Progress, logs, warnings and errors go to stderr; the lines that answer the command (the
built server's path, the install prefix, the base URL, PASS/FAIL, the report) go to stdout
through :func:`answer`, so that ``$(onebit-build -q build)`` is the server's path."""

from __future__ import annotations

import os
import shutil
import sys
import time
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_console = Console(stderr=True, highlight=False, soft_wrap=True)
_verbose = False
_quiet = False


def set_verbose(flag: bool) -> None:
    global _verbose
    _verbose = flag


def set_quiet(flag: bool) -> None:
    """-q: only warnings, errors and result lines (no stage lines, no progress)."""
    global _quiet
    _quiet = flag


def is_verbose() -> bool:
    return _verbose


def info(msg: str) -> None:
    if not _quiet:
        _console.print(msg, markup=False)


def result(msg: str) -> None:
    """A line that answers the command (a path, a verdict): printed even with -q."""
    _console.print(msg, markup=False)


def answer(msg: str) -> None:
    """The command's result, for a script or a person: stdout, printed even with -q."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def answer_text(text: str) -> None:
    """A multi-line answer (the plan) on stdout, each line cut to the terminal's width; when
    any was cut, stderr says how to see them whole."""
    columns = width(sys.stdout)
    lines = text.splitlines()
    fitted = [fit(line, columns) if columns else line for line in lines]
    sys.stdout.write("".join(line + "\n" for line in fitted))
    sys.stdout.flush()
    cut = sum(1 for a, b in zip(lines, fitted) if a != b)
    if cut:
        info(f"({cut} line(s) cut to {columns} columns; -v or --json shows them whole)")


def detail(msg: str) -> None:
    if _verbose:
        _console.print(msg, markup=False, style="dim")


def error(msg: str) -> None:
    _console.print(f"error: {msg}", markup=False, style="bold red")


def warn(msg: str) -> None:
    _console.print(f"warning: {msg}", markup=False, style="yellow")


@contextmanager
def stage(name: str) -> Iterator[dict[str, str]]:
    """Time a stage and print one result line: ``fetch ... ok (1.2 s) <note>``."""
    t0 = time.monotonic()
    fields: dict[str, str] = {"note": ""}
    try:
        yield fields
    except BaseException:
        result(f"{name:<8} failed ({time.monotonic() - t0:.1f} s)")
        raise
    note = fields.get("note", "")
    status = fields.get("status") or "ok"  # a stage that ran to its end but found faults says so
    line = f"{name:<8} {status} ({time.monotonic() - t0:.1f} s){'  ' + note if note else ''}"
    (info if status == "ok" else result)(line)


def _shared():
    """The console every line goes through: a live display (spinner, bar) must use it, so that
    lines printed meanwhile appear above it. (Made once here; a lazily made one is called.)"""
    return _console() if callable(_console) else _console


class CheckStatus:
    """Checks as they run: on a terminal a spinner names the check now running; every check
    that finishes prints one line (stderr), terminal or not. Nothing with -q."""

    def __init__(self) -> None:
        self._live = _shared().status("") if sys.stderr.isatty() and not _verbose and not _quiet else None

    def __enter__(self) -> "CheckStatus":
        if self._live is not None:
            self._live.start()
        return self

    def running(self, what: str) -> None:
        if self._live is not None:
            self._live.update(fit(what))

    def done(self, line: str) -> None:
        info(fit(line))

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()


def width(stream=None) -> int | None:
    """The width lines are cut to: COLUMNS when set, else the terminal's; None with -v or when
    ``stream`` (stderr by default) is no terminal (a CI log keeps whole lines)."""
    if _verbose or (not os.environ.get("COLUMNS") and not (stream or sys.stderr).isatty()):
        return None
    return shutil.get_terminal_size((80, 24)).columns


def fit(line: str, columns: int | None = None) -> str:
    """``line`` cut to the width with an ellipsis where it would wrap; the full text stays in
    the logs and the manifest."""
    columns = columns or width()
    if columns is None or len(line) <= columns:
        return line
    return line[: max(columns - 1, 1)] + "…"


class ByteBar:
    """A download's bar on a terminal: bytes so far of the total, speed, time left."""

    def __init__(self, label: str) -> None:
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        self._progress = Progress(TextColumn(f"  {label}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                  TimeRemainingColumn(), console=_shared(), transient=True, disable=_quiet)
        self._task = self._progress.add_task(label, total=None)
        self._progress.start()

    def update(self, done: int, total: int | None) -> None:
        self._progress.update(self._task, completed=done, total=total)

    def stop(self) -> None:
        self._progress.stop()


class StepProgress:
    """A progress bar fed with (done, total) pairs, e.g. from ninja's ``[n/m]`` lines."""

    def __init__(self, label: str):
        self._enabled = sys.stderr.isatty() and not _verbose and not _quiet
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=_console,
            transient=True,
        )
        self._task = None
        self._label = label
        self._last_print = 0.0

    def __enter__(self) -> "StepProgress":
        if self._enabled:
            self._progress.start()
            self._task = self._progress.add_task(self._label, total=None)
        return self

    def update(self, done: int, total: int) -> None:
        if self._enabled and self._task is not None:
            self._progress.update(self._task, completed=done, total=total)
        elif not _verbose:
            # Not a terminal (CI logs): a plain line now and then, never a flood.
            now = time.monotonic()
            if now - self._last_print > 30 or done == total:
                self._last_print = now
                info(f"  {self._label}: {done}/{total}")

    def __exit__(self, *exc: object) -> None:
        if self._enabled:
            self._progress.stop()
