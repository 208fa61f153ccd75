"""``location``: the path of the recipe's latest llama-server, for scripts (nothing is built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.options import Options

COMMAND = Command(name="location", help="print the path of the recipe's latest llama-server (nothing is built)",
                  rank=51)


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """The latest build's llama-server, for scripts: ``$(onebit-build location)``."""
    from onebit_build.building.manifest import latest_server
    from onebit_build.core import ui
    from onebit_build.job.model import load_pins_and_recipe

    _, recipe = load_pins_and_recipe(project, opts.recipe)
    ui.answer(str(latest_server(opts.ws, recipe.name)))
    return 0
