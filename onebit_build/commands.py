"""The commands that are not a build job: the plan, the recipe list, doctor, the version,
pin and patch tools, serving and installing a build. Each takes the options and the project
and returns an exit code; ``cli`` maps subcommands to them.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from onebit_build import __version__, stages
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, NotAvailableError, OnebitError, ToolMissingError
from onebit_build.core.project import ProjectRoot, pins_digest
from onebit_build.core.workspace import Workspace, WorkspaceLock, check_usable, sweep_stale
from onebit_build.options import Options
from onebit_build.pipeline import Context


def version(opts: Options, project: ProjectRoot | None, error: ConfigError | None = None) -> int:
    """The tool's version, the pins it would build and where its recipes come from."""
    lines = [f"onebit-build {__version__}"]
    if project is None:
        lines.append(f"recipes: none found ({error})")
    else:
        digest = pins_digest(project)
        lines.append(f"pins.yaml sha256 {digest}" if digest else f"pins.yaml: not readable in {project.path}")
        lines.append(f"recipes from {project.describe()}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def plan(opts: Options, project: ProjectRoot) -> int:
    """Print the whole plan without fetching, building or taking the workspace lock."""
    from onebit_build.building.plan import make_plan, plan_doc, render_plan

    pins, recipe = stages.load_pins_and_recipe(project, opts)
    the_plan = make_plan(recipe, pins, workspace=Workspace(root=opts.workspace), patches_dir=project.patches,
                         mirror_dirs=opts.mirror_dirs, offline=opts.offline, toolchain_root=opts.toolchain_root)
    if opts.json:
        doc = {"kind": "onebit-build-plan", "schema": 1, "project": project.describe(),
               "overrides": [d.render() for d in opts.defines], **plan_doc(the_plan)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_plan(the_plan, project=project.describe()))
        for d in opts.defines:
            sys.stdout.write(f"override   -D {d.render()}\n")
    return 0


def recipe_rows(project: ProjectRoot, opts: Options) -> list[dict]:
    """Every recipe of the project, loaded and checked against the pins."""
    rows = []
    for path in sorted(project.recipes.glob("*.yaml")):
        _, r = stages.load_pins_and_recipe(project, _with_recipe(opts, str(path)), locked=False)
        rows.append({"name": r.name, "backends": list(r.backends), "description": r.description, "path": str(path)})
    return rows


def _with_recipe(opts: Options, recipe: str) -> Options:
    from dataclasses import replace

    return replace(opts, recipe=recipe, defines=())


def recipes(opts: Options, project: ProjectRoot) -> int:
    rows = recipe_rows(project, opts)
    if opts.json:
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


def doctor(opts: Options, project: ProjectRoot) -> int:
    from onebit_build.doctor import DoctorRequest, render, run_doctor

    pins, recipe = stages.load_pins_and_recipe(project, opts, locked=False)
    report = run_doctor(DoctorRequest(recipe=recipe, pins=pins, workspace=Workspace(root=opts.workspace),
                                      mirror_dirs=opts.mirror_dirs, offline=opts.offline, toolchain_root=opts.toolchain_root))
    if opts.json:
        doc = {"kind": "onebit-build-doctor", "schema": 1, "recipe": report.recipe, "ok": report.ok,
               "project": project.describe(),
               "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix} for c in report.checks]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(f"project data: {project.describe()}\n")
        sys.stdout.write(render(report))
    return 0 if report.ok else ToolMissingError.exit_code


# --------------------------------------------------------------------------- in the workspace


def in_workspace(opts: Options, project: ProjectRoot, body) -> int:
    """Run ``body(ctx)`` holding the workspace lock, in a new run folder (removed again when
    the run wrote nothing into it)."""
    if opts.needs_git:
        from onebit_build.core.proc import which

        which("git")
    if opts.command in ("patches", "pins") and project.data_from != "checkout":
        raise ConfigError(f"'{opts.command} {opts.action}' writes into the project's files, but they come from the installed package ({project.path})",
                          hint="run it inside a checkout of onebit-build, or pass --root DIR")
    ws = Workspace(root=opts.workspace)
    check_usable(ws.root)
    with WorkspaceLock(ws.lock_file, f"onebit-build {opts.label}"):
        for folder in (ws.src_dir, ws.models, ws.downloads):
            for gone in sweep_stale(folder):
                ui.info(f"  removed {gone.name}, left behind by a run that was killed")
        run_dir = ws.new_run_dir(Path(opts.recipe).stem, opts.label)
        try:
            ctx = stages.make_context(project, opts, run_dir)
            ui.detail(f"workspace {ws.root}; logs in {run_dir}; project data {project.describe()}")
            return body(ctx)
        finally:
            try:
                run_dir.rmdir()  # a run that stopped before writing anything leaves no folder
            except OSError:
                pass


def job(opts: Options, project: ProjectRoot) -> int:
    return in_workspace(opts, project, lambda ctx: stages.run_job(ctx, opts))


def pins_lock(opts: Options, project: ProjectRoot) -> int:
    def body(ctx: Context) -> int:
        from onebit_build import pipeline
        from onebit_build.core.config import apply_lock, load_pins, read_lock

        pins = apply_lock(load_pins(ctx.pins_path), {}, locked=False)
        wanted = list(opts.sources) or [n for n, p in pins.sources.items() if p.abbreviated]
        for n in wanted:
            pins.get(n)
        fetched = pipeline.run_fetch(ctx, pins, wanted)
        for n, f in fetched.items():
            ui.info(f"  {n}: {f.commit} (from {f.mirror_used})")
        ui.info(f"{pins.lock_path.name}: {len(read_lock(pins.lock_path))} resolved pin(s)")
        return 0

    return in_workspace(opts, project, body)


def patches_export(opts: Options, project: ProjectRoot) -> int:
    def body(ctx: Context) -> int:
        from onebit_build import pipeline
        from onebit_build.building.patch import export_series, tree_as_it_is

        (source,) = opts.sources
        pins, _ = stages.load_pins_and_recipe(project, opts)
        pins.get(source)
        fetched = pipeline.run_fetch(ctx, pins, [source])
        tree = tree_as_it_is(ctx.workspace, source, fetched[source].commit, ctx.patches_dir)
        written = export_series(tree, ctx.patches_dir / source, log=ctx.run_dir / "patch.log")
        for p in written:
            ui.info(f"  {p}")
        ui.info(f"wrote {len(written)} patch(es) to {ctx.patches_dir / source}")
        return 0

    return in_workspace(opts, project, body)


# --------------------------------------------------------------------------- using a build


def install(opts: Options, project: ProjectRoot) -> int:
    """Build if needed, then copy the relocatable ``bin/`` tree and the manifest into a prefix."""
    from dataclasses import replace

    if opts.prefix is None:
        raise ConfigError("install needs --prefix DIR", hint="e.g. onebit-build install --prefix ~/.local/llama")

    def body(ctx: Context) -> int:
        pins, recipe = stages.load_pins_and_recipe(project, opts)
        built = stages.build_part(ctx, replace(opts, command="build"), pins, recipe)
        assert built is not None
        files = install_tree(built.builds, built.manifest, opts.prefix)
        ui.info(f"installed {len(files)} file(s) into {opts.prefix}")
        ui.info(f"  run: {opts.prefix / 'bin' / 'llama-server'} -m MODEL.gguf")
        return 0

    return in_workspace(opts, project, body)


def install_tree(builds: list, manifest: Path, prefix: Path) -> list[Path]:
    """Copy every output file (symbolic links kept as links) into ``prefix/bin`` and the manifest
    into ``prefix/share/onebit-build``; each file lands under a temporary name and is renamed."""
    from onebit_build.core.fsutil import atomic_copy

    bin_dir = prefix / "bin"
    share = prefix / "share" / "onebit-build"
    for d in (bin_dir, share):
        d.mkdir(parents=True, exist_ok=True)
    done: list[Path] = []
    sources = sorted({p for b in builds for o in b.outputs for p in _output_files(o.path)})
    for src in sources:
        target = bin_dir / src.name
        if src.is_symlink():
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(src.readlink())
            tmp.replace(target)
        else:
            atomic_copy(src, target)
        done.append(target)
    atomic_copy(manifest, share / "build-manifest.json")
    done.append(share / "build-manifest.json")
    return done


def _output_files(path: Path) -> list[Path]:
    """An output and, for a shared library, the links beside it that name it."""
    if not path.exists():
        raise OnebitError(f"build output {path} is missing", hint="run 'onebit-build build' again")
    return [path, *(p for p in path.parent.iterdir() if p.is_symlink() and p.resolve() == path.resolve())]


def serve(opts: Options, project: ProjectRoot) -> int:
    """Build if needed, then run llama-server in the foreground until Ctrl-C."""
    from dataclasses import replace

    from onebit_build.running.server import serve_foreground

    def body(ctx: Context) -> int:
        pins, recipe = stages.load_pins_and_recipe(project, opts)
        built = stages.build_part(ctx, replace(opts, command="build"), pins, recipe)
        assert built is not None
        server = stages.server_of(built.builds, recipe)
        model = stages.resolve_model(recipe, opts, models_dir=ctx.workspace.models, log=ctx.run_dir / "model.log")
        run_recipe = stages.with_runtime_env(recipe, opts.toolchain_root)
        if shutil.which("true") is None:  # pragma: no cover - a broken PATH
            raise NotAvailableError("no PATH", hint="set PATH")
        return serve_foreground(server=server, model=model.path, host=opts.serve.host, port=opts.serve.port,
                                extra=opts.serve.extra, env=run_recipe.smoke.env, log=ctx.run_dir / "server.log",
                                chat_template=model.chat_template if hasattr(model, "chat_template") else None)

    return in_workspace(opts, project, body)
