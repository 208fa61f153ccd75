"""``location``: the path of the recipe's latest llama-server, for scripts (nothing is built);
with ``--jit-cache``, the folder where the recipe's GPU backend keeps the kernels it compiles."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="location", help="print the path of the recipe's latest llama-server (nothing is built)",
                  rank=51)


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands._oci import USE_HELP

    p.add_argument("--jit-cache", dest="jit_cache", action="store_true",
                   help="print the folder of the recipe's run-time kernel cache instead (e.g. hrx0's "
                        "~/.cache/1bit/hrx-jit, or the folder its variable names)")
    p.add_argument("--allow-unverified", action="store_true", help=USE_HELP)


@dataclass(frozen=True, kw_only=True)
class LocationRequest:
    jit_cache: bool = False
    allow_unverified: bool = False


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """The latest build's llama-server, for scripts: ``$(onebit-build location)``."""
    from pathlib import Path

    from onebit_build.checking.manifest import MANIFEST_NAME, latest_server, load_latest
    from onebit_build.checking.verdict import refuse_not_verified
    from onebit_build.core import ui
    from onebit_build.job.job import load_pins_and_recipe

    req = LocationRequest(jit_cache=opts.args.get("jit_cache") is True,
                          allow_unverified=opts.args.get("allow_unverified") is True)
    _, recipe = load_pins_and_recipe(project, opts.recipe)
    if req.jit_cache:
        ui.answer(str(jit_cache_folder(recipe)))
        return 0
    server = latest_server(opts.ws, recipe.name)
    man = load_latest(opts.ws, recipe.name)
    assert man is not None  # latest_server found it
    refuse_not_verified(Path(man.components[-1].build_dir) / MANIFEST_NAME, allow=req.allow_unverified,
                        what="location", man=man)
    ui.answer(str(server))
    return 0


def jit_cache_folder(recipe):
    """The folder of the recipe's run-time kernel cache; a recipe without one is an error (12)."""
    import os

    from onebit_build.core.errors import NotAvailableError
    from onebit_build.running.jit_cache import cache_folder

    if recipe.jit_cache is None:
        raise NotAvailableError(f"recipe {recipe.name} declares no run-time kernel cache",
                                hint="only a recipe with a 'jit_cache' section has one (e.g. --recipe hrx0)")
    folder, _ = cache_folder(recipe.jit_cache, os.environ)
    if folder is None:
        raise NotAvailableError(f"recipe {recipe.name}: no HOME and no ${recipe.jit_cache.env}, so the backend keeps "
                                "no kernel cache", hint=f"set HOME or ${recipe.jit_cache.env}")
    return folder
