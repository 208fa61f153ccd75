"""Command line: parses arguments and wires the stages together; nothing else."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from onebit_build import __version__

from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, NotAvailableError, OnebitError, SmokeError, SpaceError, ToolMissingError, WorkspaceError
from onebit_build.core.project import ProjectRoot, find_root
from onebit_build.core.workspace import Workspace, WorkspaceLock, check_usable, default_workspace, sweep_stale

HRX_RECIPE = "strix-halo"


def project_root(args: argparse.Namespace) -> ProjectRoot:
    """Where pins.yaml, recipes/, patches/ and the rest come from for this run."""
    return find_root(given=getattr(args, "root", None), env=os.environ, cwd=Path.cwd())


def _common(p: argparse.ArgumentParser, top: bool) -> None:
    kw = {"default": argparse.SUPPRESS} if not top else {}
    p.add_argument("--recipe", metavar="NAME", help="recipe from recipes/ (default: default)", **kw)
    p.add_argument("--root", metavar="DIR", help="project folder holding pins.yaml and recipes/ (default: $ONEBIT_ROOT, the checkout around the"
                   " current folder, else the data installed with the tool)", **kw)
    p.add_argument("--hrx", choices=["on", "off"], help="on: the HRX + Vulkan Strix Halo recipe", **kw)
    p.add_argument("--workspace", metavar="DIR", help="cache and build folder (default: $XDG_CACHE_HOME/onebit-build)", **kw)
    p.add_argument("--mirror-dir", metavar="DIR", action="append", help="folder with NAME.git / NAME.bundle mirrors (repeatable; also $ONEBIT_MIRROR_DIR)", **kw)
    p.add_argument("--offline", action="store_true", help="use only the cache and mirrors; fail fast otherwise", **kw)
    p.add_argument("--locked", action="store_true", help="refuse pins not fully resolved in pins.lock", **kw)
    p.add_argument("-j", "--jobs", type=_positive_int, metavar="N", help="parallel build jobs (default: ninja's)", **kw)
    p.add_argument("-v", "--verbose", action="store_true", help="echo every command and show full output", **kw)
    p.add_argument("--model", metavar="PATH", help="smoke: use this local GGUF instead of the recipe's model", **kw)
    _common_strix_halo(p, kw)


def _common_strix_halo(p: argparse.ArgumentParser, kw: dict) -> None:
    p.add_argument("--toolchain-root", metavar="DIR", help="toolchain folder for recipes with one (overrides the recipe and its variable, e.g. $ONEBIT_TOOLCHAIN_ROOT)", **kw)
    p.add_argument("--dry-run", action="store_true", help="print the full plan (sources, patches, configure commands, outputs, runtime) and stop; no network", **kw)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="onebit-build",
        description="Fetch pinned sources, apply patches, build llama-server, verify and smoke-test it.",
    )
    p.add_argument("--version", action="store_true", help="print the version, the digest of pins.yaml and where the recipes come from")
    _common(p, top=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_ in (
        ("fetch", "fetch every source of the recipe at its pinned commit"),
        ("patch", "fetch, then prepare patched source trees"),
        ("build", "fetch, patch and build; write build-manifest.json"),
        ("smoke", "start the built llama-server and check it (builds first if needed)"),
        ("all", "the whole job (the default): fetch, patch, build, smoke, report"),
    ):
        sp = sub.add_parser(name, help=help_)
        if name == "smoke":
            sp.add_argument("--server", metavar="PATH", help="smoke this llama-server binary (built elsewhere) instead of building the recipe")
        _common(sp, top=False)
    vp = sub.add_parser("verify", help="compare the build's kernel artifacts with a reference (builds first if needed)")
    vp.add_argument("--reference", metavar="FILE|BUILD_DIR", help="reference file or build folder (default: the matching one in references/<recipe>/)")
    vp.add_argument("--write-reference", metavar="FILE", help="save this build's artifacts as a reference")
    vp.add_argument("--rebuild", action="store_true", help="build the same configuration again in another folder and compare everything")
    _common(vp, top=False)
    rp = sub.add_parser("recipes", help="list the recipes: name, backends, description")
    rp.add_argument("--json", action="store_true", help="print the list as JSON")
    _common(rp, top=False)
    dp = sub.add_parser("doctor", help="check this machine for what the recipe needs, each missing item with its fix")
    dp.add_argument("--json", action="store_true", help="print the checks as JSON (schema 1)")
    _common(dp, top=False)
    pe = sub.add_parser("patches", help="patch series tools")
    psub = pe.add_subparsers(dest="patches_command", metavar="ACTION", required=True)
    ex = psub.add_parser("export", help="write a prepared tree's commits back as patches/<source>/NNNN-*.patch")
    ex.add_argument("source")
    _common(ex, top=False)
    pl = sub.add_parser("pins", help="pin tools")
    plsub = pl.add_subparsers(dest="pins_command", metavar="ACTION", required=True)
    lk = plsub.add_parser("lock", help="resolve abbreviated pins and record them in pins.lock")
    lk.add_argument("sources", nargs="*", help="only these sources (default: all abbreviated pins)")
    _common(lk, top=False)
    _bench_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    ui.set_verbose(bool(getattr(args, "verbose", False)))
    # Ctrl-C arrives as KeyboardInterrupt; SIGTERM is turned into the same path so that
    # every stage cleans up the same way.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if args.version:
            return _version(args)
        return _dispatch(args)
    except KeyboardInterrupt:
        ui.error("interrupted; partial outputs were removed, the next run starts cleanly")
        return 130
    except OnebitError as exc:
        ui.error(str(exc))
        if exc.detail:
            ui.info(_indent(exc.detail))
        if ui.is_verbose():
            traceback.print_exc()
        return exc.exit_code
    except OSError as exc:
        # The last net: a file-system fault no stage foresaw is still one line and a code.
        err = os_error(exc)
        ui.error(str(err))
        if ui.is_verbose():
            traceback.print_exc()
        return err.exit_code


def os_error(exc: OSError) -> OnebitError:
    """A typed error for an unexpected OSError (disk full, permission, read-only). Pure."""
    where = f" at {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return SpaceError(f"no space left on device{where}", hint="free some space or use another --workspace, then run again")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return WorkspaceError(f"{exc.strerror}{where}", hint="choose a writable --workspace or fix the permissions")
    return OnebitError(f"{exc.strerror or exc}{where}", hint="run again with -v for the details")


def _indent(text: str) -> str:
    return "\n".join("  | " + line for line in text.splitlines())


def _recipe_name(args: argparse.Namespace) -> str:
    hrx = getattr(args, "hrx", None)
    recipe = getattr(args, "recipe", None)
    if hrx == "on":
        if recipe and recipe != HRX_RECIPE:
            raise ConfigError(f"--hrx on selects recipe {HRX_RECIPE!r}, but --recipe {recipe!r} was given", hint="drop one of them")
        return HRX_RECIPE
    return recipe or "default"


def _dispatch(args: argparse.Namespace) -> int:
    from onebit_build.building.fetch import mirror_dirs_from

    command = args.command or "all"
    project = project_root(args)
    root = project.path
    if command == "recipes":
        return _recipes(project, args)
    recipe_name = _recipe_name(args)
    if recipe_name == HRX_RECIPE and not (project.recipes / f"{HRX_RECIPE}.yaml").exists():
        raise NotAvailableError(
            f"--hrx on: the HRX + Vulkan recipe ({HRX_RECIPE}) is not available in this version yet",
            hint="build the CPU default for now (omit --hrx or use --hrx off)",
        )
    if getattr(args, "dry_run", False):
        return _dry_run(project, recipe_name, args)
    if command == "doctor":
        return _doctor(project, recipe_name, args)
    if command == "bench":
        return _bench(root, recipe_name, args)
    if needs_git(command, args):
        from onebit_build.core.proc import which

        which("git")
    if command in ("patches", "pins") and project.data_from != "checkout":
        raise ConfigError(f"'{command} {getattr(args, 'patches_command', None) or getattr(args, 'pins_command', None)}' writes into the project's files,"
                          f" but they come from the installed package ({root})",
                          hint="run it inside a checkout of onebit-build, or pass --root DIR")
    ws = Workspace(root=Path(getattr(args, "workspace", None) or default_workspace()).resolve())
    check_usable(ws.root)
    mirror_dirs = mirror_dirs_from(getattr(args, "mirror_dir", None))
    label = command if command not in ("patches", "pins") else f"{command}-{getattr(args, 'patches_command', None) or getattr(args, 'pins_command', None)}"
    with WorkspaceLock(ws.lock_file, f"onebit-build {label}"):
        for folder in (ws.src_dir, ws.models, ws.downloads):
            for gone in sweep_stale(folder):
                ui.info(f"  removed {gone.name}, left behind by a run that was killed")
        run_dir = ws.new_run_dir(recipe_name, label)
        try:
            return _in_run(args, command, project, recipe_name, ws, run_dir, mirror_dirs)
        finally:
            _drop_if_empty(run_dir)


def _drop_if_empty(run_dir: Path) -> None:
    """A run that stopped before writing anything (e.g. a configuration error) leaves no folder."""
    try:
        run_dir.rmdir()
    except OSError:
        pass


def needs_git(command: str, args: argparse.Namespace) -> bool:
    """Whether the command fetches or patches sources (smoking a given binary does not). Pure."""
    if command == "smoke" and getattr(args, "server", None):
        return False
    return command in ("all", "fetch", "patch", "build", "smoke", "verify", "patches", "pins")


def _in_run(args: argparse.Namespace, command: str, project: ProjectRoot, recipe_name: str, ws: Workspace, run_dir: Path,
            mirror_dirs: tuple[Path, ...]) -> int:
    from onebit_build import pipeline

    ctx = pipeline.Context(
        repo_root=project.path, pins_path=project.pins, recipes_dir=project.recipes,
        patches_dir=project.patches, data_from=project.data_from, workspace=ws, recipe_name=recipe_name, run_dir=run_dir,
        offline=bool(getattr(args, "offline", False)), locked=bool(getattr(args, "locked", False)),
        mirror_dirs=mirror_dirs, jobs=getattr(args, "jobs", None),
        toolchain_root=getattr(args, "toolchain_root", None),
    )
    ui.detail(f"workspace {ws.root}; logs in {run_dir}; project data {project.describe()}")
    if command == "pins":
        return _pins_lock(ctx, args)
    if command == "patches":
        return _patches_export(ctx, args)
    return _job(ctx, command, args)


def _job(ctx, command: str, args: argparse.Namespace) -> int:
    from onebit_build import pipeline

    t_start = time.monotonic()
    pins, recipe = pipeline.load(ctx)
    if command == "smoke" and getattr(args, "server", None):
        return _smoke(ctx, recipe, [], None, args)
    names = pipeline.recipe_sources(recipe)
    with ui.stage("fetch") as st:
        fetched = pipeline.run_fetch(ctx, pins, names)
        st["note"] = ", ".join(f"{n}@{f.commit[:12]} ({f.mirror_used.split(':')[0]})" for n, f in fetched.items())
    if command == "fetch":
        return 0
    with ui.stage("patch") as st:
        trees = pipeline.run_patch(ctx, fetched)
        st["note"] = ", ".join(f"{n}: {len(t.patches)} patch(es){' (reused)' if t.reused else ''}" for n, t in trees.items())
    if command == "patch":
        for t in trees.values():
            ui.info(f"  {t.source}: {t.path}")
        return 0
    with ui.stage("build") as st:
        builds = pipeline.run_build(ctx, pins, recipe, fetched, trees)
        t_manifest = time.monotonic()
        man = pipeline.write_manifests(ctx, recipe, fetched, trees, builds)
        manifest_s = time.monotonic() - t_manifest
        st["note"] = "; ".join(f"{b.component}{' (up to date)' if b.reused else f' built in {b.seconds:.0f} s'}" for b in builds)
        if manifest_s >= 1.0:
            st["note"] += f"; artifacts and manifest in {manifest_s:.0f} s"
    for b in builds:
        for o in b.outputs:
            ui.info(f"  {o.name}: {o.path}  sha256 {o.sha256[:16]}")
    ui.info(f"  manifest: {man}")
    if command == "build":
        ui.info(f"done in {time.monotonic() - t_start:.1f} s; logs: {ctx.run_dir}")
        return 0
    if command == "verify":
        return _verify(ctx, pins, recipe, fetched, trees, builds, man, args)
    verified = _verify_stage(ctx, recipe, man) if command == "all" else None
    rc = _smoke(ctx, recipe, builds, man, args, verified)
    return rc


def _print_comparisons(results) -> bool:
    ok = True
    for r in results:
        for line in r.lines():
            ui.info(line if line.startswith("  ") else f"  {line}")
        ok = ok and r.ok
    return ok


def _verify_stage(ctx, recipe, manifest_file: Path) -> dict:
    """Part of the default job: compare with the matching committed reference, if any.
    Returns what the report records; never passes silently."""
    from onebit_build.building.manifest import read_manifest
    from onebit_build.building.verify import find_matching_reference, load_reference, manifest_sets, verify_against

    manifest = read_manifest(manifest_file)
    sets = manifest_sets(manifest)
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
        from onebit_build.core.errors import VerifyError

        raise VerifyError(f"kernel artifacts differ from {ref_path}", hint="see the list above; rebuild with the reference's toolchain or update the reference deliberately")
    return {"status": "verified", "reference": str(ref_path), "results": [r.to_dict() for r in results]}


def _verify(ctx, pins, recipe, fetched, trees, builds, manifest_file: Path, args: argparse.Namespace) -> int:
    import shutil

    from onebit_build import pipeline
    from onebit_build.core.errors import VerifyError
    from onebit_build.building.manifest import read_manifest
    from onebit_build.building.verify import load_reference, verify_against, write_reference

    manifest = read_manifest(manifest_file)
    if args.write_reference:
        path = write_reference(Path(args.write_reference), manifest)
        ui.info(f"wrote reference {path}")
        return 0
    if args.rebuild:
        root = ctx.workspace.root / "build-rebuild"
        shutil.rmtree(root, ignore_errors=True)
        with ui.stage("rebuild") as st:
            builds2 = pipeline.run_build(ctx, pins, recipe, fetched, trees, build_root=root)
            man2 = pipeline.write_manifests(ctx, recipe, fetched, trees, builds2, latest=False)
            st["note"] = f"in {root}"
        results = verify_against(read_manifest(man2), load_reference(manifest_file), with_outputs=True)
        ui.info(f"rebuild in {root} compared with {builds[-1].build_dir}:")
    else:
        if args.reference:
            ref = load_reference(Path(args.reference))
        else:
            from onebit_build.building.verify import find_matching_reference, manifest_sets

            refs_dir = ctx.repo_root / "references" / recipe.name
            ref_path, candidates = find_matching_reference(refs_dir, manifest_sets(manifest))
            if ref_path is None:
                raise VerifyError(f"no committed reference in {refs_dir} matches this build's toolchain (candidates: {', '.join(candidates) or 'none'})",
                                  hint="pass --reference FILE|BUILD_DIR, or record one with --write-reference")
            ref = load_reference(ref_path)
        results = verify_against(manifest, ref)
        ui.info(f"compared with {ref.path}:")
    ok = _print_comparisons(results)
    if not ok:
        raise VerifyError("artifacts differ", hint="see the list above")
    return 0


def _smoke_devices(ctx, recipe, server: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    """The recipe's devices plus those optional devices this build lists; the others are
    skipped with the recipe's reason."""
    from onebit_build.running.server import list_devices

    spec = recipe.smoke
    if not spec.optional_devices:
        return spec.devices, {}
    listed = list_devices(server, env=spec.env, log=ctx.run_dir / "logs" / "list-devices-optional.log")
    run = list(spec.devices)
    skipped = {}
    for dev in spec.optional_devices:
        if dev in listed:
            run.append(dev)
        else:
            skipped[dev] = f"not listed by --list-devices (lists: {', '.join(listed) or 'none'}). {spec.skip_reason}".strip()
    return tuple(run), skipped


def _smoke(ctx, recipe, builds, manifest_file: Path, args: argparse.Namespace, verified: dict | None = None) -> int:
    try:
        from onebit_build.running import model as model_mod
        from onebit_build.running import report as report_mod
        from onebit_build.running import smoke as smoke_mod
    except ImportError:
        raise NotAvailableError("the smoke stage is not available in this version yet", hint="use 'onebit-build build'") from None
    from onebit_build.building.manifest import read_manifest

    server = getattr(args, "server", None) and Path(args.server).resolve()
    for b in builds:
        for o in b.outputs:
            if o.name == "llama-server":
                server = o.path
    if server is None:
        raise NotAvailableError(f"recipe {recipe.name} builds no llama-server output", hint="add 'llama-server: bin/llama-server' to the component's outputs")
    with ui.stage("model") as st:
        if getattr(args, "model", None):
            mf = model_mod.local_model(Path(args.model))
        elif recipe.model is not None and recipe.model.path_env:
            mf = _user_model(recipe.model, model_mod)
        else:
            if recipe.model is None:
                raise NotAvailableError(f"recipe {recipe.name} names no model", hint="pass --model PATH")
            mf = model_mod.ensure_model(recipe.model, cache_dir=ctx.workspace.models, offline=ctx.offline, log=ctx.run_dir / "model.log")
        st["note"] = f"{mf.path.name} sha256 {mf.sha256[:16]}"
    src = recipe.server_component.source
    if manifest_file is not None:
        manifest = read_manifest(manifest_file)
        commit = next(s["commit"] for s in manifest["sources"] if s["name"] == src)
    else:  # --server: a binary built elsewhere; it must still name the pinned commit
        manifest = None
        commit = _pins_for_smoke(ctx).get(src).commit
    devices, skipped = _smoke_devices(ctx, _with_runtime_env(ctx, recipe), server)
    for dev, why in skipped.items():
        ui.warn(f"smoke on {dev} skipped: {why}")
    with ui.stage("smoke") as st:
        result = smoke_mod.run_smoke(recipe=_with_runtime_env(ctx, recipe), server_bin=server, model=mf, run_dir=ctx.run_dir,
                                     expect_commit=commit[:7], threads=recipe.smoke.threads, devices=devices)
        st["note"] = "all checks passed" if result.passed else "CHECKS FAILED"
        if not result.passed:
            st["status"] = "FAILED"
    json_path, md_path = report_mod.write_report(ctx.run_dir, recipe=recipe, smoke=result, manifest=manifest, extra={"verify": verified, "skipped_devices": skipped})
    report_mod.print_summary(result)
    ui.info(f"report: {md_path}")
    return 0 if result.passed else SmokeError.exit_code


def _pins_for_smoke(ctx):
    from onebit_build.core.config import apply_lock, load_pins, read_lock

    pins = load_pins(ctx.pins_path)
    return apply_lock(pins, read_lock(pins.lock_path), locked=False)


def _user_model(spec, model_mod):
    """A model the user supplies (not on a registry): the file named by the recipe's
    ``path_env`` variable, checked against the recipe's sha256 when one is pinned."""
    from onebit_build.core.errors import IntegrityError

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
    if not spec.sha256:
        ui.warn(f"model {spec.name}: the recipe pins no sha256; this run used {mf.sha256} (record it in the recipe)")
    return mf


def _with_runtime_env(ctx, recipe):
    """The recipe with its smoke environment filled in (e.g. the HSA runtime under the toolchain)."""
    from dataclasses import replace

    from onebit_build.building.plan import resolve_toolchain, runtime_env

    tc = resolve_toolchain(recipe.toolchain, override=ctx.toolchain_root) if recipe.toolchain else None
    env = runtime_env(recipe, tc)
    for k, v in env:
        ui.detail(f"  smoke environment {k}={v}")
    return replace(recipe, smoke=replace(recipe.smoke, env=env))


def _dry_run(project: ProjectRoot, recipe_name: str, args: argparse.Namespace) -> int:
    """Print the whole plan without fetching, building or taking the workspace lock."""
    from onebit_build.core.config import apply_lock, find_recipe, load_pins, load_recipe, read_lock
    from onebit_build.building.fetch import mirror_dirs_from
    from onebit_build.building.plan import make_plan, render_plan

    pins = load_pins(project.pins)
    pins = apply_lock(pins, read_lock(pins.lock_path), locked=bool(getattr(args, "locked", False)))
    recipe = load_recipe(find_recipe(project.recipes, recipe_name), pins)
    ws = Workspace(root=Path(getattr(args, "workspace", None) or default_workspace()).resolve())
    plan = make_plan(recipe, pins, workspace=ws, patches_dir=project.patches,
                     mirror_dirs=mirror_dirs_from(getattr(args, "mirror_dir", None)),
                     offline=bool(getattr(args, "offline", False)), toolchain_root=getattr(args, "toolchain_root", None))
    sys.stdout.write(render_plan(plan, project=project.describe()))
    return 0


def _doctor(project: ProjectRoot, recipe_name: str, args: argparse.Namespace) -> int:
    from onebit_build.core.config import apply_lock, find_recipe, load_pins, load_recipe, read_lock
    from onebit_build.doctor import DoctorRequest, render, run_doctor
    from onebit_build.building.fetch import mirror_dirs_from

    pins = load_pins(project.pins)
    pins = apply_lock(pins, read_lock(pins.lock_path), locked=False)
    recipe = load_recipe(find_recipe(project.recipes, recipe_name), pins)
    ws = Workspace(root=Path(getattr(args, "workspace", None) or default_workspace()).resolve())
    report = run_doctor(DoctorRequest(
        recipe=recipe, pins=pins, workspace=ws, mirror_dirs=mirror_dirs_from(getattr(args, "mirror_dir", None)),
        offline=bool(getattr(args, "offline", False)), toolchain_root=getattr(args, "toolchain_root", None),
    ))
    if getattr(args, "json", False):
        import json

        doc = {"kind": "onebit-build-doctor", "schema": 1, "recipe": report.recipe, "ok": report.ok,
               "project": project.describe(),
               "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix} for c in report.checks]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(f"project data: {project.describe()}\n")
        sys.stdout.write(render(report))
    return 0 if report.ok else ToolMissingError.exit_code


def _version(args: argparse.Namespace) -> int:
    """The tool's version, the pins it would build and where its recipes come from."""
    from onebit_build.core.project import pins_digest

    lines = [f"onebit-build {__version__}"]
    try:
        project = project_root(args)
    except ConfigError as exc:
        lines.append(f"recipes: none found ({exc})")
    else:
        digest = pins_digest(project)
        lines.append(f"pins.yaml sha256 {digest}" if digest else f"pins.yaml: not readable in {project.path}")
        lines.append(f"recipes from {project.describe()}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def recipe_rows(project: ProjectRoot) -> list[dict]:
    """Every recipe of the project, loaded and checked against the pins."""
    from onebit_build.core.config import apply_lock, load_pins, load_recipe, read_lock

    pins = load_pins(project.pins)
    pins = apply_lock(pins, read_lock(pins.lock_path), locked=False)
    rows = []
    for path in sorted(project.recipes.glob("*.yaml")):
        r = load_recipe(path, pins)
        rows.append({"name": r.name, "backends": list(r.backends), "description": r.description, "path": str(path)})
    return rows


def _recipes(project: ProjectRoot, args: argparse.Namespace) -> int:
    import json

    rows = recipe_rows(project)
    if args.json:
        doc = {"project_root": str(project.path), "data_from": project.data_from, "recipes": rows}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    width = max([len(r["name"]) for r in rows] + [6])
    bwidth = max([len(", ".join(r["backends"])) for r in rows] + [8])
    out = [f"recipes from {project.describe()}", "", f"{'recipe':<{width}}  {'backends':<{bwidth}}  description"]
    for r in rows:
        out.append(f"{r['name']:<{width}}  {', '.join(r['backends']):<{bwidth}}  {r['description']}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def _pins_lock(ctx, args: argparse.Namespace) -> int:
    from onebit_build import pipeline
    from onebit_build.core.config import apply_lock, load_pins, read_lock

    pins = load_pins(ctx.pins_path)
    pins = apply_lock(pins, {}, locked=False)
    wanted = args.sources or [n for n, p in pins.sources.items() if p.abbreviated]
    for n in wanted:
        pins.get(n)
    fetched = pipeline.run_fetch(ctx, pins, wanted)
    for n, f in fetched.items():
        ui.info(f"  {n}: {f.commit} (from {f.mirror_used})")
    lock = read_lock(pins.lock_path)
    ui.info(f"{pins.lock_path.name}: {len(lock)} resolved pin(s)")
    return 0


def _patches_export(ctx, args: argparse.Namespace) -> int:
    from onebit_build import pipeline
    from onebit_build.building.patch import export_series

    pins, recipe = pipeline.load(ctx)
    pins.get(args.source)
    fetched = pipeline.run_fetch(ctx, pins, [args.source])
    # The tree as it is now (the user may have committed changes in it): found by pin + current series.
    from onebit_build.building.patch import canonical_path, list_patches, patch_digest, PreparedTree

    f = fetched[args.source]
    patches = list_patches(ctx.patches_dir, args.source)
    digest = patch_digest(f.commit, patches)
    tree_path = canonical_path(ctx.workspace, args.source, f.commit, digest)
    if not tree_path.exists():
        raise OnebitError(f"no prepared tree for {args.source} at {tree_path}", hint="run 'onebit-build patch' first, commit your changes in that tree, then export")
    from onebit_build.core.gitops import Git

    head = Git(tree_path).out("rev-parse", "HEAD")
    tree = PreparedTree(source=args.source, path=tree_path, commit=f.commit, head=head, patches=patches, patch_digest=digest, reused=True)
    written = export_series(tree, ctx.patches_dir / args.source, log=ctx.run_dir / "patch.log")
    for p in written:
        ui.info(f"  {p}")
    ui.info(f"wrote {len(written)} patch(es) to {ctx.patches_dir / args.source}")
    return 0


# --------------------------------------------------------------------------- bench


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _bench_parser(sub) -> None:
    from onebit_build.running.bench.settings import DEFAULTS

    bp = sub.add_parser("bench", help="benchmark llama-server configs, builds or devices: interleaved, answer-checked, locked; table, JSON and plot")
    bp.add_argument("--config", metavar="NAME=ARGS", action="append", dest="bench_configs",
                    help="extra llama-server arguments under a name, e.g. t1='-t 1' (repeatable; the first is the baseline)")
    bp.add_argument("--server", metavar="[NAME=]PATH", action="append", dest="bench_builds",
                    help="a llama-server binary to benchmark as it is, without the build pipeline (repeatable)")
    bp.add_argument("--build", metavar="[NAME=]DIR", action="append", dest="bench_builds",
                    help="a build folder holding bin/llama-server (repeatable; default: the recipe's latest build)")
    bp.add_argument("--device", metavar="NAME", action="append", dest="bench_devices",
                    help="device to serve on: CPU, Vulkan0, CUDA0, HRX20..., or 'all' for the CPU and every device the build lists (repeatable; default CPU)")
    bp.add_argument("--rounds", type=_positive_int, default=DEFAULTS.rounds,
                    help=f"rounds of every variant, interleaved (default {DEFAULTS.rounds})")
    bp.add_argument("--decode-tokens", type=_positive_int, default=DEFAULTS.decode_tokens, metavar="N",
                    help=f"tokens generated per request (default {DEFAULTS.decode_tokens})")
    bp.add_argument("--prefix-tokens", type=_positive_int, default=DEFAULTS.prefix_tokens, metavar="K",
                    help=f"answers must match the baseline's first K generated tokens (default {DEFAULTS.prefix_tokens})")
    bp.add_argument("--expect", metavar="FILE", help="expected answer prefixes: an earlier bench.json or a YAML 'prompt: text' mapping")
    bp.add_argument("--tie-margin", type=float, default=DEFAULTS.tie_margin, metavar="NATS",
                    help="excuse a divergence where the baseline's two likeliest tokens were closer than this in log-probability"
                         f" and the variant took the second (default {DEFAULTS.tie_margin:g})")
    bp.add_argument("--prompts", metavar="DIR", help="folder with code.txt, prose.txt, short.txt (default: smoke/prompts)")
    bp.add_argument("--ctx-size", type=_positive_int, default=DEFAULTS.ctx_size, metavar="N", help=f"server context size (default {DEFAULTS.ctx_size})")
    bp.add_argument("--lock", metavar="FILE", dest="bench_lock", help="the bench lock file (default: bench.lock in the workspace)")
    bp.add_argument("--wait", metavar="SECONDS", type=float, nargs="?", const=DEFAULTS.lock_wait_s, default=0.0,
                    help="when another bench holds the lock, wait for it (default: fail at once; --wait alone: up to an hour)")
    bp.add_argument("--out", metavar="DIR", help="write the results here (default: a new run folder in the workspace)")
    _common(bp, top=False)


def _bench(root: Path, recipe_name: str, args: argparse.Namespace) -> int:
    """Benchmark: parse and check everything first, then take the bench lock and run."""
    from onebit_build.running import bench
    from onebit_build.running import model as model_mod
    from onebit_build.core.errors import SmokeError

    ws = Workspace(root=Path(getattr(args, "workspace", None) or default_workspace()).resolve())
    configs = bench.parse_configs(args.bench_configs or [])
    builds = bench.parse_builds(args.bench_builds or [])
    prompts = bench.load_prompts(Path(args.prompts) if args.prompts else root / "smoke" / "prompts")
    given = bench.load_expectations(Path(args.expect), tuple(p.name for p in prompts)) if args.expect else ()
    recipe = None
    env: tuple[tuple[str, str], ...] = ()
    if not builds or not getattr(args, "model", None):
        recipe = _bench_recipe(root, recipe_name)
    if not builds:
        builds = (_bench_recipe_build(ws, recipe, bench),)
        env = _bench_env(recipe, args)
    lock_path = Path(args.bench_lock).resolve() if args.bench_lock else ws.root / "bench.lock"
    names = ", ".join(c.name for c in configs)
    with bench.BenchLock(lock_path, f"onebit-build bench {names}", wait_s=max(0.0, args.wait)):
        if args.out:
            run_dir = Path(args.out).resolve()
            run_dir.mkdir(parents=True, exist_ok=True)
        else:
            run_dir = ws.new_run_dir(recipe.name if recipe is not None and not args.bench_builds else "local", "bench")
        if getattr(args, "model", None):
            mf = model_mod.local_model(Path(args.model))
        elif recipe.model is None:
            raise NotAvailableError(f"recipe {recipe.name} names no model", hint="pass --model PATH")
        elif recipe.model.path_env:
            mf = _user_model(recipe.model, model_mod)
        else:
            mf = model_mod.ensure_model(recipe.model, cache_dir=ws.models, offline=bool(getattr(args, "offline", False)), log=run_dir / "model.log")
        devices = bench.resolve_devices(builds, tuple(args.bench_devices or ()), env=env, log_dir=run_dir / "logs")
        variants = bench.make_variants(configs, builds, devices)
        ui.info(f"bench: {len(variants)} variant(s) x {args.rounds} round(s) x {len(prompts)} prompts, {args.decode_tokens} tokens each; "
                f"baseline {variants[0].name}; model {mf.path.name}; lock {lock_path}")
        req = bench.BenchRequest(
            variants=variants, model=mf, prompts=prompts, run_dir=run_dir, rounds=args.rounds,
            decode_tokens=args.decode_tokens, prefix_tokens=args.prefix_tokens, tie_margin=max(0.0, args.tie_margin), ctx_size=args.ctx_size,
            given=given, env=env, lock=lock_path,
        )
        result = bench.run_bench(req)
        outputs = bench.write_outputs(result, run_dir)
    sys.stdout.write("\n" + bench.render_table(result) + "\n")
    ui.info(f"table: {outputs.table}")
    ui.info(f"plot: {outputs.plot}")
    ui.info(f"json: {outputs.json}")
    bad = [c for c in result.cells if not c.valid]
    if bad:
        ui.warn(f"{len(bad)} of {len(result.cells)} figures are INVALID (their answers did not hold); first: {bad[0].variant} {bad[0].prompt}: {bad[0].reason}")
        return SmokeError.exit_code
    return 0


def _bench_recipe(root: Path, recipe_name: str):
    from onebit_build.core.config import apply_lock, find_recipe, load_pins, load_recipe, read_lock

    pins = load_pins(root / "pins.yaml")
    pins = apply_lock(pins, read_lock(pins.lock_path), locked=False)
    return load_recipe(find_recipe(root / "recipes", recipe_name), pins)


def _bench_recipe_build(ws: Workspace, recipe, bench):
    """The llama-server of the recipe's latest build in the workspace (no build is started)."""
    from onebit_build.building.manifest import read_manifest
    from onebit_build.pipeline import manifest_path

    path = manifest_path(ws, recipe.name)
    try:
        doc = read_manifest(path)
    except FileNotFoundError:
        raise NotAvailableError(
            f"no build of recipe {recipe.name} in {ws.root} (no {path.name} manifest)",
            hint=f"run 'onebit-build --recipe {recipe.name} build' first, or pass --server PATH",
        ) from None
    for comp in doc.get("components", []):
        for o in comp.get("outputs", []):
            if o.get("name") == "llama-server":
                return bench.Build(name=recipe.name, server=bench.server_in(Path(o["path"])))
    raise NotAvailableError(f"the {recipe.name} build lists no llama-server output ({path})", hint="pass --server PATH")


def _bench_env(recipe, args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """The recipe's runtime environment for its own build (e.g. the HSA library for HRX)."""
    from onebit_build.building.plan import resolve_toolchain, runtime_env

    tc = resolve_toolchain(recipe.toolchain, override=getattr(args, "toolchain_root", None)) if recipe.toolchain else None
    return runtime_env(recipe, tc)


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
