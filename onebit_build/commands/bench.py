"""``bench``: interleaved, answer-checked, locked benchmarks of configs, builds or devices."""

from __future__ import annotations


from onebit_build.building.manifest import latest_server
from onebit_build.commands import Command
from onebit_build.core import ui
from onebit_build.core.errors import SmokeError
from onebit_build.core.model_spec import served_name
from onebit_build.core.project import ProjectRoot
from onebit_build.core.workspace import check_target_folder
from onebit_build.job.model import load_pins_and_recipe
from onebit_build.job.smoke import resolve_model, with_runtime_env
from onebit_build.options import Options
from onebit_build.running import bench as b


def bench(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Benchmark: parse and check everything first, then take the bench lock and run."""
    bo = opts.bench
    assert bo is not None  # the parser makes it for bench
    if bo.out is not None:
        check_target_folder(bo.out, "--out")
    ws = opts.ws
    configs = b.parse_configs(list(bo.configs))
    builds = b.parse_builds(list(bo.builds))
    prompts = b.load_prompts(bo.prompts or project.prompts)
    given = b.load_expectations(bo.expect, tuple(p.name for p in prompts)) if bo.expect else ()
    recipe = load_pins_and_recipe(project, opts.recipe,
                                  defines=opts.defines)[1] if not builds or opts.model is None else None
    env: tuple[tuple[str, str], ...] = ()
    if not builds:
        builds = (b.Build(name=recipe.name, server=b.server_in(latest_server(ws, recipe.name))),)
        env = with_runtime_env(recipe, opts.toolchain_root).smoke.env
    lock_path = bo.lock or ws.root / "bench.lock"
    with b.BenchLock(lock_path, f"onebit-build bench {', '.join(c.name for c in configs)}", wait_s=bo.wait_s):
        run_dir = bo.out or ws.new_run_dir(recipe.name if recipe is not None and not bo.builds else "local", "bench")
        run_dir.mkdir(parents=True, exist_ok=True)
        mf = resolve_model(recipe, opts, models_dir=ws.models, log=run_dir / "model.log", lock=project.models_lock)
        devices = b.resolve_devices(builds, bo.devices, env=env, log_dir=run_dir / "logs")
        variants = b.make_variants(configs, builds, devices)
        ui.info(f"bench: {len(variants)} variant(s) x {bo.rounds} round(s) x {len(prompts)} prompts, "
                f"{bo.decode_tokens} tokens each; "
                f"baseline {variants[0].name}; model {mf.path.name}; lock {lock_path}")
        result = b.run_bench(b.BenchRequest(
            variants=variants, model=mf, prompts=prompts, run_dir=run_dir, rounds=bo.rounds,
                                            decode_tokens=bo.decode_tokens,
            prefix_tokens=bo.prefix_tokens, tie_margin=bo.tie_margin, ctx_size=bo.ctx_size, given=given, env=env,
                                            lock=lock_path,
            alias=served_name(recipe.model if recipe else None, sha256=mf.sha256, file=mf.path),
        ))
        outputs = b.write_outputs(result, run_dir)
    ui.answer_block("\n" + b.render_table(result) + "\n")
    for what in ("table", "plot", "json"):
        ui.info(f"{what}: {getattr(outputs, what) or 'not drawn (' + b.PLOT_EXTRA_HINT + ')'}")
    bad = [c for c in result.cells if not c.valid]
    if bad:
        ui.warn(f"{len(bad)} of {len(result.cells)} figures are INVALID (their answers did not hold); first: "
                f"{bad[0].variant} {bad[0].prompt}: {bad[0].reason}")
        return SmokeError.exit_code
    return 0
