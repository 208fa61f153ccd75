"""pins.yaml edited in place for a pin move: the commit, the sdist mirror's version and sha256,
the build number; every other line (comments included) stays as it was.

The edit is made on the text, and the result is checked by loading it: the moved pin must say
what the move says and every other pin must load exactly as before (:func:`check_moved`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from packaging.utils import canonicalize_name

from onebit_build.core.errors import ConfigError
from onebit_build.spec.pins import Pin, Pins, SdistMirror


@dataclass(frozen=True, kw_only=True)
class PinMove:
    """Where one pin goes."""

    name: str
    commit: str  # the full SHA it moves to
    sdist: SdistMirror | None = None  # replaces the pin's mirror of the same package
    build_number: str | None = None  # None: left as it is

    def applied_to(self, pin: Pin) -> Pin:
        """The pin after the move. Pure."""
        mirrors = tuple(self.sdist if self.sdist is not None and same_package(m.package, self.sdist.package) else m
                        for m in pin.mirrors)
        return replace(pin, commit=self.commit, abbreviated=False, mirrors=mirrors,
                       build_number=self.build_number if self.build_number is not None else pin.build_number)


def same_package(a: str, b: str) -> bool:
    return canonicalize_name(a) == canonicalize_name(b)


def _cannot(name: str, what: str) -> ConfigError:
    return ConfigError(f"pins.yaml: cannot edit pin {name!r}: {what}",
                       hint="write the pin in block style (one 'key: value' a line), as pins.yaml has it, or move it "
                            "by hand")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block(lines: list[str], name: str) -> tuple[int, int]:
    """The lines of pin ``name`` under ``sources:``: from its key line to the next line as
    far in (or further out). Pure."""
    key = re.compile(rf"^( +)(['\"]?){re.escape(name)}\2:\s*(#.*)?$")
    in_sources, start = False, -1
    for i, line in enumerate(lines):
        if re.match(r"^sources:\s*(#.*)?$", line):
            in_sources = True
            continue
        if in_sources and start < 0 and key.match(line.rstrip("\n")):
            start = i
            break
    if start < 0:
        raise _cannot(name, "no such key under 'sources:'")
    depth = _indent(lines[start])
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > depth):
        end += 1
    return start, end


def _replace_value(line: str, value: str) -> str:
    key = line.split(":", 1)[0]
    return f"{key}: {value}\n"


def _set_key(lines: list[str], start: int, end: int, key: str, value: str | None, name: str) -> None:
    """Set (value) or remove (None) the pin's own ``key:`` line, which must be there once."""
    depth = _indent(lines[start + 1]) if start + 1 < end else 0
    hits = [i for i in range(start + 1, end) if _indent(lines[i]) == depth and re.match(rf"^ *{key}:", lines[i])]
    if len(hits) != 1:
        raise _cannot(name, f"expected one '{key}:' line, found {len(hits)}")
    if value is None:
        del lines[hits[0]]
    else:
        lines[hits[0]] = _replace_value(lines[hits[0]], value)


def _set_sdist(lines: list[str], start: int, end: int, sdist: SdistMirror, name: str) -> None:
    item = re.compile(r"^( *)- +pypi-sdist:\s*(['\"]?)([^'\"#]+?)\2\s*(#.*)?$")
    for i in range(start + 1, end):
        m = item.match(lines[i].rstrip("\n"))
        if not m or not same_package(m.group(3).split("==")[0].strip(), sdist.package):
            continue
        lines[i] = f"{m.group(1)}- pypi-sdist: {sdist.package}=={sdist.version}\n"
        dash = len(m.group(1))
        j = i + 1
        while j < end and (not lines[j].strip() or _indent(lines[j]) > dash):
            if re.match(r"^ *sha256:", lines[j]):
                lines[j] = _replace_value(lines[j], sdist.sha256)
                return
            j += 1
        raise _cannot(name, f"the mirror {sdist.package} has no 'sha256:' line")
    raise _cannot(name, f"no '- pypi-sdist: {sdist.package}==...' mirror")


def moved_text(text: str, move: PinMove, *, had_abbreviated: bool = False) -> str:
    """``text`` (pins.yaml) with ``move`` made. Pure."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    start, end = _block(lines, move.name)
    if move.sdist is not None:
        _set_sdist(lines, start, end, move.sdist, move.name)
    if move.build_number is not None:
        _set_key(lines, start, end, "build_number", move.build_number, move.name)
    if had_abbreviated:
        _set_key(lines, start, end, "abbreviated", None, move.name)
        start, end = _block(lines, move.name)
    _set_key(lines, start, end, "commit", move.commit, move.name)
    return "".join(lines)


def check_moved(before: Pins, after: Pins, moves: tuple[PinMove, ...]) -> None:
    """The edited pins say what the moves say, and nothing else changed. Pure."""
    by_name = {m.name: m for m in moves}
    if set(before.sources) != set(after.sources):
        raise _cannot(", ".join(by_name), "the edit changed which sources there are")
    for name, pin in before.sources.items():
        want = by_name[name].applied_to(pin) if name in by_name else pin
        if after.sources[name] != want:
            raise _cannot(name, "the edited file does not load as the move says")
