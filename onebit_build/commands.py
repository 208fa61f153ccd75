"""The commands that are not a build job: the plan, the recipe list, doctor, the version,
pin and patch tools, serving and installing a build. Each takes the options and the project
and returns an exit code; ``cli`` maps subcommands to them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from onebit_build import __version__, stages
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, NotAvailableError, OnebitError, ToolMissingError
from onebit_build.core.project import ProjectRoot, pins_digest
from onebit_build.core.workspace import Workspace, WorkspaceLock, check_target_folder, check_usable, sweep_stale
from onebit_build.options import Options
from onebit_build.pipeline import Context


def version(project: ProjectRoot | None, error: ConfigError | None = None) -> int:
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
    from onebit_build.building.compiler_cache import resolve
    from onebit_build.building.plan import make_plan, render_plan

    pins, recipe = stages.load_pins_and_recipe(project, opts)
    the_plan = make_plan(recipe, pins, workspace=Workspace(root=opts.workspace), patches_dir=project.patches,
                         mirror_dirs=opts.mirror_dirs, offline=opts.offline, toolchain_root=opts.toolchain_root,
                         launcher=resolve(opts.compiler_cache))
    if opts.json:
        doc = {"kind": "onebit-build-plan", "schema": 1, "project": project.describe(),
               "overrides": [d.render() for d in opts.defines], **plan_doc(the_plan)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_plan(the_plan, project=project.describe()))
        for d in opts.defines:
            sys.stdout.write(f"override   -D {d.render()}\n")
    return 0


def plan_doc(the_plan) -> dict:
    """The plan as plain JSON values (paths and tuples as strings and lists). Pure."""
    from dataclasses import asdict

    from onebit_build.building.compiler_cache import describe

    def plain(value):
        return json.loads(json.dumps(value, default=str))

    return {"recipe": the_plan.recipe.name, "workspace": str(the_plan.workspace),
            "toolchain": plain(asdict(the_plan.toolchain)) if the_plan.toolchain else None,
            "sources": [plain(asdict(s)) for s in the_plan.sources],
            "components": [plain(asdict(c)) for c in the_plan.components],
            "runtime_env": dict(the_plan.runtime_env), "problems": list(the_plan.problems),
            "compiler_cache": describe(the_plan.launcher)}


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
    if opts.compiles:
        check_compiler(opts, project)
    if opts.command in ("patches", "pins") and project.data_from != "checkout":
        raise ConfigError(f"'{opts.command} {opts.action}' writes into the project's files, but they come from the installed package ({project.path})",
                          hint="run it inside a checkout of onebit-build, or pass --root DIR")
    ws = Workspace(root=opts.workspace)
    check_usable(ws.root)
    with WorkspaceLock(ws.lock_file, f"onebit-build {opts.label}"):
        for folder in (ws.src_dir, ws.models, ws.downloads):
            for gone in sweep_stale(folder):
                ui.info(f"  removed {gone.name}, left behind by a run that was killed")
        run_dir = given_run_dir(opts.run_dir) if opts.run_dir else ws.new_run_dir(Path(opts.recipe).stem, opts.label)
        ui.detail(f"run folder {run_dir}")
        try:
            ctx = stages.make_context(project, opts, run_dir)
            ui.detail(f"workspace {ws.root}; logs in {run_dir}; project data {project.describe()}")
            return body(ctx)
        finally:
            try:
                run_dir.rmdir()  # a run that stopped before writing anything leaves no folder
            except OSError:
                pass


COMPILER_DEFINES = ("CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER")


def check_compiler(opts: Options, project: ProjectRoot) -> None:
    """A command that compiles stops here without a C/C++ compiler: before the lock, a run
    folder or a fetch (exit 7). A recipe or -D that names its own compiler is checked when
    that component is built."""
    from onebit_build.building.builder import missing_compiler  # as the other commands' modules: loaded when used

    _, recipe = stages.load_pins_and_recipe(project, opts)
    named = [k for c in recipe.components for k, _ in c.defines] + [d.name for d in opts.defines]
    if any(k in COMPILER_DEFINES for k in named):
        return
    problem = missing_compiler((), os.environ)
    if problem is not None:
        raise problem


def given_run_dir(path: Path) -> Path:
    """``--run-dir DIR``: a new or empty folder (a run never writes into an older run's folder,
    so that what a workflow uploads from it is this run's)."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(f"--run-dir {path} already exists and is not an empty folder",
                          hint="give a folder that does not exist yet: a run never reuses an older run's folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def job(opts: Options, project: ProjectRoot) -> int:
    return in_workspace(opts, project, lambda ctx: stages.run_job(ctx, opts))


def pins_lock(opts: Options, project: ProjectRoot) -> int:
    def body(ctx: Context) -> int:
        from onebit_build import pipeline
        from onebit_build.core.pins import apply_lock, load_pins, read_lock

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
        from onebit_build.building.patch import export_series

        (source,) = opts.sources
        pins, _ = stages.load_pins_and_recipe(project, opts)
        pins.get(source)
        fetched = pipeline.run_fetch(ctx, pins, [source])
        tree = _tree_as_it_is(ctx, source, fetched[source].commit)
        written = export_series(tree, ctx.patches_dir / source, log=ctx.run_dir / "patch.log")
        for p in written:
            ui.info(f"  {p}")
        ui.info(f"wrote {len(written)} patch(es) to {ctx.patches_dir / source}")
        return 0

    return in_workspace(opts, project, body)


def _tree_as_it_is(ctx: Context, source: str, commit: str):
    """The prepared tree of ``source`` as it is now (the user may have committed changes in
    it), found by its pin and the current patch series."""
    from onebit_build.building.patch import PreparedTree, canonical_path, list_patches, patch_digest
    from onebit_build.core.gitops import Git

    patches = list_patches(ctx.patches_dir, source)
    digest = patch_digest(commit, patches)
    path = canonical_path(ctx.workspace, source, commit, digest)
    if not path.exists():
        raise OnebitError(f"no prepared tree for {source} at {path}", hint="run 'onebit-build patch' first, commit your changes in that tree, then export")
    head = Git(path).out("rev-parse", "HEAD")
    return PreparedTree(source=source, path=path, commit=commit, head=head, patches=patches, patch_digest=digest, reused=True)


# --------------------------------------------------------------------------- using a build


def install(opts: Options, project: ProjectRoot) -> int:
    """Build if needed, then copy the relocatable ``bin/`` tree and the manifest into a prefix."""
    from dataclasses import replace

    if opts.prefix is None:
        raise ConfigError("install needs --prefix DIR", hint="e.g. onebit-build install --prefix ~/.local/llama")
    check_target_folder(opts.prefix, "--prefix")  # before building: a file or a read-only folder there is named now

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
            _copy(src, target)
        done.append(target)
    _copy(manifest, share / "build-manifest.json")
    done.append(share / "build-manifest.json")
    return done


def _copy(src: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copy2(src, tmp)
    tmp.replace(target)


def _output_files(path: Path) -> list[Path]:
    """An output and, for a shared library, the links beside it that name it."""
    if not path.exists():
        raise OnebitError(f"build output {path} is missing", hint="run 'onebit-build build' again")
    return [path, *(p for p in path.parent.iterdir() if p.is_symlink() and p.resolve() == path.resolve())]


def serve(opts: Options, project: ProjectRoot) -> int:
    """Build if needed (holding the workspace lock), then run llama-server in the foreground
    until Ctrl-C (without the lock: other runs may use the workspace meanwhile)."""
    from dataclasses import replace

    from onebit_build.running.model import has_chat_template
    # Imported here, as the other commands' modules are: a command loads only what it runs.
    from onebit_build.running.ports import bind_error, bind_problem
    from onebit_build.running.server import ServerSpec, serve_foreground

    problem = bind_problem(opts.serve.host, opts.serve.port)
    if problem is not None:  # before anything is built: the user's port is never swapped for another
        raise bind_error(opts.serve.host, opts.serve.port, problem)
    found: dict = {}

    def body(ctx: Context) -> int:
        pins, recipe = stages.load_pins_and_recipe(project, opts)
        built = stages.build_part(ctx, replace(opts, command="build"), pins, recipe)
        assert built is not None
        found["server"] = stages.server_of(built.builds, recipe)
        found["model"] = stages.resolve_model(recipe, opts, models_dir=ctx.workspace.models, log=ctx.run_dir / "model.log")
        found["env"] = stages.with_runtime_env(recipe, opts.toolchain_root).smoke.env
        found["log"] = ctx.run_dir / "server.log"
        found["log"].parent.mkdir(parents=True, exist_ok=True)
        return 0

    in_workspace(opts, project, body)
    spec = ServerSpec(binary=found["server"], model=found["model"].path, log=found["log"], host=opts.serve.host, port=opts.serve.port,
                      fixed_port=True, extra_args=opts.serve.extra, env=found["env"], health_timeout_s=300.0)
    return serve_foreground(spec, has_chat_template=has_chat_template(found["model"].path) is not False)


# --------------------------------------------------------------------------- bench


def bench(opts: Options, project: ProjectRoot) -> int:
    """Benchmark: parse and check everything first, then take the bench lock and run."""
    from onebit_build.core.errors import SmokeError
    from onebit_build.running import bench as b

    bo = opts.bench
    assert bo is not None
    if bo.out is not None:
        check_target_folder(bo.out, "--out")
    ws = Workspace(root=opts.workspace)
    configs = b.parse_configs(list(bo.configs))
    builds = b.parse_builds(list(bo.builds))
    prompts = b.load_prompts(bo.prompts or project.path / "smoke" / "prompts")
    given = b.load_expectations(bo.expect, tuple(p.name for p in prompts)) if bo.expect else ()
    recipe = stages.load_pins_and_recipe(project, opts, locked=False)[1] if not builds or opts.model is None else None
    env: tuple[tuple[str, str], ...] = ()
    if not builds:
        builds = (b.Build(name=recipe.name, server=b.server_in(latest_server(ws, recipe.name))),)
        env = stages.with_runtime_env(recipe, opts.toolchain_root).smoke.env
    lock_path = bo.lock or ws.root / "bench.lock"
    with b.BenchLock(lock_path, f"onebit-build bench {', '.join(c.name for c in configs)}", wait_s=bo.wait_s):
        run_dir = bo.out or ws.new_run_dir(recipe.name if recipe is not None and not bo.builds else "local", "bench")
        run_dir.mkdir(parents=True, exist_ok=True)
        mf = stages.resolve_model(recipe, opts, models_dir=ws.models, log=run_dir / "model.log")
        devices = b.resolve_devices(builds, bo.devices, env=env, log_dir=run_dir / "logs")
        variants = b.make_variants(configs, builds, devices)
        ui.info(f"bench: {len(variants)} variant(s) x {bo.rounds} round(s) x {len(prompts)} prompts, {bo.decode_tokens} tokens each; "
                f"baseline {variants[0].name}; model {mf.path.name}; lock {lock_path}")
        result = b.run_bench(b.BenchRequest(
            variants=variants, model=mf, prompts=prompts, run_dir=run_dir, rounds=bo.rounds, decode_tokens=bo.decode_tokens,
            prefix_tokens=bo.prefix_tokens, tie_margin=bo.tie_margin, ctx_size=bo.ctx_size, given=given, env=env, lock=lock_path,
        ))
        outputs = b.write_outputs(result, run_dir)
    sys.stdout.write("\n" + b.render_table(result) + "\n")
    for what in ("table", "plot", "json"):
        ui.info(f"{what}: {getattr(outputs, what)}")
    bad = [c for c in result.cells if not c.valid]
    if bad:
        ui.warn(f"{len(bad)} of {len(result.cells)} figures are INVALID (their answers did not hold); first: {bad[0].variant} {bad[0].prompt}: {bad[0].reason}")
        return SmokeError.exit_code
    return 0


def latest_server(ws: Workspace, recipe: str) -> Path:
    """The llama-server of the recipe's latest build in the workspace (no build is started)."""
    from onebit_build.building.manifest import latest_path, load_latest

    man = load_latest(ws, recipe)
    if man is None:
        raise NotAvailableError(f"no build of recipe {recipe} in {ws.root} (no {latest_path(ws, recipe).name} manifest)",
                                hint=f"run 'onebit-build --recipe {recipe} build' first, or pass --server PATH")
    out = man.output("llama-server")
    if out is None:
        raise NotAvailableError(f"the {recipe} build lists no llama-server output ({latest_path(ws, recipe)})", hint="pass --server PATH")
    return Path(out.path)


# --------------------------------------------------------------------------- verify-run


def verify_run(opts: Options, project: ProjectRoot) -> int:
    """``verify-run``: everything the user gave is checked first (a bad working path, a build
    of another recipe, too few rounds: one line, nothing built or written); then, holding
    the workspace and the bench lock, build the recipe, compare, and give the verdict."""
    from dataclasses import replace

    from onebit_build.building.manifest import load_manifest
    from onebit_build.running.bench import BenchLock, load_prompts, parse_config
    from onebit_build.verification import run as vrun
    from onebit_build.verification.speed import MIN_ROUNDS
    from onebit_build.verification.working import resolve_new, resolve_working, same_build

    vo = opts.verify_run
    assert vo is not None
    pins, recipe = stages.load_pins_and_recipe(project, opts)
    working = resolve_working(vo.working, recipe=recipe.name)
    rounds = vo.rounds or recipe.verification.rounds
    if rounds < MIN_ROUNDS:
        raise ConfigError(f"--rounds {rounds}: a speed verdict needs at least {MIN_ROUNDS} rounds", hint=f"pass --rounds {MIN_ROUNDS} or more")
    if vo.adopt and not any(c.artifacts for c in recipe.components):
        raise ConfigError(f"--adopt: recipe {recipe.name} collects no kernel artifacts, so there is no reference to adopt",
                          hint="drop --adopt; references exist for recipes with an 'artifacts:' collector")
    new_args = parse_config(f"new={vo.new_args}").args
    working_args = parse_config(f"working={vo.working_args}").args
    prompts = load_prompts(project.path / "smoke" / "prompts")
    lock_path = vo.lock or Workspace(root=opts.workspace).root / "bench.lock"

    def body(ctx: Context) -> int:
        with BenchLock(lock_path, f"onebit-build verify-run {recipe.name}", wait_s=vo.wait_s):
            ui.result(f"run folder: {ctx.run_dir}")
            built = stages.build_part(ctx, replace(opts, command="build"), pins, recipe)
            assert built is not None
            new = resolve_new(built.manifest, load_manifest(built.manifest))
            if same_build(new, working):
                raise ConfigError(f"--working {vo.working} is the new build itself ({new.folder})",
                                  hint="give the working build to compare with: another folder, a copy, or an install prefix")
            run_recipe = stages.with_runtime_env(recipe, ctx.toolchain_root)
            model = stages.resolve_model(recipe, opts, models_dir=ctx.workspace.models, log=ctx.run_dir / "model.log")
            budget_s = vo.budget_s or recipe.verification.budget_s
            tolerance = vo.tolerance or recipe.verification.tolerance
            ui.info(f"verify-run: new {new.folder}; working {working.folder} ({working.given_as}); {rounds} rounds,"
                    f" then more until decided, up to {budget_s:g} s per device; tolerance ±{tolerance:.0%};"
                    f" lock {lock_path}")
            req = vrun.RunRequest(
                recipe=run_recipe, new=vrun.Side(role=vrun.NEW, build=new, args=new_args),
                working=vrun.Side(role=vrun.WORKING, build=working, args=working_args), model=model, run_dir=ctx.run_dir,
                prompts=prompts, rounds=rounds, tolerance=tolerance, budget_s=budget_s,
                refs_dir=project.references / recipe.name, lock=lock_path, junit=opts.junit, adopt=vo.adopt,
            )
            lock_file = pins.lock_path
            out = vrun.run(req, project_files=(("pins.lock", lock_file),) if lock_file.is_file() else ())
        vrun.print_outcome(out)
        if out.reference is not None and out.adopted.startswith("wrote"):
            rel = out.reference.relative_to(project.path) if out.reference.is_relative_to(project.path) else out.reference
            ui.result(f"  commit it: git add {rel} && git commit -m 'references: {recipe.name} artifacts for this toolchain' -- {rel}")
        return out.verdict.exit_code

    return in_workspace(opts, project, body)
