"""The jobs the commands run, from options to exit code: load the context, then fetch, patch,
build, verify and smoke in order. ``cli`` parses arguments; ``pipeline`` holds the build
stages; this module decides which of them a command runs and what each one reports.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from onebit_build import pipeline
from onebit_build.building.compiler_cache import NO_LAUNCHER
from onebit_build.core import model_lock, ui
from onebit_build.core.config import Recipe, find_recipe, load_recipe
from onebit_build.core.pins import Pins, apply_lock, load_pins, read_lock
from onebit_build.core.gitops import Git
from onebit_build.core.errors import ConfigError, IntegrityError, NotAvailableError, SmokeError, VerifyError
from onebit_build.core.project import ProjectRoot
from onebit_build.core.workspace import Workspace
from onebit_build.options import Define, Options


# --------------------------------------------------------------------------- loading


def recipe_file(project: ProjectRoot, name_or_path: str) -> Path:
    """The recipe file ``--recipe`` names: a recipe of the project, or a file of the user's."""
    from onebit_build.options import recipe_is_file

    if recipe_is_file(name_or_path):
        path = Path(name_or_path).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"--recipe {name_or_path}: no such file", hint="give a recipe YAML file, or a name from 'onebit-build recipes'")
        return path
    return find_recipe(project.recipes, name_or_path)


def load_pins_and_recipe(project: ProjectRoot, opts: Options, *, locked: bool | None = None) -> tuple[Pins, Recipe]:
    """pins.yaml with pins.lock applied, and the chosen recipe with the ``-D`` overrides."""
    pins = load_pins(project.pins)
    pins = apply_lock(pins, read_lock(pins.lock_path), locked=opts.locked if locked is None else locked)
    recipe = load_recipe(recipe_file(project, opts.recipe), pins)
    return pins, with_defines(recipe, opts.defines)


def with_defines(recipe: Recipe, defines: tuple[Define, ...]) -> Recipe:
    """The recipe with ``-D`` overrides: each replaces or adds a define of one component (the
    one that builds llama-server unless the override names another). Pure."""
    if not defines:
        return recipe
    names = [c.name for c in recipe.components]
    comps = {c.name: c for c in recipe.components}
    for d in defines:
        target = d.component or recipe.server_component.name
        if target not in comps:
            raise ConfigError(f"-D {d.render()}: recipe {recipe.name} has no component {target!r}", hint=f"use one of: {', '.join(names)}")
        comp = comps[target]
        kept = tuple((k, v) for k, v in comp.defines if k != d.name)
        comps[target] = replace(comp, defines=(*kept, (d.name, d.value)))
    return replace(recipe, components=tuple(comps[n] for n in names))


def make_context(project: ProjectRoot, opts: Options, run_dir: Path) -> pipeline.Context:
    return pipeline.Context(
        project=project, workspace=Workspace(root=opts.workspace), recipe_name=opts.recipe, run_dir=run_dir, offline=opts.offline, locked=opts.locked,
        mirror_dirs=opts.mirror_dirs, jobs=opts.jobs, toolchain_root=opts.toolchain_root,
        overrides=tuple(d.render() for d in opts.defines), compiler_cache=opts.compiler_cache,
    )


def with_runtime_env(recipe: Recipe, toolchain_root: str | None) -> Recipe:
    """The recipe with its smoke environment filled in (e.g. the HSA runtime under the toolchain)."""
    from onebit_build.building.plan import resolve_toolchain, runtime_env

    tc = resolve_toolchain(recipe.toolchain, override=toolchain_root) if recipe.toolchain else None
    env = runtime_env(recipe, tc)
    for k, v in env:
        ui.detail(f"  smoke environment {k}={v}")
    return replace(recipe, smoke=replace(recipe.smoke, env=env))


# --------------------------------------------------------------------------- the model


def resolve_model(recipe: Recipe | None, opts: Options, *, models_dir: Path, log: Path, lock: Path | None = None):
    """The model to serve: ``--model``, the user's file the recipe names, or the recipe's
    registry model (downloaded and checked). A recipe model without a pinned sha256 is
    checked against ``lock`` (models.lock), and recorded there on first use."""
    from onebit_build.running import model as model_mod

    spec = recipe.model if recipe is not None else None
    if opts.model is not None:
        mf = model_mod.local_model(opts.model)
        if spec is not None and spec.sha256:
            if opts.locked and mf.sha256 != spec.sha256:
                raise ConfigError(f"--locked: --model {mf.path} (sha256 {mf.sha256}) is not the recipe's pinned model {spec.name}",
                                  hint=f"drop --model to use {spec.file}, or drop --locked to serve another model")
            return mf
        return locked_model(spec, mf, locked=opts.locked, lock=lock) if spec is not None else mf
    if spec is None:
        raise NotAvailableError(f"recipe {recipe.name if recipe else opts.recipe} names no model", hint="pass --model PATH")
    if spec.path_env:
        return user_model(spec, locked=opts.locked, lock=lock)
    return model_mod.ensure_model(spec, cache_dir=models_dir, offline=opts.offline, log=log)


def user_model(spec, *, locked: bool = False, lock: Path | None = None):
    """A model the user supplies (not on a registry): the file named by the recipe's
    ``path_env`` variable, checked against the recipe's sha256 when one is pinned, else
    against models.lock."""
    from onebit_build.running import model as model_mod

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
                             hint=f"use the file the recipe pins ({spec.file}), or fix the recipe's sha256 deliberately")
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


def speed_references(project: ProjectRoot, recipe: Recipe):
    """The smoke speed references of ``recipe``: those this project's boxes adopted
    (references/<recipe>/smoke-speed.json), then the recipe's own figures."""
    from onebit_build.running import speed_ref  # the smoke stage's module, loaded only when smoke runs

    adopted = speed_ref.load_references(project.references / recipe.name / speed_ref.REF_FILE)
    return (*adopted, *speed_ref.recipe_references(recipe.smoke, recipe.name))


def chat_note(model: Path) -> str | None:
    """What a user of the chat endpoint must know about this model (None: nothing)."""
    from onebit_build.running.model import has_chat_template

    if has_chat_template(model) is False:
        return (f"{model.name} has no chat template of its own (a base model): llama-server answers /v1/chat/completions"
                " through a generic template this model does not follow, so chat replies are junk; use /v1/completions")
    return None


# --------------------------------------------------------------------------- the job


@dataclass(frozen=True, kw_only=True)
class Built:
    """What the build part of a job produced."""

    pins: Pins
    recipe: Recipe
    fetched: dict
    trees: dict
    builds: list
    manifest: Path


def run_job(ctx: pipeline.Context, opts: Options) -> int:
    """fetch, patch, build, then verify and/or smoke as the command asks."""
    t_start = time.monotonic()
    pins, recipe = load_pins_and_recipe(ctx.project, opts)
    if opts.command == "smoke" and opts.server is not None:
        return smoke_stage(ctx, recipe, server=opts.server, manifest_file=None, opts=opts)
    built = build_part(ctx, opts, pins, recipe)
    if built is None:
        return 0
    if opts.command == "build":
        ui.result(f"done in {time.monotonic() - t_start:.1f} s; logs: {ctx.run_dir}")
        return 0
    if opts.command == "verify":
        return verify_command(ctx, built, opts)
    verified = verify_stage(ctx, recipe, built.manifest) if opts.command == "all" else None
    return smoke_stage(ctx, recipe, server=server_of(built.builds, recipe), manifest_file=built.manifest, opts=opts, verified=verified)


def build_part(ctx: pipeline.Context, opts: Options, pins: Pins, recipe: Recipe) -> Built | None:
    """Fetch, patch and build as far as the command goes; None when it stops before the build."""
    with ui.stage("fetch") as st:
        fetched = pipeline.run_fetch(ctx, pins, pipeline.recipe_sources(recipe))
        st["note"] = ", ".join(f"{n}@{f.commit[:12]} ({f.mirror_used.split(':')[0]})" for n, f in fetched.items())
    if opts.command == "fetch":
        return None
    with ui.stage("patch") as st:
        trees = pipeline.run_patch(ctx, fetched)
        st["note"] = ", ".join(f"{n}: {len(t.patches)} patch(es){' (reused)' if t.reused else ''}" for n, t in trees.items())
    if opts.command == "patch":
        for t in trees.values():
            ui.info(f"  {t.source}: {t.path}")
        return None
    with ui.stage("build") as st:
        builds = pipeline.run_build(ctx, pins, recipe, fetched, trees)
        t_manifest = time.monotonic()
        man = pipeline.write_manifests(ctx, recipe, fetched, trees, builds)
        manifest_s = time.monotonic() - t_manifest
        st["note"] = "; ".join(f"{b.component}{' (up to date)' if b.reused else f' built in {b.seconds:.0f} s'}{cache_note(b)}" for b in builds)
        if manifest_s >= 1.0:
            st["note"] += f"; artifacts and manifest in {manifest_s:.0f} s"
    for b in builds:
        for o in b.outputs:
            ui.info(f"  {o.name}: {o.path}  sha256 {o.sha256[:16]}")
    ui.result(f"  manifest: {man}")
    return Built(pins=pins, recipe=recipe, fetched=fetched, trees=trees, builds=builds, manifest=man)


def cache_note(build) -> str:
    """``, 190/192 compiler cache hits`` for a component that compiled through a cache."""
    stats = (build.compiler_cache or {}).get("stats") or {}
    looked = stats.get("hits", 0) + stats.get("misses", 0)
    return f", {stats['hits']}/{looked} compiler cache hits" if looked else ""


def server_of(builds: list, recipe: Recipe) -> Path:
    for b in reversed(builds):
        for o in b.outputs:
            if o.name == "llama-server":
                return o.path
    raise NotAvailableError(f"recipe {recipe.name} builds no llama-server output", hint="add 'llama-server: bin/llama-server' to the component's outputs")


# --------------------------------------------------------------------------- verify


def _print_comparisons(results) -> bool:
    ok = True
    for r in results:
        for line in r.lines():
            ui.info(line if line.startswith("  ") else f"  {line}")
        ok = ok and r.ok
    return ok


def verify_stage(ctx: pipeline.Context, recipe: Recipe, manifest_file: Path) -> dict:
    """Part of the default job: compare with the matching committed reference, if any.
    Returns what the report records; never passes silently."""
    from onebit_build.building.manifest import load_manifest
    from onebit_build.building.verify import find_matching_reference, load_reference, verify_against

    manifest = load_manifest(manifest_file)
    sets = manifest.artifact_sets()
    with ui.stage("verify") as st:
        if not sets:
            st["note"] = "no kernel artifacts in this recipe (nothing to verify)"
            return {"status": "not-applicable", "detail": st["note"]}
        refs_dir = ctx.repo_root / "references" / recipe.name
        ref_path, candidates = find_matching_reference(refs_dir, sets)
        if ref_path is None:
            facts = "; ".join(f"{k}={v}" for s in sets.values() for k, v in s.facts.items() if k in ("glslc", "nvcc", "loom_link"))
            msg = f"UNVERIFIED: no committed reference in {refs_dir} matches this toolchain ({facts}); candidates: {', '.join(candidates) or 'none'}"
            st["note"] = msg
            return {"status": "unverified", "detail": msg}
        results = verify_against(manifest, load_reference(ref_path))
        ok = _print_comparisons(results)
        st["note"] = f"against {ref_path.name}: " + "; ".join(r.summary() for r in results)
    if not ok:
        raise VerifyError(f"kernel artifacts differ from {ref_path}", hint="see the list above; rebuild with the reference's toolchain or update the reference deliberately")
    return {"status": "verified", "reference": str(ref_path), "results": [r.to_dict() for r in results]}


def verify_command(ctx: pipeline.Context, built: Built, opts: Options) -> int:
    """``verify``: write a reference, rebuild and compare, or compare with a reference."""
    from onebit_build.building.manifest import load_manifest
    from onebit_build.building.verify import find_matching_reference, load_reference, verify_against, write_reference

    manifest = load_manifest(built.manifest)
    if opts.verify.write_reference is not None:
        ui.info(f"wrote reference {write_reference(opts.verify.write_reference, manifest)}")
        return 0
    if opts.verify.rebuild:
        root, trees = rebuild_places(ctx.workspace, built.trees, built.recipe)
        with ui.stage("rebuild") as st:
            # Everything compiled again (no compiler cache), from sources at another path.
            builds2 = pipeline.run_build(ctx, built.pins, built.recipe, built.fetched, trees, build_root=root, launcher=NO_LAUNCHER)
            man2 = pipeline.write_manifests(ctx, built.recipe, built.fetched, trees, builds2, latest=False)
            moved = [str(t.path) for n, t in trees.items() if t.path != built.trees[n].path]
            st["note"] = f"in {root}" + (f", sources moved to {', '.join(moved)}" if moved else "") + ", no compiler cache"
        results = verify_against(load_manifest(man2), load_reference(built.manifest), with_outputs=True)
        ui.info(f"rebuild in {root} compared with {built.builds[-1].build_dir}:")
    else:
        if opts.verify.reference is not None:
            ref = load_reference(opts.verify.reference)
        else:
            refs_dir = ctx.repo_root / "references" / built.recipe.name
            ref_path, candidates = find_matching_reference(refs_dir, manifest.artifact_sets())
            if ref_path is None:
                raise VerifyError(f"no committed reference in {refs_dir} matches this build's toolchain (candidates: {', '.join(candidates) or 'none'})",
                                  hint="pass --reference FILE|BUILD_DIR, or record one with --write-reference")
            ref = load_reference(ref_path)
        results = verify_against(manifest, ref)
        ui.info(f"compared with {ref.path}:")
    if not _print_comparisons(results):
        raise VerifyError("artifacts differ", hint="see the list above")
    return 0


# Kernel artifacts whose bytes name their input's absolute path (loom-link records it): the
# sources they are built from stay at their canonical path when rebuilding.
CANONICAL_PATH_ARTIFACTS = ("loombc",)


def rebuild_places(workspace: Workspace, trees: dict, recipe: Recipe) -> tuple[Path, dict]:
    """Where ``verify --rebuild`` builds: a fresh build root, and a copy of each prepared
    source tree at another path (as reprotest varies the build path), so that any absolute
    path left in an output shows up as a difference. Sources of path-recording kernel
    artifacts (:data:`CANONICAL_PATH_ARTIFACTS`) are not moved."""
    root = workspace.root / "build-rebuild"
    src = workspace.root / "src-rebuild"
    for d in (root, src):
        shutil.rmtree(d, ignore_errors=True)
    pinned = {c.source for c in recipe.components if set(c.artifacts) & set(CANONICAL_PATH_ARTIFACTS)}
    copies = {}
    for name, tree in trees.items():
        if name in pinned:
            copies[name] = tree
            continue
        dest = src / f"moved-{tree.path.name}"
        shutil.copytree(tree.path, dest, symlinks=True)
        # A copy has new inodes and times: until git refreshes its index, 'git diff-index'
        # (which ggml's CMake runs) calls the tree dirty and the version string differs.
        Git(dest).run("update-index", "-q", "--refresh", check=False)
        copies[name] = replace(tree, path=dest)
    return root, copies


# --------------------------------------------------------------------------- smoke


def smoke_devices(recipe: Recipe, server: Path, log_dir: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    """The recipe's devices plus those optional devices this build lists; the others are
    skipped with the recipe's reason."""
    from onebit_build.running.server import list_devices

    spec = recipe.smoke
    if not spec.optional_devices:
        return spec.devices, {}
    listed = list_devices(server, env=spec.env, log=log_dir / "list-devices-optional.log")
    run = list(spec.devices)
    skipped = {}
    for dev in spec.optional_devices:
        if dev in listed:
            run.append(dev)
        else:
            skipped[dev] = f"not listed by --list-devices (lists: {', '.join(listed) or 'none'}). {spec.skip_reason}".strip()
    return tuple(run), skipped


def smoke_stage(ctx: pipeline.Context, recipe: Recipe, *, server: Path, manifest_file: Path | None, opts: Options,
                verified: dict | None = None) -> int:
    """Start the server on every smoke device, check it, write the report."""
    from onebit_build.building.manifest import load_manifest
    from onebit_build.running import report as report_mod
    from onebit_build.running import smoke as smoke_mod

    with ui.stage("model") as st:
        mf = resolve_model(recipe, opts, models_dir=ctx.workspace.models, log=ctx.run_dir / "model.log",
                           lock=ctx.project.models_lock)
        st["note"] = f"{mf.path.name} sha256 {mf.sha256[:16]}"
    src = recipe.server_component.source
    if manifest_file is not None:
        man = load_manifest(manifest_file)
        manifest, commit = man.to_doc(), man.source_commit(src)
    else:  # --server: a binary built elsewhere; it must still name the pinned commit
        manifest = None
        pins, _ = load_pins_and_recipe(ctx.project, opts, locked=False)
        commit = pins.get(src).commit
    run_recipe = with_runtime_env(recipe, ctx.toolchain_root)
    devices, skipped = smoke_devices(run_recipe, server, ctx.run_dir / "logs")
    for dev, why in skipped.items():
        ui.warn(f"smoke on {dev} skipped: {why}")
    with ui.stage("smoke") as st:
        result = smoke_mod.run_smoke(recipe=run_recipe, server_bin=server, model=mf, run_dir=ctx.run_dir,
                                     expect_commit=commit[:7], threads=recipe.smoke.threads, devices=devices,
                                     references=speed_references(ctx.project, recipe))
        st["note"] = "all checks passed" if result.passed else "CHECKS FAILED"
        if not result.passed:
            st["status"] = "FAILED"
    chat = chat_note(mf.path)
    if chat:
        ui.warn(chat)
    json_path, md_path = report_mod.write_report(ctx.run_dir, recipe=recipe, smoke=result, manifest=manifest,
                                                 extra={"verify": verified, "skipped_devices": skipped, "chat": chat or "checked"})
    report_mod.print_summary(result)
    ui.result(f"report: {md_path}")
    if opts.junit is not None:
        from onebit_build.verification.junit import smoke_cases, write_junit

        ui.result(f"junit: {write_junit(opts.junit, 'smoke', smoke_cases(result), seconds=result.seconds)}")
    return 0 if result.passed else SmokeError.exit_code
