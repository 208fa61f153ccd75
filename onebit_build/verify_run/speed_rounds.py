"""The speed part of a verification run on one device: interleaved rounds of both builds
(the bench's, a fresh server of each per round, both up at once and asked each prompt in
turn), first ``rounds`` of them, then one more at a time until every metric is decided or
the time budget is spent (:func:`speed.another_round`).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Callable

from onebit_build.core import ui
from onebit_build.running import server as srvmod
from onebit_build.running.bench.plan import Variant
from onebit_build.running.bench.run import BenchRequest, run_bench
from onebit_build.running.measure import Sample
from onebit_build.verify_run import speed as speed_mod
from onebit_build.verify_run.mapped_files import Provenance, inspect_process
from onebit_build.verify_run.request import RunRequest


METRICS = ("decode", "prompt")
PROMPT_MIN_TOKENS = 32  # the shortest prompt prompt speed is judged on (when any is as long)
# Tokens generated per timed request (--decode-tokens): fewer than 16 time the request's own
# overhead more than decoding; more than 1024 no longer fit beside a prompt in the smoke
# context (2048 tokens).
DECODE_MIN_TOKENS = 16
DECODE_MAX_TOKENS = 1024
Verdicts = dict[tuple[str, str], speed_mod.SpeedVerdict]


def prompt_speed_prompts(samples: tuple[Sample, ...]) -> set[str]:
    """The prompts prompt speed is judged on: those of at least :data:`PROMPT_MIN_TOKENS`
    tokens (a few tokens are processed in milliseconds, which time the server's overhead
    and the machine's scheduling, not prompt speed); all of them when none is that long. Pure."""
    every = {s.prompt for s in samples}
    long = {s.prompt for s in samples if s.valid and s.prompt_n is not None and s.prompt_n >= PROMPT_MIN_TOKENS}
    return long or every


def verdicts_of(samples: tuple[Sample, ...], role_of: dict[str, str], *, device: str, tolerance: float,
                rounds_asked: int, budget: speed_mod.SpeedBudget | None = None) -> Verdicts:
    """Per metric, the verdict of the samples so far (invalid answers count as no figure). Pure."""
    out = {}
    counted = {"decode": {s.prompt for s in samples}, "prompt": prompt_speed_prompts(samples)}
    for metric in METRICS:
        ms = [speed_mod.Measure(round=s.round, side=role_of[s.variant], prompt=s.prompt,
                                tok_s=(s.decode_tok_s if metric == "decode" else s.prompt_tok_s) if s.valid else None)
              for s in samples if s.prompt in counted[metric]]
        out[(device, metric)] = speed_mod.speed_verdict(ms, tolerance=tolerance, rounds_asked=rounds_asked,
                                                        budget=budget)
    return out


def load_average() -> float | None:
    """The 1-minute load average of this machine (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def speed_on(req: RunRequest, device: str, hasher: Callable[[Path], str]) -> tuple[Verdicts, list[Provenance]]:
    """The sequential rounds on ``device`` and their verdicts; every timed server's
    provenance is checked while it runs, and the load average read as it starts."""
    threads = ("-t", str(req.recipe.smoke.threads)) if req.recipe.smoke.threads else ()
    variants = tuple(Variant(name=f"{s.role}/{device}", config=s.role, build=s.role, device=device,
                             server=s.build.server, args=(*threads, *s.args)) for s in req.sides)
    side_of = {v.name: s for v, s in zip(variants, req.sides)}
    role_of = {name: s.role for name, s in side_of.items()}
    provs: list[Provenance] = []
    loads: list[float] = []
    t0 = time.monotonic()

    def on_start(server: srvmod.Server, v: Variant, rnd: int) -> None:
        side = side_of[v.name]
        provs.append(inspect_process(server.pid, side=side.role, device=device, expected=side.build.expected_files,
                                     hasher=hasher))
        load = load_average()
        if load is not None:
            loads.append(load)

    def more(samples: tuple[Sample, ...], rounds_done: int) -> bool:
        now = verdicts_of(samples, role_of, device=device, tolerance=req.tolerance, rounds_asked=req.rounds)
        return speed_mod.another_round([v.label for v in now.values()],
                                       valid_rounds=max(len(v.ratios) for v in now.values()), rounds_done=rounds_done,
                                       min_rounds=req.rounds, elapsed_s=time.monotonic() - t0, budget_s=req.budget_s)

    breq = BenchRequest(variants=variants, model=req.model, prompts=req.prompts, run_dir=req.run_dir, rounds=req.rounds,
                        decode_tokens=req.decode_tokens, ctx_size=req.recipe.smoke.ctx_size, env=req.env,
                        health_timeout_s=req.recipe.smoke.health_timeout_s, lock=req.lock, together=True)
    result = run_bench(breq, progress=lambda line: ui.info(f"  {line}"), on_start=on_start, more=more)
    budget = speed_mod.SpeedBudget(rounds=result.rounds_run, seconds=time.monotonic() - t0, budget_s=req.budget_s,
                              load=statistics.mean(loads) if loads else None, cores=os.cpu_count())
    return verdicts_of(result.samples, role_of, device=device, tolerance=req.tolerance, rounds_asked=req.rounds,
                       budget=budget), provs
