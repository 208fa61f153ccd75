"""The smoke stage: the model, the server on every smoke device, the checks, the report."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from onebit_build.checking.manifest import Manifest, load_manifest, read_manifest
from onebit_build.checking.references import fingerprint, numerics_file, recipe_folder, reference_name, speed_file
from onebit_build.building.toolchain import resolve_toolchain, runtime_env
from onebit_build.spec import model_lock
from onebit_build.core import ui
from onebit_build.spec.recipe import Recipe
from onebit_build.core.errors import ConfigError, IntegrityError, NotAvailableError, SmokeError
from onebit_build.job.job import Job
from onebit_build.job.settings import Settings
from onebit_build.running import model as model_mod
from onebit_build.running import numerics_plot
from onebit_build.running import report as report_mod
from onebit_build.running import smoke as smoke_mod
from onebit_build.running import speed_baseline as speed_ref
from onebit_build.running.devices import CPU_DEVICE, pick_devices
from onebit_build.running import numerics_ref
from onebit_build.running.numerics_run import NumericsPlan
from onebit_build.running.server import list_devices
from onebit_build.running.junit import smoke_cases, write_junit


def with_runtime_env(recipe: Recipe, toolchain_root: str | None) -> Recipe:
    """The recipe with its smoke environment filled in (e.g. the HSA runtime under the toolchain)."""
    tc = resolve_toolchain(recipe.toolchain, override=toolchain_root) if recipe.toolchain else None
    env = runtime_env(recipe, tc)
    for k, v in env:
        ui.detail(f"  smoke environment {k}={v}")
    return replace(recipe, smoke=replace(recipe.smoke, env=env))


def resolve_model(recipe: Recipe | None, opts: Settings, *, models_dir: Path, log: Path,
                  lock: Path | None = None):
    """The model to serve: ``--model``, the user's file the recipe names, or the recipe's
    registry model (downloaded and checked). A recipe model without a pinned sha256 is
    checked against ``lock`` (models.lock), and recorded there on first use."""
    spec = recipe.model if recipe is not None else None
    if opts.model is not None:
        mf = model_mod.local_model(opts.model)
        if spec is not None and spec.sha256:
            if opts.locked and mf.sha256 != spec.sha256:
                raise ConfigError(f"--locked: --model {mf.path} (sha256 {mf.sha256}) is not the recipe's "
                                  f"pinned model {spec.name}",
                                  hint=f"drop --model to use {spec.file}, or drop --locked to serve another model")
            return mf
        return locked_model(spec, mf, locked=opts.locked, lock=lock) if spec is not None else mf
    if spec is None:
        raise NotAvailableError(f"recipe {recipe.name if recipe else opts.recipe} names no model",
                                hint="pass --model PATH")
    if spec.path_env:
        return user_model(spec, locked=opts.locked, lock=lock)
    return model_mod.ensure_model(spec, cache_dir=models_dir, offline=opts.offline, log=log)


def user_model(spec, *, locked: bool = False, lock: Path | None = None):
    """A model the user supplies (not on a registry): the file named by the recipe's
    ``path_env`` variable, checked against the recipe's sha256 when one is pinned, else
    against models.lock."""
    where = os.environ.get(spec.path_env)
    if not where:
        origin = f" from {spec.origin}" if spec.origin else ""
        raise NotAvailableError(
            f"model {spec.name} is supplied by the user and ${spec.path_env} is not set",
            hint=f"download {spec.file}{origin}, then set {spec.path_env}=PATH or pass --model PATH",
        )
    mf = model_mod.local_model(Path(where))
    if spec.sha256 and mf.sha256 != spec.sha256:
        raise IntegrityError(f"{mf.path}: sha256 {mf.sha256} is not the recipe's {spec.sha256}",
                             hint=f"use the file the recipe pins ({spec.file}), "
                                  "or fix the recipe's sha256 deliberately")
    return mf if spec.sha256 else locked_model(spec, mf, locked=locked, lock=lock)


def locked_model(spec, mf, *, locked: bool, lock: Path | None):
    """The recipe's unpinned model ``mf`` checked against models.lock, recorded on first use."""
    if lock is None:
        ui.warn(f"model {spec.name}: the recipe pins no sha256; this run used {mf.sha256}")
        return mf
    entries = model_lock.read_model_lock(lock)
    if model_lock.judge(name=spec.name, sha256=mf.sha256, lock=entries, locked=locked, lock_path=lock) == "record":
        model_lock.record(lock, model_lock.LockedModel(name=spec.name, file=spec.file, sha256=mf.sha256))
        ui.info(f"model {spec.name}: first use; recorded its sha256 {mf.sha256} in {lock} (commit it)")
    else:
        ui.detail(f"model {spec.name}: sha256 {mf.sha256[:16]} is the one {lock.name} records")
    return mf


def speed_references(project, recipe: Recipe):
    """The smoke speed references of ``recipe``: those this project's boxes adopted
    (references/<recipe>/smoke-speed.json), then the recipe's own figures."""
    adopted = speed_ref.load_references(speed_file(recipe_folder(project.references, recipe.name)))
    return (*adopted, *speed_ref.recipe_references(recipe.smoke, recipe.name))


def chat_note(model: model_mod.ModelFile) -> str | None:
    """What a user of the chat endpoint must know about this model (None: nothing)."""
    if model.has_chat_template is False:
        return (f"{model.path.name} has no chat template of its own (a base model): "
                "llama-server answers /v1/chat/completions"
                " through a generic template this model does not follow, so chat replies are junk; use /v1/completions")
    return None


# --------------------------------------------------------------------------- the numerical check


def drawn(result, run_dir: Path) -> str | None:
    """The numerical check's plot drawn into the run folder, and the line that says where (or why not)."""
    if result.numerics is None:
        return None
    plotted = numerics_plot.plot(result.numerics, run_dir / "numerics.png")
    return f"numerics plot: {plotted}" if plotted else f"numerics plot: not drawn ({numerics_plot.HINT})"


def toolchain_name(manifest: Manifest | None) -> str | None:
    """The name the build's toolchain gives its references (None for a server built elsewhere)."""
    return reference_name(fingerprint(manifest)) if manifest is not None else None


def numerics_plan(job: Job, recipe: Recipe, model, manifest: Manifest | None) -> NumericsPlan | None:
    """The evaluation text, the workload and the committed numerical reference of this build's
    toolchain (None with a note when there is none); None when the recipe has no numerical check."""
    spec = recipe.numerics
    if spec is None:
        return None
    try:
        text, text_sha = numerics_ref.eval_text(job.project.smoke, spec.text)
    except ValueError as exc:
        raise ConfigError(f"{recipe.path}: numerics: {exc}", hint="name a file of smoke/eval/") from None
    workload = numerics_ref.NumericsWorkload.of(spec, model_sha256=model.sha256, text_sha256=text_sha,
                                        ctx_size=recipe.smoke.ctx_size, threads=recipe.smoke.threads)
    name = toolchain_name(manifest)
    if name is None:
        return NumericsPlan(text=text, workload=workload, reference=None,
                                      note="a server built elsewhere has no toolchain to find its reference by")
    path = numerics_file(recipe_folder(job.project.references, recipe.name), name)
    if not path.exists():
        rel = numerics_file(recipe_folder(Path("references"), recipe.name), name)  # as the project names it
        return NumericsPlan(text=text, workload=workload, reference=None,
                                      note=f"no numerical reference for this toolchain ({rel}); record one with "
                                           f"'onebit-build --recipe {recipe.name} smoke --write-numerics {rel}'")
    try:
        reference = numerics_ref.load_reference(path)
    except ValueError as exc:
        raise IntegrityError(f"numerical reference: {exc}",
                             hint="restore it from git, or record it again: 'smoke --write-numerics FILE'") from None
    return NumericsPlan(text=text, workload=workload, reference=reference)


def write_numerics(path: Path, result, *, recipe: str, commit: str, toolchain: str | None) -> Path:
    """The smoke's CPU scoring run as a numerical reference at ``path``; SmokeError when the
    run did not score the text (nothing is written then)."""
    failed = [c for c in (*result.checks, *(c for d in result.device_results for c in d.checks)) if not c.passed]
    if failed:
        raise SmokeError(f"no numerical reference written: the build failed smoke ({failed[0].summary})",
                         hint="a reference is recorded only from a build that passes every other check")
    num = result.numerics
    cpu = next((r for r in num.runs if r.device == CPU_DEVICE), None) if num is not None else None
    if cpu is None:
        raise SmokeError("no numerical reference written: the CPU run did not score the text",
                         hint="read the numerics check above and the server log in the run folder")
    if cpu.batches_note:
        raise SmokeError(f"no numerical reference written: {cpu.batches_note}",
                         hint="the server must keep its prompt cache between the scoring requests")
    workload = numerics_ref.NumericsWorkload(**num.workload)
    return numerics_ref.write_reference(path, workload=workload, scored=cpu.scored, recorded={
        "recipe": recipe, "toolchain": toolchain, "build_commit": commit, "device": CPU_DEVICE,
        "date": result.started_at})


# --------------------------------------------------------------------------- smoke


def smoke_devices(recipe: Recipe, server: Path, log_dir: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    """The recipe's devices plus those optional devices this build lists; the others are
    skipped with the recipe's reason."""
    spec = recipe.smoke
    if not spec.optional_devices:
        return spec.devices, {}
    return pick_devices(spec, {"new": list_devices(server, env=spec.env, log=log_dir / "list-devices-optional.log")})


def smoke_stage(job: Job, *, server: Path, manifest_file: Path | None, verified: dict | None = None) -> int:
    """Start the server on every smoke device, check it, write the report."""
    recipe, opts = job.recipe, job.settings
    with ui.stage("model") as st:
        mf = resolve_model(recipe, opts, models_dir=job.workspace.models, log=job.log("model.log"),
                           lock=job.project.models_lock)
        st["note"] = f"{mf.path.name} sha256 {mf.sha256[:16]}"
    src = recipe.server_component.source
    man: Manifest | None = None
    if manifest_file is not None:
        man = load_manifest(manifest_file)
        manifest, commit = man.to_doc(), man.source_commit(src)
        origin = read_manifest(manifest_file).get("binary_cache")  # a build taken from a registry says so
        if isinstance(origin, dict):
            manifest["binary_cache"] = f"{origin.get('accepted')} ({origin.get('detail')}), from {origin.get('from')}"
    else:  # --server: a binary built elsewhere; it must still name the pinned commit
        manifest = None
        commit = job.pins.get(src).commit
    run_recipe = with_runtime_env(recipe, opts.toolchain_root)
    devices, skipped = smoke_devices(run_recipe, server, job.log("logs"))
    for dev, why in skipped.items():
        ui.warn(f"smoke on {dev} skipped: {why}")
    numerics = numerics_plan(job, recipe, mf, man)
    with ui.stage("smoke") as st:
        result = smoke_mod.run_smoke(recipe=run_recipe, server_bin=server, model=mf, run_dir=job.run_dir,
                                     expect_commit=commit[:7], threads=recipe.smoke.threads, devices=devices,
                                     references=speed_references(job.project, recipe), numerics=numerics)
        st["note"] = "all checks passed" if result.passed else "CHECKS FAILED"
        if not result.passed:
            st["status"] = "FAILED"
    chat = chat_note(mf)
    if chat:
        ui.warn(chat)
    plot_line = drawn(result, job.run_dir)
    json_path, md_path = report_mod.write_report(job.run_dir, recipe=recipe, smoke=result, manifest=manifest,
                                                 extra={"verify": verified, "skipped_devices": skipped,
                                                        "chat": chat or "checked"})
    report_mod.print_summary(result)
    if plot_line:
        ui.answer(plot_line)
    if opts.write_numerics is not None:
        written = write_numerics(opts.write_numerics, result, recipe=recipe.name, commit=commit,
                                 toolchain=toolchain_name(man))
        ui.answer(f"numerical reference: {written}")
    ui.answer(f"report: {md_path}")
    if opts.junit is not None:
        ui.answer(f"junit: {write_junit(opts.junit, 'smoke', smoke_cases(result), seconds=result.seconds)}")
    return 0 if result.passed else SmokeError.exit_code
