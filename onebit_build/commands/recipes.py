"""``recipes``: the recipes, a line each (name, backends, description), or JSON."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="recipes", help="list the recipes: name, backends, description", rank=21,
                  json="print the list as JSON")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--names", action="store_true", help="only the names, one a line (for shell completion)")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """The recipe table (or JSON); a recipe that does not load is listed as invalid, its error
    printed, and the exit code is the configuration error's."""
    from onebit_build.commands.recipe_table import rows as recipe_rows
    from onebit_build.core import ui
    from onebit_build.core.errors import ConfigError

    if opts.args.get("names") is True:
        ui.answer_lines(p.stem for p in sorted(project.recipes.glob("*.yaml")))
        return 0
    rows = recipe_rows(project)
    if opts.json:
        doc = {"project_root": str(project.path), "data_from": project.data_from, "recipes": rows}
        ui.answer_json(doc)
    else:
        ui.answer_lines(recipes_text(rows, project.describe()))
    for r in rows:
        if r["error"] is not None:
            ui.error(r["error"])
    return ConfigError.exit_code if any(r["error"] is not None for r in rows) else 0


def recipes_text(rows: list[dict], where: str) -> list[str]:
    """The table: name, backends, description; a broken recipe says how to see its error. Pure."""
    cells = []
    for r in rows:
        name = r["name"] if r["name"].isprintable() else ascii(r["name"])
        about = (r["description"] if r["error"] is None
                 else f"invalid: run 'onebit-build --recipe {shlex.quote(name)} plan' for the error")
        cells.append((name, ", ".join(r["backends"]), about))
    width = max([len(c[0]) for c in cells] + [6])
    bwidth = max([len(c[1]) for c in cells] + [8])
    out = [f"recipes from {where}", "", f"{'recipe':<{width}}  {'backends':<{bwidth}}  description"]
    out += [f"{name:<{width}}  {backends:<{bwidth}}  {about}" for name, backends, about in cells]
    return out
