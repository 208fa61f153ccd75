"""The rows of ``onebit-build recipes``: every recipe of the project checked against the pins,
as ``plan`` checks it, and the rows kept in the user's cache until something they were made
from changes (the code, pins.yaml, pins.lock, a file under recipes/). A listing with nothing
changed then reads one small file and imports neither YAML nor the recipe model.

A recipe that does not load is a row too: named by its file, with the error it gave.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

from onebit_build.core import usercache
from onebit_build.core.errors import ConfigError
from onebit_build.core.project import MAX_YAML_BYTES, ProjectRoot
from onebit_build.core.safepath import read_regular

KIND = "onebit-build-recipe-rows"
CHECKED_WITH = ("yaml", "packaging")  # the libraries that reading a recipe relies on


def rows(project: ProjectRoot, env: Mapping[str, str] = os.environ) -> list[dict[str, Any]]:
    """One row per ``recipes/*.yaml`` in name order: name, backends, description, path and
    error (None for a recipe that loads)."""
    paths = sorted(project.recipes.glob("*.yaml"))
    key = rows_key(project)
    where = cache_file(project, env)
    stored = usercache.read(where, KIND, key)
    found = stored.get("rows") if stored else None
    if not well_formed(found, paths):
        found = checked_rows(project, paths)
        usercache.write(where, KIND, key, {"rows": found})
    return [{**row, "path": str(path)} for row, path in zip(found, paths)]


def cache_file(project: ProjectRoot, env: Mapping[str, str]) -> Path:
    """Where the rows of ``project`` are kept: a file per project folder."""
    return usercache.tool_dir(env) / f"recipes-{usercache.key_of(str(project.path))[:16]}.json"


def rows_key(project: ProjectRoot) -> str:
    """Everything a recipe's check reads: the code and its libraries, the project's folder (an
    error names its files), pins.yaml and pins.lock, each recipe file's content, and which other
    files lie under recipes/ (a recipe names templates there)."""
    parts = [usercache.code_stamp(CHECKED_WITH), str(project.path)]
    parts += [_content(project.pins), _content(project.pins.with_name("pins.lock"))]  # the lock beside the pins
    for folder, dirs, files in os.walk(project.recipes):
        dirs.sort()
        for name in sorted(files + dirs):
            path = Path(folder) / name
            rel = path.relative_to(project.recipes).as_posix()
            parts.append(f"{rel} {_content(path) if path.is_file() else 'not a file'}")
    return usercache.key_of(*parts)


def _content(path: Path) -> str:
    try:
        return hashlib.sha256(read_regular(path, limit=MAX_YAML_BYTES)).hexdigest()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.errno})"


def checked_rows(project: ProjectRoot, paths: list[Path]) -> list[dict[str, Any]]:
    """Each recipe loaded against the pins. An error in pins.yaml or pins.lock stops the
    listing (no recipe can be checked); an error in a recipe becomes its row."""
    from onebit_build.spec.recipe import inside_recipes, load_recipe# YAML and the recipe model: only when not kept
    from onebit_build.job.job import load_locked_pins

    pins = load_locked_pins(project)
    out = []
    for path in paths:
        try:
            r = load_recipe(inside_recipes(path, project.recipes), pins)
        except ConfigError as exc:
            out.append({"name": path.stem, "backends": [], "description": "", "error": str(exc)})
        else:
            out.append({"name": r.name, "backends": list(r.backends), "description": r.description, "error": None})
    return out


def well_formed(found: Any, paths: list[Path]) -> bool:
    """Whether ``found`` (read back from the cache, so not trusted) holds a row of the shape
    :func:`checked_rows` makes for each of ``paths``, named by its file. Pure."""
    if not isinstance(found, list) or len(found) != len(paths):
        return False
    for row, path in zip(found, paths):
        if not isinstance(row, dict) or set(row) != {"name", "backends", "description", "error"}:
            return False
        if row["name"] != path.stem:
            return False
        texts = (row["name"], row["description"], *(row["backends"] if isinstance(row["backends"], list) else [0]))
        if not all(isinstance(t, str) for t in texts) or not isinstance(row["error"], (str, type(None))):
            return False
    return True
