"""The spot-check of a distributed build: which objects the build servers compiled (read from
the build's sccache server log as the build runs), and a sample of them compiled again here,
without any launcher, and compared byte for byte.

sccache's server log (``sccache::compiler::compiler`` at debug level, 0.16) says per compile,
each line tagged with the object's file name: ``[NAME]: get_cached_or_compile: [ARGS]`` (the
compiler's arguments, ``-o`` among them, relative to the build folder where Ninja runs it),
``[NAME]: Running job`` when a build server runs it, ``[NAME]: Could not perform distributed
compile, falling back to local: ...`` when it did not, and ``[NAME]: Compiled in ...`` once the
object is written (sccache stores it in the cache from that file). Two compiles of objects with
the same file name at the same time cannot be told apart: such objects are not sampled, and
count as remote where distribution stops.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from onebit_build.building.objects import recompile
from onebit_build.core.fsutil import sha256_file

SAMPLE_FIRST = 2  # the first remote objects of each source language (.c, .cpp...) are all checked...
SAMPLE_EVERY = 20  # ...and then one in this many
POLL_S = 0.5
LINE = re.compile(r"\] \[(?P<tag>[^\]\n]+)\]: (?P<what>.*)$")
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def output_of(args_text: str) -> str | None:
    """The ``-o`` value in a logged argument list (Rust's debug form of strings). Pure."""
    words = [re.sub(r"\\(.)", r"\1", w) for w in QUOTED.findall(args_text)]
    for flag, value in zip(words, words[1:]):
        if flag == "-o":
            return value
    return None


@dataclass
class LogReader:
    """Which objects were compiled remotely, from the log's lines in order. Pure."""

    remote: list[str] = field(default_factory=list)  # in the order they were written
    unclear: list[str] = field(default_factory=list)  # maybe remote: compiled while another had its file name
    _open: dict[str, list[dict]] = field(default_factory=dict)

    def feed(self, line: str) -> str | None:
        """Takes one line; returns an object that was just written by a build server."""
        m = LINE.search(line)
        if m is None:
            return None
        tag, what = m.group("tag"), m.group("what")
        states = self._open.setdefault(tag, [])
        if what.startswith("get_cached_or_compile:"):
            states.append({"out": output_of(what), "remote": False, "shared": bool(states)})
            for s in states:
                s["shared"] = len(states) > 1 or s["shared"]
            return None
        if not states:
            return None
        if what.startswith("Running job"):
            for s in states:
                s["remote"] = True
        elif what.startswith("Could not perform distributed compile") and len(states) == 1:
            states[0]["remote"] = False
        elif what.startswith("Compiled in"):
            state = states.pop(0)
            if state["remote"] and state["out"] and not state["shared"]:
                self.remote.append(state["out"])
                return state["out"]
            if state["remote"] and state["out"]:
                self.unclear.append(state["out"])
        return None


@dataclass(frozen=True, kw_only=True)
class Checked:
    name: str
    remote: str  # sha256 of the object the build server made
    local: str | None  # sha256 of the same compile here; None when it could not be run
    detail: str = ""

    @property
    def same(self) -> bool:
        return self.local == self.remote


class SpotCheck:
    """Reads the log while the build runs, checks the sample, and calls ``on_mismatch(Checked)``
    at the first object whose bytes differ (once)."""

    def __init__(self, log: Path, build_dir: Path, *, launchers: tuple[str, ...], ninja: Path | None,
                 env: Mapping[str, str], on_mismatch: Callable[[Checked], None]):
        self.log, self.build_dir, self.launchers, self.ninja, self.env = log, build_dir, launchers, ninja, env
        self.on_mismatch = on_mismatch
        self.reader = LogReader()
        self.checked: list[Checked] = []
        self.stopped_at: int | None = None  # how many remote objects there were when distribution stopped
        self._offset, self._rest, self._todo = _size(log), "", []  # what the log holds now: the probes
        self._seen: dict[str, int] = {}  # remote objects by source language
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dist-spot-check", daemon=True)

    def start(self) -> "SpotCheck":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._halt.wait(POLL_S):
            self._read()
            while self._todo and not self._halt.is_set():
                self._check(self._todo.pop(0))

    def _read(self) -> None:
        try:
            with open(self.log, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        self._offset += len(data)
        *lines, self._rest = (self._rest + data.decode("utf-8", "replace")).split("\n")
        for line in lines:
            written = self.reader.feed(line)
            if written and self.stopped_at is None and self._sampled(written):
                self._todo.append(written)

    def _sampled(self, name: str) -> bool:
        """The first objects of each source language (CMake names an object after its source:
        ``x.cpp.o``), then one in ``SAMPLE_EVERY``."""
        language = Path(name).with_suffix("").suffix
        self._seen[language] = self._seen.get(language, 0) + 1
        return self._seen[language] <= SAMPLE_FIRST or len(self.reader.remote) % SAMPLE_EVERY == 0

    def _check(self, name: str) -> None:
        path = self.build_dir / name
        try:
            remote = sha256_file(path)
        except OSError:
            return  # not there (a nested project's object, or removed): nothing to compare
        fresh = recompile(self.build_dir, name, cached=remote, expected=remote, launchers=self.launchers,
                          ninja=self.ninja, env=self.env)
        result = Checked(name=name, remote=remote, local=fresh.fresh, detail=fresh.detail)
        self.checked.append(result)
        if fresh.fresh is not None and not result.same and self.stopped_at is None:
            self.stopped_at = len(self.reader.remote)
            self.on_mismatch(result)

    def stop(self) -> list[str]:
        """Ends the watch (the pending checks are done first). Returns the objects to compile
        again here: every remote one written before distribution stopped (none when it never did)."""
        self._halt.set()
        self._thread.join()
        self._read()
        for name in self._todo if self.stopped_at is None else []:
            self._check(name)
        self._todo = []
        if self.stopped_at is None:
            return []
        same = {c.name for c in self.checked if c.same}
        return [n for n in self.reader.remote if n not in same] + self.reader.unclear


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
