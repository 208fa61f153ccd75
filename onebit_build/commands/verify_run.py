"""``verify-run``: compare this recipe's new build with a working one and give a verdict."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.job.job import Job
    from onebit_build.commands._options import Options
    from onebit_build.verify_run import run as vrun
    from onebit_build.verify_run.working import ResolvedBuild

COMMAND = Command(name="verify-run", help="compare this recipe's new build with a working build: kernel artifacts,"
                  " answers, speed and provenance; VERIFIED (exit 0) or NOT VERIFIED (exit 11)", rank=30,
                  until=Stage.BUILD, git=True, takes_model=True)


def arguments(vp: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import fraction, positive_int, run_folder_options, seconds
    from onebit_build.running.bench.settings import DEFAULTS as D

    vp.add_argument("--working", metavar="PATH", required=True,
                    help="the working build: its build folder, its llama-server, an install prefix, or a run folder "
                         "holding build-manifest.json")
    vp.add_argument("--adopt", action="store_true",
                    help="when the artifacts agree, record the working build's as the reference in "
                         "references/<recipe>/ (named after the toolchain); and measure the working build with the "
                         "smoke workload, adopting those speeds as this box's smoke references "
                         "(references/<recipe>/smoke-speed.json) where none of that workload exists")
    vp.add_argument("--rounds", type=positive_int, metavar="N",
                    help="interleaved speed rounds per device before the first look (default: the recipe's, 5; at least"
                         " 5); then one more at a time until the speed is decided or the budget is spent")
    vp.add_argument("--speed-budget", type=seconds, metavar="SECONDS",
                    help="seconds of speed rounds per device before 'too noisy' is the answer (default: the recipe's"
                         " verification.budget_s, 900)")
    vp.add_argument("--tolerance", type=fraction, metavar="FRACTION",
                    help="speed 'on par' within this fraction (default: the recipe's, 0.03)")
    vp.add_argument("--decode-tokens", type=positive_int, metavar="N",
                    help=f"tokens generated per timed request of the speed rounds (default {D.decode_tokens};"
                         " 16 to 1024)")
    vp.add_argument("--no-speed", action="store_true",
                    help="run no speed rounds (for machines whose timings mean nothing, such as shared CI"
                         " runners): artifacts, answers and provenance are still checked; the verdict says speed"
                         " was not measured")
    vp.add_argument("--new-args", metavar="ARGS",
                    help="extra llama-server arguments for the new build's servers (the report names them)")
    vp.add_argument("--working-args", metavar="ARGS",
                    help="extra llama-server arguments for the working build's servers")
    vp.add_argument("--lock", metavar="FILE", dest="bench_lock",
                    help="the bench lock file (default: bench.lock in the workspace)")
    vp.add_argument("--wait", metavar="SECONDS", type=float, nargs="?", const=D.lock_wait_s, default=0.0,
                    help="when a benchmark holds the lock, wait for it (default: fail at once; "
                         "--wait alone: up to an hour)")
    run_folder_options(vp, junit=True)


@dataclass(frozen=True, kw_only=True)
class VerifyRunFlags:
    """``verify-run``: the working build to compare with, and how (None: the recipe's)."""

    working: Path
    adopt: bool = False
    rounds: int | None = None  # default: the recipe's verification.rounds
    tolerance: float | None = None  # default: the recipe's verification.tolerance
    budget_s: float | None = None  # --speed-budget; default: the recipe's verification.budget_s
    decode_tokens: int | None = None  # --decode-tokens; default: the bench's
    no_speed: bool = False  # --no-speed: no speed rounds, the speed part is not judged
    new_args: str = ""  # extra llama-server arguments for the new build's servers
    working_args: str = ""
    lock: Path | None = None
    wait_s: float = 0.0


def options(args: Mapping[str, Any]) -> VerifyRunFlags:
    """``verify-run``'s own options as given, their paths checked before any work (what they
    mean for the recipe is checked by :func:`check_request`)."""
    from onebit_build.commands._options import check_path_length, file_to_write

    get = args.get
    return VerifyRunFlags(
        working=check_path_length("--working", Path(get("working")).expanduser()), adopt=bool(get("adopt")),
        rounds=get("rounds"), tolerance=get("tolerance"), budget_s=get("speed_budget"),
        decode_tokens=get("decode_tokens"), no_speed=bool(get("no_speed")),
        new_args=get("new_args") or "", working_args=get("working_args") or "",
        lock=file_to_write(get("bench_lock"), "--lock"),
        wait_s=max(0.0, get("wait") or 0.0),
    )


@dataclass(frozen=True, kw_only=True)
class VerifyRunAsked:
    """What the user gave, checked before anything is built or written."""

    working: ResolvedBuild
    rounds: int
    tolerance: float
    budget_s: float  # seconds of speed rounds per device before 'too noisy'
    decode_tokens: int  # tokens generated per timed request
    measure_speed: bool  # False: --no-speed

    new_args: tuple[str, ...]
    working_args: tuple[str, ...]
    lock: Path


def check_request(opts: Options, recipe) -> VerifyRunAsked:
    """A bad working path, a build of another recipe, too few rounds, --adopt without
    artifacts, speed options with --no-speed: one line each, before anything runs."""
    from onebit_build.core.errors import ConfigError
    from onebit_build.running.bench import parse_config
    from onebit_build.running.bench.settings import DEFAULTS as BENCH_DEFAULTS
    from onebit_build.verify_run.speed import check_rounds
    from onebit_build.verify_run.working import resolve_working

    vo = opts.own
    working = resolve_working(vo.working, recipe=recipe.name)
    rounds = vo.rounds or recipe.verification.rounds
    check_rounds(rounds)
    check_speed_options(vo)
    artifacts = any(c.artifacts for c in recipe.components)
    if vo.adopt and not artifacts and (vo.no_speed or not recipe.smoke.prompts):
        why = "--no-speed adopts no speed" if vo.no_speed else "it has no smoke prompt to measure speed on"
        raise ConfigError(f"--adopt: recipe {recipe.name} collects no kernel artifacts and {why}",
                          hint="drop --adopt; references exist for recipes with an 'artifacts:' collector"
                               " or smoke prompts")
    return VerifyRunAsked(working=working, rounds=rounds, tolerance=vo.tolerance or recipe.verification.tolerance,
                 budget_s=vo.budget_s or recipe.verification.budget_s,
                 decode_tokens=vo.decode_tokens or BENCH_DEFAULTS.decode_tokens, measure_speed=not vo.no_speed,
                 new_args=parse_config(f"new={vo.new_args}").args,
                 working_args=parse_config(f"working={vo.working_args}").args,
                 lock=vo.lock or opts.ws.root / "bench.lock")


def check_speed_options(vo: VerifyRunFlags) -> None:
    """--no-speed with an option that only shapes the speed rounds is refused (it would do
    nothing); a number of decode tokens out of range too."""
    from onebit_build.core.errors import ConfigError
    from onebit_build.verify_run.speed_rounds import DECODE_MAX_TOKENS, DECODE_MIN_TOKENS

    if vo.no_speed:
        given = [name for name, value in (("--rounds", vo.rounds), ("--speed-budget", vo.budget_s),
                                          ("--tolerance", vo.tolerance), ("--decode-tokens", vo.decode_tokens))
                 if value is not None]
        if given:
            raise ConfigError(f"--no-speed runs no speed rounds, so {' and '.join(given)} would do nothing",
                              hint=f"drop {' '.join(given)}, or drop --no-speed to measure speed")
    n = vo.decode_tokens
    if n is not None and not DECODE_MIN_TOKENS <= n <= DECODE_MAX_TOKENS:
        span = f"{DECODE_MIN_TOKENS} to {DECODE_MAX_TOKENS}"
        raise ConfigError(f"--decode-tokens {n}: a speed round needs {span} tokens per request",
                          hint=f"give --decode-tokens {span}")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Everything the user gave is checked first; then, holding the workspace and the bench
    lock, build the recipe, compare, and give the verdict."""
    from onebit_build.checking.references import speed_file
    from onebit_build.core import ui
    from onebit_build.job.job import Needs, load_for, open_job
    from onebit_build.running.bench import BenchLock, load_prompts
    from onebit_build.verify_run import run as vrun

    loaded = load_for(opts.settings, project)
    asked = check_request(opts, loaded[1])
    prompts = load_prompts(project.prompts)
    with open_job(opts.settings, project, Needs(git=True), label=opts.label, loaded=loaded) as job:
        with BenchLock(asked.lock, f"onebit-build verify-run {job.recipe.name}", wait_s=opts.own.wait_s):
            ui.result(f"run folder: {job.run_dir}")
            out = compare(job, opts, asked, prompts)
    vrun.print_outcome(out)
    if out.reference is not None and out.adopted.startswith("wrote"):
        rel = out.reference.relative_to(project.path) if out.reference.is_relative_to(project.path) else out.reference
        ui.result(f"  commit it: git add {rel} && git commit -m 'references: {job.recipe.name} "
                  "artifacts for this toolchain'"
                  f" -- {rel}")
    if "adopted " in out.adopted:
        ui.result(f"  commit the speed references too: {speed_file(job.references)}")
    return out.verdict.exit_code


def numerics_text(job: Job) -> str | None:
    """The recipe's evaluation text for the numerical comparison (None: it has no numerical check)."""
    from onebit_build.core.errors import ConfigError
    from onebit_build.running.numerics_ref import eval_text

    spec = job.recipe.numerics
    if spec is None:
        return None
    try:
        return eval_text(job.project.smoke, spec.text)[0]
    except ValueError as exc:
        raise ConfigError(f"{job.recipe.path}: numerics: {exc}", hint="name a file of smoke/eval/") from None


def compare(job: Job, opts: Options, asked: VerifyRunAsked, prompts) -> vrun.RunOutcome:
    """Build the recipe (if needed), then compare the new build with the working one."""
    import os
    from dataclasses import replace

    from onebit_build.checking.manifest import load_manifest
    from onebit_build.core import ui
    from onebit_build.core.errors import ConfigError
    from onebit_build.evidence.keys import signing_key_from
    from onebit_build.evidence.scrub import scrubber
    from onebit_build.job.run import run as run_job
    from onebit_build.job.smoke import resolve_model, with_runtime_env
    from onebit_build.verify_run import run as vrun
    from onebit_build.verify_run import request as vreq
    from onebit_build.verify_run.working import resolve_new, same_build

    built = run_job(job, Stage.BUILD).built
    assert built is not None  # a job run up to the build has built
    new = resolve_new(built.manifest, load_manifest(built.manifest))
    if same_build(new, asked.working):
        raise ConfigError(f"--working {opts.own.working} is the new build itself ({new.folder})",
                          hint="give the working build to compare with: another folder, a copy, or an install prefix")
    model = resolve_model(job.recipe, job.settings, models_dir=job.workspace.models, log=job.log("model.log"),
                          lock=job.project.models_lock)
    how = (f"{asked.rounds} rounds of {asked.decode_tokens} decode tokens a prompt, then more until decided, up to"
           f" {asked.budget_s:g} s per device; tolerance ±{asked.tolerance:.0%}" if asked.measure_speed
           else "speed not measured (--no-speed)")
    ui.info(f"verify-run: new {new.folder}; working {asked.working.folder} ({asked.working.given_as}); {how};"
            f" lock {asked.lock}")
    req = vreq.RunRequest(
        recipe=with_runtime_env(job.recipe, job.settings.toolchain_root),
        new=vreq.Side(role=vreq.NEW, build=new, args=asked.new_args),
        working=vreq.Side(role=vreq.WORKING, build=asked.working, args=asked.working_args), model=model,
        run_dir=job.run_dir, prompts=prompts, rounds=asked.rounds, tolerance=asked.tolerance, budget_s=asked.budget_s,
        refs_dir=job.references,
        lock=asked.lock, junit=opts.junit, adopt=opts.own.adopt, decode_tokens=asked.decode_tokens,
        measure_speed=asked.measure_speed, signing_key=signing_key_from(job.settings.signing_key, os.environ),
        scrub=scrubber(workspace=job.workspace.root, project=job.project.path),
    )
    req = replace(req, numerics_text=numerics_text(job))
    locks = (("pins.lock", job.pins.lock_path), ("models.lock", job.project.models_lock))
    return vrun.run(req, project_files=tuple((name, f) for name, f in locks if f.is_file()))
