"""``plan``: the whole plan of the recipe (sources, patches, configure commands, outputs,
runtime) without fetching, building or taking the workspace lock."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="plan", help="print the full plan (sources, patches, configure commands, outputs, runtime);"
                  " no network", rank=20, json="print the plan as JSON (schema 1)")


def run(opts: Options, project: ProjectRoot, cmd: Command | None = None) -> int:
    return plan(opts, project)


def resolved_plan(opts: Options, project: ProjectRoot, pins, recipe):
    """The plan of ``recipe`` for these options (what ``plan`` prints and ``doctor`` checks)."""
    from onebit_build.job.plan import plan_of

    return plan_of(opts.settings, project, pins, recipe, opts.ws)


def plan(opts: Options, project: ProjectRoot) -> int:
    """Print the whole plan without fetching, building or taking the workspace lock."""
    from onebit_build.core import ui
    from onebit_build.job.plan import render_plan
    from onebit_build.job.job import load_for

    pins, recipe = load_for(opts.settings, project)
    the_plan = resolved_plan(opts, project, pins, recipe)
    state = built_state(opts, project, recipe.name, pins)
    if opts.json:
        doc = {"kind": "onebit-build-plan", "schema": 1, "project": project.describe(),
               "overrides": [d.render() for d in opts.defines], **plan_doc(the_plan), "built": state}
        ui.answer_json(doc)
    else:
        ui.answer_text([*render_plan(the_plan, project=project.describe()),
                        *(f"override   -D {d.render()}" for d in opts.defines), f"built      {state['summary']}"])
    return 0


def built_state(opts: Options, project: ProjectRoot, recipe: str, pins) -> dict:
    """Whether the workspace already holds an up-to-date build of ``recipe`` (and, if only stale
    ones, why they would be rebuilt). ``-D`` overrides give a build of their own."""
    from onebit_build.housekeeping.inventory import find_builds

    found = [b for b in find_builds(opts.ws, recipes_dir=project.recipes,
                                    patches_dir=project.patches, pins=pins) if b.recipe == recipe]
    fresh = [b for b in found if not b.stale]
    if opts.defines:
        summary = "with -D overrides: a build of its own (see 'onebit-build builds')"
    elif fresh:
        summary = f"up to date: {fresh[-1].folder}"
    elif found:
        summary = f"would rebuild: {', '.join(found[-1].stale)} (since {found[-1].folder.name})"
    else:
        summary = "not built yet in this workspace"
    return {"summary": summary, "up_to_date": [str(b.folder) for b in fresh],
            "stale": [{"folder": str(b.folder), "why": list(b.stale)} for b in found if b.stale]}


def plan_doc(the_plan) -> dict:
    """The plan as plain JSON values (paths and tuples as strings and lists). Pure."""
    from onebit_build.building.cache.compiler import describe

    def plain(value):
        return json.loads(json.dumps(value, default=str))

    return {"recipe": the_plan.recipe.name, "workspace": str(the_plan.workspace),
            "toolchain": plain(asdict(the_plan.toolchain)) if the_plan.toolchain else None,
            "sources": [plain(asdict(s)) for s in the_plan.sources],
            "components": [plain(asdict(c)) for c in the_plan.components],
            "runtime_env": dict(the_plan.runtime_env), "problems": list(the_plan.problems),
            "compiler_cache": describe(the_plan.launcher),
            "shader_cache": the_plan.shader_cache.describe() if the_plan.shader_cache else None,
            "jit_cache": plain(asdict(the_plan.recipe.jit_cache)) if the_plan.recipe.jit_cache else None,
            "binary_key": the_plan.binary_key}
