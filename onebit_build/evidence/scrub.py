"""What is signed names no machine: the workspace, the project folder and the home folder
become ``${WORKSPACE}``, ``${PROJECT}`` and ``${HOME}`` in every string of a statement, so
that no user name or home path is signed (the host name is never put in at all).

The build key hashes the real paths; :func:`restore` puts a known workspace back to compute
it again (``verify-provenance`` does so for a build folder, whose workspace it knows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

WORKSPACE = "${WORKSPACE}"
PROJECT = "${PROJECT}"
HOME = "${HOME}"
# A root is replaced where a path continues after it or ends: not inside a longer folder name.
_AFTER = r"(?=$|[/\s=;:,\"'])"


@dataclass(frozen=True, kw_only=True)
class Scrubber:
    """Replaces each root folder by its placeholder, the longest root first. Pure."""

    roots: tuple[tuple[str, str], ...]  # (folder, placeholder)

    def text(self, s: str) -> str:
        for root, name in self.roots:
            s = re.sub(re.escape(root) + _AFTER, lambda _m, n=name: n, s)
        return s

    def value(self, v: Any) -> Any:
        """``v`` (JSON-like: dicts, lists, strings) with every string scrubbed; keys too."""
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, Mapping):
            return {self.text(str(k)): self.value(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [self.value(x) for x in v]
        return v


def scrubber(*, workspace: Path | None, project: Path | None = None, home: Path | None = None) -> Scrubber:
    """A scrubber for these folders; ``home`` defaults to the user's. The root folder ``/``
    is never a root to replace."""
    home = Path.home() if home is None else home
    pairs = [(str(p), name) for p, name in ((workspace, WORKSPACE), (project, PROJECT), (home, HOME))
             if p is not None and str(p) not in ("", "/")]
    return Scrubber(roots=tuple(sorted(pairs, key=lambda pair: -len(pair[0]))))


def restore(v: Any, values: Mapping[str, str]) -> Any:
    """``v`` with each placeholder in ``values`` (e.g. ``{WORKSPACE: "/srv/ws"}``) put back. Pure."""
    if isinstance(v, str):
        for name, path in values.items():
            v = v.replace(name, path)
        return v
    if isinstance(v, Mapping):
        return {restore(str(k), values): restore(x, values) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [restore(x, values) for x in v]
    return v
