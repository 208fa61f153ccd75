"""``verify-run --adopt`` for the smoke stage's speed: the box measures the working build
with the smoke workload on every compared device and adopts those figures as its speed
references (references/<recipe>/smoke-speed.json), so that later smoke runs compare like
with like instead of with a number from another workload."""

from __future__ import annotations


from onebit_build.checking.references import speed_file
from onebit_build.core.errors import SmokeError
from onebit_build.running import smoke as smoke_mod
from onebit_build.running import speed_baseline as speed_ref
from onebit_build.running.speed_baseline import SpeedReference, SpeedWorkload


def adopt_smoke_speed(req, devices: tuple[str, ...]) -> list[str]:
    """Measure and adopt; one line per device saying what happened. ``req`` is the
    verification run's request (its working side, model, recipe and run folder)."""
    said, new = [], []
    spec, working = req.recipe.smoke, req.working
    for device in devices:
        log = req.run_dir / "logs" / f"adopt-speed-{device}.log"
        try:
            speed = smoke_mod.measure_speed(
                server_bin=working.build.server,
                model=req.model,
                spec=spec,
                device=device,
                log=log,
                threads=spec.threads,
                extra_args=tuple(working.args),
            )
        except SmokeError as exc:
            said.append(f"{device}: speed not adopted: {exc}")
            continue
        if not speed.valid or speed.decode_tok_s is None or speed.workload is None:
            said.append(f"{device}: speed not adopted: {speed.reason}")
            continue
        source = f"the working build {working.build.folder}, verify-run {req.run_dir.name}"
        new.append(
            SpeedReference(
                device=device,
                decode_tok_s=speed.decode_tok_s,
                workload=SpeedWorkload.from_dict(speed.workload, "measured"),
                source=source,
            )
        )
    if new:
        said += speed_ref.adopt(speed_file(req.refs_dir), new)
    return said
