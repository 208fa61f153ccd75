"""Pins: the exact commit of every source, with its mirrors, loaded from pins.yaml and
validated once; and pins.lock, the full commits of abbreviated pins.

Every error names the file, the key path and the fix. Unknown keys are errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterable
from pathlib import Path

from onebit_build.core.errors import ConfigError
from onebit_build.core.names import is_file_name
from onebit_build.spec.yamlnode import Node, check_schema, load_yaml

PINS_SCHEMA = 1
LOCK_SCHEMA = 1

FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
ABBREV_SHA = re.compile(r"^[0-9a-f]{4,39}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, kw_only=True)
class SdistMirror:
    """A PyPI source distribution that carries a git store holding the pinned commit."""

    package: str
    version: str
    sha256: str
    git_dir: str  # path of the embedded git store inside the unpacked sdist

    @property
    def label(self) -> str:
        return f"pypi-sdist:{self.package}=={self.version}"


@dataclass(frozen=True, kw_only=True)
class Pin:
    name: str
    url: str
    commit: str  # 40 hex, or an abbreviation when ``abbreviated``
    branch: str | None = None
    abbreviated: bool = False
    build_number: str | None = None
    mirrors: tuple[SdistMirror, ...] = ()
    note: str | None = None
    before: str | None = None  # a full SHA the pinned commit must not descend from

    @property
    def resolved(self) -> bool:
        return bool(FULL_SHA.match(self.commit))

    @property
    def short(self) -> str:
        return self.commit[:7]


@dataclass(frozen=True, kw_only=True)
class Pins:
    path: Path
    sources: dict[str, Pin] = field(default_factory=dict)

    @property
    def lock_path(self) -> Path:
        return self.path.with_name("pins.lock")

    def get(self, name: str, *, context: str = "") -> Pin:
        if name not in self.sources:
            raise ConfigError(
                f"{context or self.path}: unknown source {name!r}",
                hint=f"add it to {self.path.name} or use one of: {', '.join(sorted(self.sources))}",
            )
        return self.sources[name]


def load_pins(path: Path) -> Pins:
    path = Path(path).resolve()
    root = Node(path, "", load_yaml(path, "pins"))
    root.only({"schema", "sources"})
    check_schema(root, PINS_SCHEMA)
    sources_node = root.child("sources")
    assert sources_node is not None
    sources: dict[str, Pin] = {}
    for name in sources_node.data:
        name = str(name)
        if not is_file_name(name):
            sources_node.fail("not a valid source name", "use letters, digits, '.', '_' and '-'", key=name)
        node = sources_node.child(name)
        assert node is not None
        sources[name] = _load_pin(name, node)
    if not sources:
        sources_node.fail("no sources", "add at least one source")
    return Pins(path=path, sources=sources)


def _load_pin(name: str, node: Node) -> Pin:
    node.only({"url", "commit", "branch", "abbreviated", "build_number", "mirrors", "note", "before"})
    url = node.get("url", str)
    commit = node.get("commit", str, fix="give the full 40-hex commit SHA").lower()
    abbreviated = node.get("abbreviated", bool, required=False, default=False)
    if not FULL_SHA.match(commit):
        if not ABBREV_SHA.match(commit):
            node.fail(
                f"{commit!r} is not a commit SHA",
                "give the full 40-hex SHA (not a branch or tag name)",
                key="commit",
            )
        if not abbreviated:
            node.fail(
                f"{commit!r} is abbreviated ({len(commit)} of 40 hex digits)",
                "give the full SHA, or add 'abbreviated: true' when only a prefix is known "
                "(it is then resolved once fetched and recorded in pins.lock)",
                key="commit",
            )
    mirrors = tuple(_load_mirror(Node(node.file, node.where(f"mirrors[{i}]"), m))
                    for i, m in enumerate(node.get("mirrors", list, required=False, default=[])))
    bn = node.get("build_number", (str, int), required=False)
    return Pin(
        name=name,
        url=url,
        commit=commit,
        branch=node.get("branch", str, required=False),
        abbreviated=abbreviated,
        build_number=str(bn) if bn is not None else None,
        mirrors=mirrors,
        note=node.get("note", str, required=False),
        before=_before_sha(node),
    )


def _load_mirror(mnode: Node) -> SdistMirror:
    mnode.only({"pypi-sdist", "sha256", "git-dir"})
    spec = mnode.get("pypi-sdist", str, fix="name the sdist as PACKAGE==VERSION")
    if "==" not in spec:
        mnode.fail(f"{spec!r} is not PACKAGE==VERSION", "pin an exact version, e.g. pkg==1.2.3", key="pypi-sdist")
    pkg, ver = (s.strip() for s in spec.split("==", 1))
    sha = mnode.get("sha256", str, fix="record the sdist's sha256").lower()
    if not SHA256_RE.match(sha):
        mnode.fail(f"{sha!r} is not a sha256", "give 64 hex digits", key="sha256")
    git_dir = mnode.get("git-dir", str, fix="give the path of the git store inside the sdist")
    if git_dir.startswith("/") or ".." in Path(git_dir).parts:
        mnode.fail(f"{git_dir!r} must be a relative path inside the sdist", "remove leading / and '..'", key="git-dir")
    return SdistMirror(package=pkg, version=ver, sha256=sha, git_dir=git_dir)


def _before_sha(node: Node) -> str | None:
    before = node.get("before", str, required=False)
    if before is None:
        return None
    before = before.lower()
    if not FULL_SHA.match(before):
        node.fail(f"{before!r} is not a full commit SHA", "give the 40-hex SHA the pin must stay before", key="before")
    return before


# --------------------------------------------------------------------------- lock file


def read_lock(path: Path) -> dict[str, dict[str, str]]:
    """Read pins.lock: ``{name: {"prefix": ..., "commit": ...}}``. A missing file is empty."""
    if not path.exists():
        return {}
    root = Node(path, "", load_yaml(path, "lock"))
    root.only({"schema", "resolved"})
    check_schema(root, LOCK_SCHEMA)
    out: dict[str, dict[str, str]] = {}
    node = root.child("resolved", required=False)
    if node is None:
        return out
    for name in node.data:
        entry = node.child(str(name))
        assert entry is not None
        entry.only({"prefix", "commit"})
        prefix = entry.get("prefix", str).lower()
        commit = entry.get("commit", str).lower()
        if not FULL_SHA.match(commit) or not commit.startswith(prefix):
            entry.fail(f"{commit!r} is not a full SHA starting with {prefix!r}", "run 'onebit-build pins lock' again",
                       key="commit")
        out[str(name)] = {"prefix": prefix, "commit": commit}
    return out


def render_lock(resolved: dict[str, dict[str, str]]) -> str:
    lines = [
        "# Written by 'onebit-build pins lock': the full commits of abbreviated pins.",
        f"schema: {LOCK_SCHEMA}",
        "resolved:",
    ]
    for name in sorted(resolved):
        lines.append(f"  {name}:")
        lines.append(f"    prefix: '{resolved[name]['prefix']}'")
        lines.append(f"    commit: '{resolved[name]['commit']}'")
    if not resolved:
        lines[-1] = "resolved: {}"
    return "\n".join(lines) + "\n"


def apply_lock(pins: Pins, lock: dict[str, dict[str, str]], *, locked: bool) -> Pins:
    """Return pins whose abbreviated commits are replaced by the locked full SHAs.

    With ``locked`` every pin must end up full; otherwise unresolved pins stay abbreviated
    (fetch resolves them)."""
    out: dict[str, Pin] = {}
    for name, pin in pins.sources.items():
        entry = lock.get(name)
        if not pin.resolved and entry and entry["prefix"] == pin.commit:
            pin = replace(pin, commit=entry["commit"])
        out[name] = pin
    done = replace(pins, sources=out)
    if locked:
        check_locked(done, done.sources)
    return done


def check_locked(pins: Pins, names: Iterable[str]) -> None:
    """``--locked``: each pin of ``names`` (those a recipe uses) must be a full SHA, in
    pins.yaml or through pins.lock; a pin no recipe of the run uses is never asked for."""
    missing = sorted(n for n in names if not pins.sources[n].resolved)
    if missing:
        raise ConfigError(
            f"{pins.lock_path}: unresolved pins with --locked: {', '.join(missing)}",
            hint="run 'onebit-build pins lock' (needs the sources or a mirror) and commit pins.lock",
        )
