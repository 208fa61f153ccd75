"""Reading YAML for the project's files: a mapping node that knows its file, key path and
lines, so that every error names the file, the line, the key path and the fix. A key given
twice in one mapping is an error (YAML's loaders keep the last one silently)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml

from onebit_build.core.errors import ConfigError
from onebit_build.core.project import MAX_YAML_BYTES
from onebit_build.core.safepath import NotRegularFile, TooLarge, read_regular

# How much larger than the file's own text the values may grow through aliases (``*name``),
# counted in characters of scalars and in nodes: the project's files use a few aliases of
# a few lines; an alias bomb (aliases of aliases) would grow to gigabytes.
ALIAS_ROOM = 1 << 16
# How many characters of a value an error message quotes.
SHOWN = 60
# A key an error message names as it is written; any other (a line of a file that is not
# ours, read as a key) is named by its line only.
KEY_NAME = re.compile(r"[\w.-]{1,60}|[\w.-]+\[\d+\]")


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
            raise yaml.constructor.ConstructorError(None, None, f"unhashable key {shown(key)}",
                                                    key_node.start_mark) from None
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {shown(key)} is given twice (first on line {first})", key_node.start_mark)
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
        self.data: dict[str, Any] = data if isinstance(data, dict) else {}
        if not isinstance(data, dict):
            found = "an empty file" if data is None and not path else kind_of(data)
            self.fail(f"expected a mapping, found {found}", "write KEY: VALUE pairs")

    def where(self, key: str | None = None) -> str:
        if key is None:
            return self.path or "(top level)"
        key = key if KEY_NAME.fullmatch(key) else "(a key that is no name)"  # a file not ours: never a whole line
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
            self.fail(f"expected {names}, found {type(value).__name__} {shown(value)}",
                      fix or f"give {key} a {names}", key=key)
        return value

    def number(self, key: str, rng: "Range", *, default: float | None = None, required: bool = False) -> Any:
        """A finite number inside ``rng`` (whole when ``rng.whole``); the error names the file,
        the key and the allowed range. ``default`` when the key is absent."""
        value = self.get(key, (int, float), required=required, default=None)
        if value is None:
            return default
        if isinstance(value, bool):
            self.fail(f"expected a number, found {shown(value)}", f"give {rng.describe()}", key=key)
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
                self.fail(f"item {i} must be a string, found {shown(item)}", "write a list of strings", key=key)
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


def shown(value: Any) -> str:
    """``value`` as an error message quotes it: its repr, cut to :data:`SHOWN` characters (a
    value of a file may be long, or an alias of aliases). Pure."""
    import reprlib

    short = reprlib.Repr()
    short.maxstring = short.maxother = SHOWN
    short.maxlist = short.maxdict = short.maxtuple = short.maxset = 4
    short.maxlevel = 2
    text = short.repr(value)
    return text if len(text) <= SHOWN + 8 else text[:SHOWN] + "..."


def kind_of(value: Any) -> str:
    """What a YAML value is, in words, without quoting it (for a file that is not ours). Pure."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a text"
    return "nothing" if value is None else f"a {type(value).__name__}"


def load_yaml(path: Path, what: str) -> Any:
    """The data of the YAML file at ``path``: read only when it is a regular file (never
    blocking on a FIFO), its aliases bounded (:data:`ALIAS_ROOM`), duplicate keys refused. Every
    failure is a ConfigError of one line naming the file."""
    try:
        text = read_regular(path, limit=MAX_YAML_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found", hint="check the path or create it") from None
    except NotRegularFile as exc:
        raise ConfigError(f"{path}: {what} file is {exc.kind}, not a regular file",
                          hint="replace it with a YAML file") from None
    except TooLarge as exc:
        raise ConfigError(f"{path}: {what} file {exc.strerror}",
                          hint="give a YAML file of this project's size") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {what} file is not UTF-8 text (byte {exc.start})",
                          hint="save it as UTF-8") from None
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded_size(node, {}) > len(text) + ALIAS_ROOM:
            raise ConfigError(f"{path}: its aliases (*name) expand to more than {ALIAS_ROOM} characters beyond"
                              " the file's own text", hint="write the values out, or refer to an anchor less often")
        return None if node is None else loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{path}: an alias refers to the value that holds it, or the nesting is too deep",
                          hint="write the values out") from None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    finally:
        loader.dispose()


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Characters of scalars plus nodes, counting a node reached through an alias at every
    place it is used: what the loaded data will hold. Linear in the file (each node once)."""
    known = sizes.get(id(node))
    if known is not None:
        if known < 0:
            raise RecursionError("an alias inside its own anchor")
        return known
    sizes[id(node)] = -1
    if isinstance(node, yaml.ScalarNode):
        size = 1 + len(node.value)
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, sizes) for item in node.value)
    else:
        size = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    sizes[id(node)] = size
    return size


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error as one line: the problem and where (PyYAML's own text spans several lines,
    quoting the context of the file). Pure."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    return where + (getattr(exc, "problem", None) or str(exc).splitlines()[0])


def _yaml_error(path: Path, exc: yaml.YAMLError) -> ConfigError:
    """PyYAML's error as one line: the place and the problem, without its quoted context."""
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if "given twice" in problem:
        return ConfigError(f"{path}:{where}: {problem}", hint="keep one of them")
    return ConfigError(f"{path}:{where}: malformed YAML: {problem}", hint="fix the YAML syntax there")


def check_schema(node: Node, expected: int) -> None:
    schema = node.get("schema", int, fix=f"add 'schema: {expected}' at the top")
    if schema != expected:
        node.fail(f"schema {schema} is not supported (this version reads schema {expected})",
                  "upgrade onebit-build or convert the file", key="schema")
