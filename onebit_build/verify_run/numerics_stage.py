"""verify-run's numerics part: per device, the evaluation text scored by the working build and
by the new one, the new judged against the working by the recipe's
``numerics.budgets.reference`` (running/numerics.py computes the figures)."""

from __future__ import annotations

from typing import Any

from onebit_build.core.errors import SmokeError
from onebit_build.running import numerics as nm
from onebit_build.running.devices import CPU_DEVICE
from onebit_build.running.numerics import Scored
from onebit_build.running.numerics_run import Runner, budget_of
from onebit_build.verify_run.verdict import NumericsComparison, Part, numerics_not_checked, numerics_part


def numerics_stage(req: Any, devices: tuple[str, ...]) -> Part:
    """Per device, the evaluation text scored by the working build, then by the new one (one
    server each, all layers on the device), the new judged against the working by the
    recipe's ``numerics.budgets.reference``: the same device, two builds."""
    spec = req.recipe.numerics
    if spec is None or req.numerics_text is None:
        return numerics_not_checked("the recipe has no numerical check")
    budget = budget_of(spec.reference)
    smoke = req.recipe.smoke
    out: list[NumericsComparison] = []
    for dev in devices:
        scored: dict[str, tuple[Scored, ...]] = {}
        tokens: tuple[int, ...] | None = None
        error = ""
        for side in req.sides:
            runner = Runner(server_bin=side.build.server, model=req.model.path, spec=spec, ctx_size=smoke.ctx_size,
                            threads=smoke.threads, env=req.env, health_timeout_s=smoke.health_timeout_s,
                            logs=req.run_dir / "logs", extra_args=side.args, log_tag=side.role,
                            timeout_s=lambda r: smoke.request_base_s + r.batch / smoke.min_tok_s)
            level, layers = ("cpu", "0") if dev == CPU_DEVICE else ("all", "all")
            try:
                got, tokens = runner.run(dev, level, layers, req.numerics_text, tokens)
            except SmokeError as exc:
                error = f"the {side.role} build's scoring failed: {exc.message}"
                break
            scored[side.role] = got.scored
        if error:
            out.append(NumericsComparison(device=dev, figures=None, error=error))
            continue
        try:
            fig = nm.compare(scored[req.working.role], scored[req.new.role])
        except ValueError as exc:
            out.append(NumericsComparison(device=dev, figures=None, error=str(exc)))
            continue
        out.append(NumericsComparison(device=dev, figures=fig.to_dict(),
                                      missed=tuple(str(m) for m in nm.misses(fig, budget))))
    return numerics_part(out, budget.to_dict())
