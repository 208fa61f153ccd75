"""``bench``: interleaved, answer-checked, locked benchmarks of configs, builds or devices."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="bench", help="benchmark llama-server configs, builds or devices: interleaved, answer-checked,"
                  " locked; table, JSON and plot", rank=31, takes_model=True)


def arguments(bp: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import positive_int
    from onebit_build.running.bench.settings import DEFAULTS as D

    bp.add_argument("--config", metavar="NAME=ARGS", action="append", dest="bench_configs",
                    help="extra llama-server arguments under a name, e.g. t1='-t 1' (repeatable; "
                         "the first is the baseline)")
    bp.add_argument("--server", metavar="[NAME=]PATH", action="append", dest="bench_builds",
                    help="a llama-server binary to benchmark as it is, without the build pipeline (repeatable)")
    bp.add_argument("--build", metavar="[NAME=]DIR", action="append", dest="bench_builds",
                    help="a build folder holding bin/llama-server (repeatable; default: the recipe's latest build)")
    bp.add_argument("--device", metavar="NAME", action="append", dest="bench_devices",
                    help="device to serve on: CPU, Vulkan0, CUDA0, HRX20..., or 'all' for the CPU and every device the "
                         "build lists (repeatable; default CPU)")
    bp.add_argument("--rounds", type=positive_int, default=D.rounds,
                    help=f"rounds of every variant, interleaved (default {D.rounds})")
    bp.add_argument("--decode-tokens", type=positive_int, default=D.decode_tokens, metavar="N",
                    help=f"tokens generated per request (default {D.decode_tokens})")
    bp.add_argument("--prefix-tokens", type=positive_int, default=D.prefix_tokens, metavar="K",
                    help=f"answers must match the baseline's first K generated tokens (default {D.prefix_tokens})")
    bp.add_argument("--expect", metavar="FILE",
                    help="expected answer prefixes: an earlier bench.json or a YAML 'prompt: text' mapping")
    bp.add_argument("--tie-margin", type=float, default=D.tie_margin, metavar="NATS",
                    help="excuse a divergence where the baseline's two likeliest tokens were closer "
                         "than this in log-probability"
                         f" and the variant took the second (default {D.tie_margin:g})")
    bp.add_argument("--prompts", metavar="DIR",
                    help="folder with code.txt, prose.txt, short.txt (default: smoke/prompts)")
    bp.add_argument("--ctx-size", type=positive_int, default=D.ctx_size, metavar="N",
                    help=f"server context size (default {D.ctx_size})")
    bp.add_argument("--lock", metavar="FILE", dest="bench_lock",
                    help="the bench lock file (default: bench.lock in the workspace)")
    bp.add_argument("--wait", metavar="SECONDS", type=float, nargs="?", const=D.lock_wait_s, default=0.0,
                    help="when another bench holds the lock, wait for it (default: fail at once; "
                         "--wait alone: up to an hour)")
    bp.add_argument("--out", metavar="DIR", help="write the results here (default: a new run folder in the workspace)")


@dataclass(frozen=True, kw_only=True)
class BenchFlags:
    """``bench``: what to compare and how (defaults: running.bench.settings.DEFAULTS)."""

    configs: tuple[str, ...] = ()
    builds: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    rounds: int
    decode_tokens: int
    prefix_tokens: int
    tie_margin: float
    ctx_size: int
    expect: Path | None = None
    prompts: Path | None = None
    lock: Path | None = None
    wait_s: float = 0.0
    out: Path | None = None


def options(args: Mapping[str, Any]) -> BenchFlags:
    """``bench``'s own options, their paths checked before any work."""
    from onebit_build.commands._options import checked_path, existing, existing_folder, file_to_write
    from onebit_build.core.safepath import FILE

    get = args.get
    return BenchFlags(
        configs=tuple(get("bench_configs") or ()), builds=tuple(get("bench_builds") or ()),
                        devices=tuple(get("bench_devices") or ()),
        rounds=get("rounds"), decode_tokens=get("decode_tokens"), prefix_tokens=get("prefix_tokens"),
        tie_margin=max(0.0, get("tie_margin")), ctx_size=get("ctx_size"),
        expect=existing(get("expect"), "--expect", FILE),
        prompts=existing_folder(get("prompts"), "--prompts"),
        lock=file_to_write(get("bench_lock"), "--lock"), wait_s=max(0.0, get("wait") or 0.0),
        out=checked_path(get("out"), "--out"),
    )


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Benchmark: parse and check everything first, then take the bench lock and run."""
    from onebit_build.checking.manifest import latest_server
    from onebit_build.core import ui
    from onebit_build.spec.model_spec import served_name
    from onebit_build.core.workspace import check_target_folder
    from onebit_build.job.job import load_pins_and_recipe
    from onebit_build.job.smoke import resolve_model, with_runtime_env
    from onebit_build.running import bench as b

    bo = opts.own
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
        mf = resolve_model(recipe, opts.settings, models_dir=ws.models, log=run_dir / "model.log",
                           lock=project.models_lock)
        devices = b.resolve_devices(builds, bo.devices, env=env, log_dir=run_dir / "logs")
        variants = b.make_variants(configs, builds, devices)
        ui.info(f"bench: {len(variants)} variant(s) x {bo.rounds} round(s) x {len(prompts)} prompts, "
                f"{bo.decode_tokens} tokens each; "
                f"baseline {variants[0].name}; model {mf.path.name}; lock {lock_path}")
        result = b.run_bench(b.BenchRequest(
            variants=variants, model=mf, prompts=prompts, run_dir=run_dir, rounds=bo.rounds,
            decode_tokens=bo.decode_tokens, prefix_tokens=bo.prefix_tokens, tie_margin=bo.tie_margin,
            ctx_size=bo.ctx_size, given=given, env=env, lock=lock_path,
            alias=served_name(recipe.model if recipe else None, sha256=mf.sha256, file=mf.path),
        ))
        outputs = b.write_outputs(result, run_dir)
    return shown(result, outputs)


def shown(result, outputs) -> int:
    """The table and where the outputs went; the exit code (a figure whose answers did not hold
    makes the run fail)."""
    from onebit_build.core import ui
    from onebit_build.core.errors import SmokeError
    from onebit_build.running import bench as b

    ui.answer_lines(["", *b.table_lines(result), ""])
    for what in ("table", "plot", "json"):
        ui.info(f"{what}: {getattr(outputs, what) or 'not drawn (' + b.PLOT_EXTRA_HINT + ')'}")
    bad = [c for c in result.cells if not c.valid]
    if bad:
        ui.warn(f"{len(bad)} of {len(result.cells)} figures are INVALID (their answers did not hold); first: "
                f"{bad[0].variant} {bad[0].prompt}: {bad[0].reason}")
        return SmokeError.exit_code
    return 0
