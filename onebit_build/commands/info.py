"""Commands that read and report, without a workspace lock: the version, the plan, the recipe
list, doctor and the completion script."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import asdict

from typing import TYPE_CHECKING

from onebit_build import __version__
from onebit_build.commands import Command
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, ToolMissingError
from onebit_build.core.project import ProjectRoot, pins_digest

if TYPE_CHECKING:
    from onebit_build.options import Options

# version, recipes and completion answer at once: what only plan and doctor use (the
# planner, the build inventory, the compiler cache, doctor) is imported inside them.


def version(project: ProjectRoot | None, error: ConfigError | None = None) -> int:
    """The tool's version, the pins it would build and where its recipes come from."""
    lines = [f"onebit-build {__version__}"]
    if project is None:
        lines.append(f"recipes: none found ({error})")
    else:
        digest = pins_digest(project)
        lines.append(f"pins.yaml sha256 {digest}" if digest else f"pins.yaml: not readable in {project.path}")
        lines.append(f"recipes from {project.describe()}")
    ui.answer_block("\n".join(lines) + "\n")
    return 0


def resolved_plan(opts: Options, project: ProjectRoot, pins, recipe):
    """The plan of ``recipe`` for these options (what ``plan`` prints and ``doctor`` checks)."""
    from onebit_build.building.cache.compiler import resolve as resolve_cache
    from onebit_build.job.plan import make_plan

    return make_plan(recipe, pins, workspace=opts.ws, patches_dir=project.patches,
                     recipes_dir=project.recipes, mirror_dirs=opts.mirror_dirs, offline=opts.offline,
                     toolchain_root=opts.toolchain_root, launcher=resolve_cache(opts.compiler_cache))


def plan(opts: Options, project: ProjectRoot, cmd: Command | None = None) -> int:
    """Print the whole plan without fetching, building or taking the workspace lock."""
    from onebit_build.job.plan import render_plan
    from onebit_build.job.model import load_for

    pins, recipe = load_for(opts, project)
    the_plan = resolved_plan(opts, project, pins, recipe)
    state = built_state(opts, project, recipe.name, pins)
    if opts.json:
        doc = {"kind": "onebit-build-plan", "schema": 1, "project": project.describe(),
               "overrides": [d.render() for d in opts.defines], **plan_doc(the_plan), "built": state}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        text = render_plan(the_plan, project=project.describe())
        text += "".join(f"override   -D {d.render()}\n" for d in opts.defines)
        ui.answer_text(text + f"built      {state['summary']}\n")
    return 0


def built_state(opts: Options, project: ProjectRoot, recipe: str, pins) -> dict:
    """Whether the workspace already holds an up-to-date build of ``recipe`` (and, if only stale
    ones, why they would be rebuilt). ``-D`` overrides give a build of their own."""
    from onebit_build.building.inventory import find_builds

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
            "shader_cache": the_plan.shader_cache.describe() if the_plan.shader_cache else None}


def recipes(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """The recipe table (or JSON); a recipe that does not load is listed as invalid, its error
    printed, and the exit code is the configuration error's."""
    from onebit_build.commands.recipe_table import rows as recipe_rows

    if opts.names:
        ui.answer_block("".join(f"{p.stem}\n" for p in sorted(project.recipes.glob("*.yaml"))))
        return 0
    rows = recipe_rows(project)
    if opts.json:
        doc = {"project_root": str(project.path), "data_from": project.data_from, "recipes": rows}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        ui.answer_block(recipes_text(rows, project.describe()))
    for r in rows:
        if r["error"] is not None:
            ui.error(r["error"])
    return ConfigError.exit_code if any(r["error"] is not None for r in rows) else 0


def recipes_text(rows: list[dict], where: str) -> str:
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
    return "\n".join(out) + "\n"


def doctor(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    from onebit_build.doctor import DoctorRequest, render, run_doctor
    from onebit_build.job.model import load_pins_and_recipe

    pins, recipe = load_pins_and_recipe(project, opts.recipe, defines=opts.defines)
    planned = {c.name: c.requested for c in resolved_plan(opts, project, pins, recipe).components}
    report = run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=opts.ws,
                                      mirror_dirs=opts.mirror_dirs, offline=opts.offline,
                                      toolchain_root=opts.toolchain_root, patch_root=project.patches,
                                      planned=planned, cache=opts.compiler_cache))
    if opts.json:
        doc = {"kind": "onebit-build-doctor", "schema": 1, "recipe": report.recipe, "ok": report.ok,
               "project": project.describe(),
               "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix} for c in report.checks]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        ui.answer_block(f"project data: {project.describe()}\n" + render(report))
    return 0 if report.ok else ToolMissingError.exit_code


# Where completion gets its values: recipe names from the tool itself, folders and files.
RECIPE_NAMES = "onebit-build recipes --names 2>/dev/null"
DIR_OPTIONS = ("--workspace", "--root", "--mirror-dir", "--toolchain-root", "--prefix", "--run-dir", "--out", "--build")
FILE_OPTIONS = ("--model", "--junit", "--server", "--expect", "--reference", "--write-reference", "--working")


COMPLETION_KIND = "onebit-build-completion"


def completion(opts: Options, project: ProjectRoot | None, cmd: Command) -> int:
    """A completion script for bash, zsh or fish, made by shtab from the parser itself:
    subcommands and their sub-actions, every option, recipe names after --recipe.

    The script is kept in the user's cache, keyed by the shell and the code it is made from
    (this package and shtab); the recipe names are not in it (the shell asks for them with
    'recipes --names' as it completes), so adding a recipe does not change it."""
    from onebit_build.core import usercache

    key = usercache.key_of(usercache.code_stamp(("shtab",)), opts.shell)
    where = usercache.tool_dir(os.environ) / f"completion-{opts.shell}.json"
    kept = usercache.read(where, COMPLETION_KIND, key)
    script = kept.get("script") if kept else None
    if not isinstance(script, str):
        script = completion_script(opts.shell)
        usercache.write(where, COMPLETION_KIND, key, {"script": script})
    sys.stdout.write(script)
    return 0


def completion_script(shell: str) -> str:
    """The script made afresh from the parser."""
    # cli builds the parser and imports this module when the command runs: imported here.
    import shtab  # and shtab only for this command

    from onebit_build.commands.parser import make_parser

    return shtab.complete(completable(make_parser()), shell=shell)


def completable(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with what each option completes to set on its actions (shtab reads it). The
    global options a command also takes stay out of its help, but not out of its completion."""
    import shtab

    for p in _parsers(parser):
        for action in p._actions:
            names = set(action.option_strings)
            if names and action.help == argparse.SUPPRESS:
                action.help = "global option: see onebit-build --help"
            if "--recipe" in names:
                action.complete = shtab.cmd(RECIPE_NAMES)
            elif names & set(DIR_OPTIONS):
                action.complete = shtab.DIRECTORY
            elif names & set(FILE_OPTIONS):
                action.complete = shtab.FILE
    return parser


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)
