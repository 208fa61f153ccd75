"""``doctor``: this machine checked for everything the recipe needs, each missing item with
its fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="doctor", help="check this machine for what the recipe needs, each missing item with its fix",
                  rank=22, json="print the checks as JSON (schema 1)")


def arguments(p) -> None:
    p.add_argument("--binary-cache", metavar="oci://REGISTRY/REPO",
                   help="also check this binary cache's registry (default: $ONEBIT_BINARY_CACHE)")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    import os

    from onebit_build.commands._oci import binary_cache_given
    from onebit_build.commands.plan import resolved_plan
    from onebit_build.core import ui
    from onebit_build.core.errors import ToolMissingError
    from onebit_build.doctor.machine import DoctorRequest, render, run_doctor
    from onebit_build.job.job import load_pins_and_recipe

    pins, recipe = load_pins_and_recipe(project, opts.recipe, defines=opts.defines)
    planned = {c.name: c.requested for c in resolved_plan(opts, project, pins, recipe).components}
    report = run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=opts.ws,
                                      mirror_dirs=opts.mirror_dirs, offline=opts.offline,
                                      toolchain_root=opts.toolchain_root, patch_root=project.patches,
                                      planned=planned, cache=opts.compiler_cache,
                                      binary_cache=binary_cache_given(opts.args, os.environ)))
    if opts.json:
        doc = {"kind": "onebit-build-doctor", "schema": 1, "recipe": report.recipe, "ok": report.ok,
               "project": project.describe(),
               "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix} for c in report.checks]}
        ui.answer_json(doc)
    else:
        ui.answer_lines([f"project data: {project.describe()}", *render(report)])
    return 0 if report.ok else ToolMissingError.exit_code
