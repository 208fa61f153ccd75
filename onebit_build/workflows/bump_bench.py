"""The bench gate of ``pins bump``: the old pin's llama-server against the new one, side by
side, as ``onebit-build bench --build old=... --build new=...`` measures them (interleaved
rounds, a fresh server each, greedy answers checked against the old build's), under the
bench lock.

Two upstream commits may sum in another order, so a greedy token may flip where the old
build's two likeliest tokens were close: the bump excuses a flip within ``tie_margin`` nats
(``job.bump.TIE_MARGIN`` by default, wider than the bench's default, which is for one build on two devices).
Any other departure makes the new build's figure invalid, and the gate fails."""

from __future__ import annotations

from pathlib import Path

from onebit_build.core import ui
from onebit_build.spec.model_spec import served_name
from onebit_build.job.job import Job
from onebit_build.job.smoke import resolve_model, with_runtime_env
from onebit_build.running import bench as b


def bench_old_new(job: Job, *, old: Path, new: Path, rounds: int, out: Path,
                  tie_margin: float) -> tuple[str, list[str]]:
    """The table of old against new on the recipe's smoke devices, and the figures whose
    answers did not hold (each with why; none when the gate passes)."""
    recipe, settings, ws = job.recipe, job.settings, job.workspace
    out.mkdir(parents=True, exist_ok=True)
    builds = (b.Build(name="old", server=old), b.Build(name="new", server=new))
    env = with_runtime_env(recipe, settings.toolchain_root).smoke.env
    lock = ws.root / "bench.lock"
    with b.BenchLock(lock, "onebit-build pins bump (bench)"):
        mf = resolve_model(recipe, settings, models_dir=ws.models, log=out / "model.log", lock=job.project.models_lock)
        devices = b.resolve_devices(builds, recipe.smoke.devices, env=env, log_dir=out / "logs")
        variants = b.make_variants(b.parse_configs(()), builds, devices)
        ui.info(f"  bench: {len(variants)} variants x {rounds} rounds, old first (the baseline)")
        result = b.run_bench(b.BenchRequest(
            variants=variants, model=mf, prompts=b.load_prompts(job.project.prompts), run_dir=out, rounds=rounds,
            env=env, lock=lock, tie_margin=tie_margin,
            alias=served_name(recipe.model, sha256=mf.sha256, file=mf.path)))
        b.write_outputs(result, out)
    table = b.render_table(result)
    for line in table.splitlines():
        ui.info(f"  {line}")
    return table, [f"{c.variant} {c.prompt}: {c.reason}" for c in result.cells if not c.valid]
