"""``verify-run``: compare this recipe's new build with a working one and give a verdict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from onebit_build.building.manifest import load_manifest
from onebit_build.commands import Command
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError
from onebit_build.core.project import ProjectRoot
from onebit_build.core.workspace import Workspace
from onebit_build.job.model import Job, Needs, load_for, open_job
from onebit_build.job.run import run
from onebit_build.job.smoke import resolve_model, with_runtime_env
from onebit_build.job.stage import Stage
from onebit_build.job.verify import references_dir
from onebit_build.options import Options
from onebit_build.running.bench import BenchLock, load_prompts, parse_config
from onebit_build.verification import run as vrun
from onebit_build.verification.speed import check_rounds
from onebit_build.verification.working import ResolvedBuild, resolve_new, resolve_working, same_build


@dataclass(frozen=True, kw_only=True)
class Asked:
    """What the user gave, checked before anything is built or written."""

    working: ResolvedBuild
    rounds: int
    tolerance: float
    budget_s: float  # seconds of speed rounds per device before 'too noisy'

    new_args: tuple[str, ...]
    working_args: tuple[str, ...]
    lock: Path


def check_request(opts: Options, recipe) -> Asked:
    """A bad working path, a build of another recipe, too few rounds, --adopt without
    artifacts: one line each, before anything runs."""
    vo = opts.verify_run
    assert vo is not None  # the parser makes it for verify-run
    working = resolve_working(vo.working, recipe=recipe.name)
    rounds = vo.rounds or recipe.verification.rounds
    check_rounds(rounds)
    if vo.adopt and not recipe.smoke.prompts and not any(c.artifacts for c in recipe.components):
        raise ConfigError(f"--adopt: recipe {recipe.name} collects no kernel artifacts and has "
                          "no smoke prompt to measure"
                          " speed on", hint="drop --adopt; references exist for recipes with an 'artifacts:' collector"
                                            " or smoke prompts")
    return Asked(working=working, rounds=rounds, tolerance=vo.tolerance or recipe.verification.tolerance,
                 budget_s=vo.budget_s or recipe.verification.budget_s,
                 new_args=parse_config(f"new={vo.new_args}").args,
                 working_args=parse_config(f"working={vo.working_args}").args,
                 lock=vo.lock or Workspace(root=opts.workspace).root / "bench.lock")


def verify_run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Everything the user gave is checked first; then, holding the workspace and the bench
    lock, build the recipe, compare, and give the verdict."""
    loaded = load_for(opts, project)
    asked = check_request(opts, loaded[1])
    prompts = load_prompts(project.prompts)
    with open_job(opts, project, Needs(git=True), loaded=loaded) as job:
        with BenchLock(asked.lock, f"onebit-build verify-run {job.recipe.name}", wait_s=opts.verify_run.wait_s):
            ui.result(f"run folder: {job.run_dir}")
            out = compare(job, asked, prompts)
    vrun.print_outcome(out)
    if out.reference is not None and out.adopted.startswith("wrote"):
        rel = out.reference.relative_to(project.path) if out.reference.is_relative_to(project.path) else out.reference
        ui.result(f"  commit it: git add {rel} && git commit -m 'references: {job.recipe.name} "
                  "artifacts for this toolchain'"
                  f" -- {rel}")
    if "adopted " in out.adopted:
        ui.result(f"  commit the speed references too: {project.references / job.recipe.name / 'smoke-speed.json'}")
    return out.verdict.exit_code


def compare(job: Job, asked: Asked, prompts) -> vrun.RunOutcome:
    """Build the recipe (if needed), then compare the new build with the working one."""
    built = run(job, Stage.BUILD).built
    assert built is not None  # a job run up to the build has built
    new = resolve_new(built.manifest, load_manifest(built.manifest))
    if same_build(new, asked.working):
        raise ConfigError(f"--working {job.opts.verify_run.working} is the new build itself ({new.folder})",
                          hint="give the working build to compare with: another folder, a copy, or an install prefix")
    model = resolve_model(job.recipe, job.opts, models_dir=job.workspace.models, log=job.log("model.log"),
                          lock=job.project.models_lock)
    ui.info(f"verify-run: new {new.folder}; working {asked.working.folder} "
            f"({asked.working.given_as}); {asked.rounds} rounds,"
            f" then more until decided, up to {asked.budget_s:g} s per device; "
            f"tolerance ±{asked.tolerance:.0%}; lock {asked.lock}")
    req = vrun.RunRequest(
        recipe=with_runtime_env(job.recipe, job.opts.toolchain_root),
                          new=vrun.Side(role=vrun.NEW, build=new, args=asked.new_args),
        working=vrun.Side(role=vrun.WORKING, build=asked.working, args=asked.working_args), model=model,
                          run_dir=job.run_dir,
        prompts=prompts, rounds=asked.rounds, tolerance=asked.tolerance, budget_s=asked.budget_s,
                          refs_dir=references_dir(job),
        lock=asked.lock, junit=job.opts.junit, adopt=job.opts.verify_run.adopt,
    )
    locks = (("pins.lock", job.pins.lock_path), ("models.lock", job.project.models_lock))
    return vrun.run(req, project_files=tuple((name, f) for name, f in locks if f.is_file()))
