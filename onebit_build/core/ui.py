"""Terminal output: one line per stage, details only with -v, a progress bar for long steps.

Progress, logs, warnings and errors go to stderr; the lines that answer the command (the
built server's path, the install prefix, the base URL, PASS/FAIL, the report) go to stdout
through :func:`answer`, so that ``$(onebit-build -q build)`` is the server's path.

This module is the one place text reaches the terminal, and it takes lines, never a text of
several: a block (a table, the plan, an error's detail) is a sequence of lines, and every line
goes through :func:`printable`, so a newline in a value (a path, a name) is written as ``\\n``
inside its line and can never start a line of its own. JSON is written by :func:`answer_json`,
which escapes control characters itself."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from contextlib import contextmanager
from typing import Iterable, Iterator

_console_made = None
_verbose = False
_quiet = False


# What a terminal would act on rather than show: C0 controls but tab (ESC starts colour, title
# and screen commands, CR and BS overwrite, a newline starts a line), DEL, C1 controls, and
# the Unicode marks that reorder or end lines.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` as one line may show it: every control character written as an escape
    (``\\x1b``, ``\\n``), so that nothing from a recipe, a path or a name sets the window title,
    clears the screen or starts a line of its own (a forged ``error:``). Pure."""
    def escape(m: re.Match[str]) -> str:
        ch = m.group()
        return {"\n": "\\n", "\r": "\\r"}.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
    return _CONTROL.sub(escape, text)


def _console():
    """The stderr console, made on the first line printed."""
    global _console_made
    if _console_made is None:
        # rich is imported here, on first output, not with the module: --help, completion and
        # the other quick commands print nothing through it and start without its import time.
        from rich.console import Console

        _console_made = Console(stderr=True, highlight=False, soft_wrap=True)
    return _console_made


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
        _console().print(printable(msg), markup=False)


def block(lines: Iterable[str]) -> None:
    """Several lines at once (an error's detail), each one line, printable."""
    if not _quiet:
        _console().print("\n".join(printable(line) for line in lines), markup=False)


def result(msg: str) -> None:
    """A line that answers the command (a path, a verdict): printed even with -q."""
    _console().print(printable(msg), markup=False)


def answer(msg: str) -> None:
    """The command's result, for a script or a person: stdout, printed even with -q."""
    sys.stdout.write(printable(msg) + "\n")
    sys.stdout.flush()


def answer_lines(lines: Iterable[str]) -> None:
    """Lines for stdout (a table, a listing), each one line, printable. A completion script is
    code and is written as it is."""
    sys.stdout.write("".join(printable(line) + "\n" for line in lines))
    sys.stdout.flush()


def answer_json(doc: object) -> None:
    """A JSON document for stdout, indented: JSON escapes every control character itself."""
    import json

    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()


def answer_text(lines: Iterable[str]) -> None:
    """A long answer (the plan) on stdout, each line printable and cut to the terminal's width;
    when any was cut, stderr says how to see them whole."""
    columns = width(sys.stdout)
    lines = [printable(line) for line in lines]
    fitted = [fit(line, columns) if columns else line for line in lines]
    sys.stdout.write("".join(line + "\n" for line in fitted))
    sys.stdout.flush()
    cut = sum(1 for a, b in zip(lines, fitted) if a != b)
    if cut:
        info(f"({cut} line(s) cut to {columns} columns; -v or --json shows them whole)")


def detail(msg: str) -> None:
    if _verbose:
        _console().print(printable(msg), markup=False, style="dim")


def error(msg: str) -> None:
    """One line, whatever the message holds (a path with a newline cannot forge a second one)."""
    _console().print(f"error: {printable(msg)}", markup=False, style="bold red")


def warn(msg: str) -> None:
    _console().print(f"warning: {printable(msg)}", markup=False, style="yellow")


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


class CheckStatus:
    """Checks as they run: on a terminal a spinner names the check now running; every check
    that finishes prints one line (stderr), terminal or not. Nothing with -q."""

    def __init__(self) -> None:
        self._live = _console().status("") if sys.stderr.isatty() and not _verbose and not _quiet else None

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
        from rich.progress import (  # see _console
            BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn,
        )

        self._progress = Progress(TextColumn(f"  {label}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                  TimeRemainingColumn(), console=_console(), transient=True, disable=_quiet)
        self._task = self._progress.add_task(label, total=None)
        self._progress.start()

    def update(self, done: int, total: int | None) -> None:
        self._progress.update(self._task, completed=done, total=total)

    def stop(self) -> None:
        self._progress.stop()


class StepProgress:
    """A progress bar fed with (done, total) pairs, e.g. from ninja's ``[n/m]`` lines."""

    def __init__(self, label: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # see _console

        self._enabled = sys.stderr.isatty() and not _verbose and not _quiet
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=_console(),
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
