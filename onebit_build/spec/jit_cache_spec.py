"""A recipe's ``jit_cache``: the folder where a GPU backend keeps the kernels it compiles at run
time between processes (ggml-hrx's Loom JIT cache). The tool never writes it: ``location
--jit-cache`` names it and ``gc`` lists it (and, asked, removes its entries). Validated at load:
a recipe can only name a folder under the user's home and file patterns that hold a literal
part, so that ``gc`` can never be pointed at anything else."""

from __future__ import annotations

import re
from dataclasses import dataclass

from onebit_build.core.names import relative_inside
from onebit_build.spec.yamlnode import Node

ENV_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
# A file pattern: one path segment of name characters and '*', with at least two literal ones.
ENTRY_RE = re.compile(r"^[A-Za-z0-9_.*-]{1,64}$")


@dataclass(frozen=True, kw_only=True)
class JitCacheSpec:
    env: str  # the variable that names the folder when it is set
    home: str  # the folder, relative to $HOME, when the variable is not set
    entries: tuple[str, ...]  # glob patterns of the files the backend writes there


def entry_problem(pattern: str) -> str | None:
    """Why a pattern cannot name the cache's entries; None when it can. Pure."""
    if not ENTRY_RE.match(pattern) or pattern in (".", ".."):
        return f"{pattern!r} is not one file pattern (letters, digits, '.', '_', '-' and '*')"
    if len(pattern.replace("*", "")) < 2:
        return f"{pattern!r} would match nearly every file"
    return None


def load_jit_cache(root: Node) -> JitCacheSpec | None:
    node = root.child("jit_cache", required=False)
    if node is None:
        return None
    node.only({"env", "home", "entries"})
    env = node.get("env", str)
    if not ENV_NAME_RE.match(env):
        node.fail(f"env {env!r} is not a variable name", "use capitals, digits and '_'", key="env")
    home = node.get("home", str)
    if home.startswith("/") or home.strip("./") == "" or not relative_inside(home):
        node.fail(f"home {home!r} is not a folder inside the home folder", "e.g. .cache/1bit/hrx-jit", key="home")
    entries = node.str_list("entries")
    for pattern in entries:
        problem = entry_problem(pattern)
        if problem:
            node.fail(problem, "e.g. '*.bin'", key="entries")
    if not entries:
        node.fail("no entries", "list the file patterns the backend writes, e.g. '*.bin'", key="entries")
    return JitCacheSpec(env=env, home=home, entries=entries)
