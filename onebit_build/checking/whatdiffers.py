"""What differs inside two files that should be byte-identical, shown by Debian's
reproducible-builds comparer ``diffoscope`` (a text and an HTML report in the run folder).

Used by a NOT VERIFIED verdict: the first differing output against a copy of the reference's
bytes found on this machine, and the first differing object against the same compile run
again without the compiler cache.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from onebit_build.core import proc
from onebit_build.core.fsutil import sha256_file

HINT = "install diffoscope to see what differs inside: apt-get install diffoscope-minimal (or pip install diffoscope)"
TIMEOUT_S = 600
MAX_REPORT = 20 << 20  # bytes of one report: a whole library's disassembly can be far larger


@dataclass(frozen=True, kw_only=True)
class ReportPlace:
    """Where a verdict's reports go (the run folder) and where copies of the reference's bytes
    may be found (the workspace's other builds and pulled builds)."""

    folder: Path
    copies: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Shown:
    """A report written: its files, and its first lines (what a person reads first)."""

    text: Path
    html: Path
    first: tuple[str, ...]


def show(found: Path, expected: Path, folder: Path, stem: str) -> Shown | str:
    """diffoscope's report of ``expected`` (the reference's bytes) against ``found`` (the
    build's), written as ``<stem>.diffoscope.txt``/``.html`` into ``folder``; a line saying
    why there is none otherwise."""
    exe = shutil.which("diffoscope")
    if exe is None:
        return f"no report of what differs in {found.name}: {HINT}"
    folder.mkdir(parents=True, exist_ok=True)
    text, html = folder / f"{stem}.diffoscope.txt", folder / f"{stem}.diffoscope.html"
    done = proc.capture([exe, "--no-progress", "--text", text, "--html", html, "--max-report-size", str(MAX_REPORT),
                         "--exclude-directory-metadata", "yes", expected, found], timeout=TIMEOUT_S)
    if done.returncode == 0:
        return f"diffoscope finds no difference between {expected} and {found}"
    if done.returncode != 1 or not text.is_file():
        why = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return f"diffoscope could not compare {found.name} ({why})"
    lines = text.read_text(errors="replace").splitlines()
    return Shown(text=text, html=html, first=tuple(ln for ln in lines[:12]))


def stem_of(name: str) -> str:
    """A file name for a report of ``name`` (an output or an object path). Pure."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")[:120] or "file"


def copy_with(sha256: str, name: str, places: Iterable[Path]) -> Path | None:
    """A file called ``name`` with these bytes under one of ``places`` (other builds and pulled
    builds of the workspace); None when this machine has none."""
    for place in places:
        for cand in sorted(place.glob(f"*/bin/{name}")) if place.is_dir() else ():
            if cand.is_file() and not cand.is_symlink() and sha256_file(cand) == sha256:
                return cand
    return None


def line_of(shown: Shown | str, what: str) -> str:
    """What the verdict's line says of a report. Pure."""
    if isinstance(shown, str):
        return shown
    return f"what differs in {what}: {shown.text} (and .html)"


def what_differs(found: Path | None, expected_sha256: str, name: str, place: ReportPlace) -> str:
    """The line of a differing output's report: against a copy of the reference's bytes."""
    other = copy_with(expected_sha256, name, place.copies)
    if found is None or other is None:
        return f"no copy of the reference's {name} on this machine to show what differs in it"
    return line_of(show(found, other, place.folder, stem_of(name)), name)
