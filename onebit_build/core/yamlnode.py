"""Reading YAML for the project's files: a mapping node that knows its file, key path and
lines, so that every error names the file, the line, the key path and the fix. A key given
twice in one mapping is an error (YAML's loaders keep the last one silently)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from onebit_build.core.errors import ConfigError


class Mapping(dict):
    """A YAML mapping as loaded: a dict that remembers the line of each key (1-based) and its own."""

    line: int = 0
    key_lines: dict[Any, int]


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader, refusing duplicate keys and keeping the lines of keys. On libyaml
    where PyYAML has it (the pure-Python parser took most of the time of 'recipes')."""


def _mapping(loader: StrictLoader, node: yaml.MappingNode) -> Mapping:
    """A mapping whose own keys are each given once. Keys merged in with ``<<: *anchor`` may be
    overridden by the mapping's own keys, as YAML says."""
    out = Mapping()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = out.key_lines.get(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, f"unhashable key {key!r}",
                                                    key_node.start_mark) from None
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (first on line {first})", key_node.start_mark)
        out.key_lines[key] = key_node.start_mark.line + 1
    loader.flatten_mapping(node)  # merged keys first, so that the mapping's own keys win
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines.setdefault(key, key_node.start_mark.line + 1)
    return out


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


class Node:
    """A YAML mapping with its file and key path, for errors that say where."""

    def __init__(self, file: Path, path: str, data: Any):
        self.file = file
        self.path = path
        if not isinstance(data, dict):
            self.fail(f"expected a mapping, found {type(data).__name__}", "write KEY: VALUE pairs")
        self.data: dict[str, Any] = data

    def where(self, key: str | None = None) -> str:
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else key

    def line(self, key: str | None = None) -> int:
        """The line of ``key`` in the file (of this mapping when the key is absent); 0: unknown."""
        lines = getattr(self.data, "key_lines", {})
        return lines.get(key, 0) or getattr(self.data, "line", 0)

    def fail(self, problem: str, fix: str, key: str | None = None) -> None:
        line = self.line(key)
        raise ConfigError(f"{self.file}:{f'{line}:' if line else ''} {self.where(key)}: {problem}", hint=fix)

    def only(self, allowed: Iterable[str]) -> None:
        allowed = set(allowed)
        for key in self.data:
            if key not in allowed:
                self.fail(
                    "unknown key",
                    f"remove it or use one of: {', '.join(sorted(allowed))}",
                    key=str(key),
                )

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def get(self, key: str, kind: type | tuple[type, ...], *, required: bool = True, default: Any = None,
            fix: str = "") -> Any:
        if key not in self.data or self.data[key] is None:
            if required:
                self.fail("missing", fix or f"add {key}", key=key)
            return default
        value = self.data[key]
        if kind is str and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            self.fail(f"expected {names}, found {type(value).__name__} {value!r}",
                      fix or f"give {key} a {names}", key=key)
        return value

    def number(self, key: str, rng: "Range", *, default: float | None = None, required: bool = False) -> Any:
        """A finite number inside ``rng`` (whole when ``rng.whole``); the error names the file,
        the key and the allowed range. ``default`` when the key is absent."""
        value = self.get(key, (int, float), required=required, default=None)
        if value is None:
            return default
        if isinstance(value, bool):
            self.fail(f"expected a number, found {value!r}", f"give {rng.describe()}", key=key)
        if rng.whole and not isinstance(value, int):
            if not (math.isfinite(value) and value == int(value)):
                self.fail(f"{value!r} is not a whole number", f"give {rng.describe()}", key=key)
            value = int(value)
        if not math.isfinite(value) or not rng.holds(value):
            self.fail(f"{value!r} is out of range", f"give {rng.describe()}", key=key)
        return value

    def child(self, key: str, *, required: bool = True) -> "Node | None":
        if not self.has(key):
            if required:
                self.fail("missing", f"add a {key}: mapping", key=key)
            return None
        return Node(self.file, self.where(key), self.data[key])

    def str_list(self, key: str, *, required: bool = True) -> tuple[str, ...]:
        value = self.get(key, list, required=required, default=[])
        out = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                self.fail(f"item {i} must be a string, found {item!r}", "write a list of strings", key=key)
            out.append(str(item))
        return tuple(out)


@dataclass(frozen=True)
class Range:
    """Where a number of a file may lie: ``low < x`` (``low_open``) or ``low <= x``, and
    ``x <= high``; ``unit`` names what it counts, for the message."""

    low: float
    high: float
    unit: str = ""
    whole: bool = False
    low_open: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a finite number"
        low = f"above {self.low:g}" if self.low_open else f"from {self.low:g}"
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind}{unit} {low} up to {self.high:g}"


def load_yaml(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found", hint="check the path or create it") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {what} file is not UTF-8 text (byte {exc.start})",
                          hint="save it as UTF-8") from None
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "given twice" in problem:
            raise ConfigError(f"{path}:{where}: {problem}", hint="keep one of them") from None
        raise ConfigError(f"{path}:{where}: malformed YAML: {problem}", hint="fix the YAML syntax there") from None


def check_schema(node: Node, expected: int) -> None:
    schema = node.get("schema", int, fix=f"add 'schema: {expected}' at the top")
    if schema != expected:
        node.fail(f"schema {schema} is not supported (this version reads schema {expected})",
                  "upgrade onebit-build or convert the file", key="schema")
