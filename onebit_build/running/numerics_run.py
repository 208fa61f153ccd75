"""Smoke's numerical check, run: score the evaluation text on the CPU and on every other
device at each offload level, compare each run with its base and judge it by the recipe's
budgets (:mod:`numerics` computes the figures, :mod:`numerics_ref` keeps the reference).

- The CPU run is compared with the committed reference of the recipe's model and this
  toolchain, when there is one (else its figures are recorded and the check says how to
  record the reference).
- Every other device is compared with this run's CPU figures, at each ``offload`` level: all
  layers, about half (``block_count // 2``) and none (``-ngl 0``: the weights stay in host
  memory and only the work of long batches goes to the device).

Each scoring run is one server of its own (``-ub`` the recipe's ``ubatch``), stopped before
the next starts. Failed runs and misses are checks, not exceptions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from onebit_build.core.errors import SmokeError
from onebit_build.spec.numerics_spec import NumericsSpec
from onebit_build.running import numerics as nm
from onebit_build.running import server as srvmod
from onebit_build.running.devices import CPU_DEVICE
from onebit_build.running.gguf import block_count
from onebit_build.running.numerics_ref import NumericsReference, NumericsWorkload
from onebit_build.running.server_args import ServerSpec
from onebit_build.running.smoke_checks import SmokeCheck


@dataclass(frozen=True, kw_only=True)
class ScoreRun:
    """One server's scoring of the text."""

    device: str
    level: str  # "cpu" for the CPU run, else the offload level
    layers: str  # the -ngl it ran with
    scored: tuple[nm.Scored, ...]
    seconds: float
    log: Path
    batches_note: str = ""  # why its batches were not the schedule's ("" when they were)

    @property
    def label(self) -> str:
        return self.device if self.level == "cpu" else f"{self.device} -ngl {self.layers} ({self.level})"


@dataclass(frozen=True, kw_only=True)
class NumericsResult:
    checks: tuple[SmokeCheck, ...]
    runs: tuple[ScoreRun, ...]
    figures: tuple[tuple[str, str, nm.Figures], ...] = ()  # (device, level, figures against its base)
    workload: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None  # the reference file the CPU run was compared with
    plot: Path | None = None


def levels_of(spec: NumericsSpec, layers: int | None) -> list[tuple[str, str]]:
    """(level, -ngl) per offload level of the recipe. Pure."""
    out = []
    for level in spec.offload:
        if level == "all":
            out.append((level, "all"))
        elif level == "none":
            out.append((level, "0"))
        elif layers is not None and layers >= 2:
            out.append((level, str(layers // 2)))
    return out


def score(server: srvmod.Server, tokens: tuple[int, ...], spec: NumericsSpec, *,
          timeout_s: Callable[[nm.Request], float], progress: Callable[[int, int], None] | None = None,
          ) -> tuple[nm.Scored, ...]:
    """Score ``tokens`` on a running server by the recipe's schedule; SmokeError when a
    request fails or its answer cannot be read."""
    import requests

    plan = nm.schedule(rounds=spec.rounds, jump=spec.jump, steps=spec.steps)
    out: list[nm.Scored] = []
    for i, req in enumerate(plan):
        target = tokens[req.length]
        body = nm.completion_body(tokens[:req.length], target, top_k=spec.top_k)
        timeout = timeout_s(req)
        try:
            status, data = server.post_json("/completion", body, timeout=timeout)
        except requests.Timeout:
            raise SmokeError(f"no answer within {timeout:.0f} s to the request that scores position "
                             f"{req.length} ({req.batch} tokens to evaluate)") from None
        except requests.RequestException as exc:
            raise SmokeError(f"the request that scores position {req.length} failed: {exc}") from None
        if status != 200 or not isinstance(data, dict):
            raise SmokeError(f"the server answered HTTP {status} to the request that scores position {req.length}")
        try:
            out.append(nm.scored_from_reply(data, req, target))
        except ValueError as exc:
            raise SmokeError(f"position {req.length}: {exc}") from None
        if progress is not None:
            progress(i + 1, len(plan))
    return tuple(out)


def tokenize(server: srvmod.Server, text: str) -> tuple[int, ...]:
    """The text as the server's tokenizer makes it, with the model's start token."""
    status, data = server.post_json("/tokenize", {"content": text, "add_special": True}, timeout=60.0)
    ids = data.get("tokens") if isinstance(data, dict) else None
    if status != 200 or not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise SmokeError(f"/tokenize answered HTTP {status} without a token list")
    return tuple(ids)


@dataclass(frozen=True, kw_only=True)
class Runner:
    """What every scoring run of one smoke needs."""

    server_bin: Path
    model: Path
    spec: NumericsSpec
    ctx_size: int
    threads: int | None
    env: tuple[tuple[str, str], ...]
    health_timeout_s: float
    logs: Path
    timeout_s: Callable[[nm.Request], float]
    status: Any = None  # ui.CheckStatus
    extra_args: tuple[str, ...] = ()  # more llama-server arguments (verify-run's --new-args, --working-args)
    log_tag: str = ""  # in the log's name, before the device (verify-run: new, working)

    def run(self, device: str, level: str, layers: str, text: str,
            tokens: tuple[int, ...] | None) -> tuple[ScoreRun, tuple[int, ...]]:
        """One server, the text scored on it; its tokens (from the server when ``tokens`` is None)."""
        from onebit_build.core.names import label_part

        tag = f"{self.log_tag}-" if self.log_tag else ""
        log = self.logs / f"numerics-{tag}{label_part(device)}-{level}.log"
        sspec = ServerSpec(binary=self.server_bin, model=self.model, log=log, device=device, ctx_size=self.ctx_size,
                           env=self.env, health_timeout_s=self.health_timeout_s, threads=self.threads,
                           layers=None if device == CPU_DEVICE else layers,
                           extra_args=(*self.extra_args, "-ub", str(self.spec.ubatch)))
        t0 = time.monotonic()
        server = srvmod.start(sspec)
        try:
            toks = tokens if tokens is not None else tokenize(server, text)
            need = nm.tokens_needed(rounds=self.spec.rounds, jump=self.spec.jump, steps=self.spec.steps)
            if len(toks) < need:
                raise SmokeError(f"the evaluation text is {len(toks)} tokens; the schedule reads {need}",
                                 hint="use a longer text or fewer rounds or steps in the recipe's numerics")
            if need > self.ctx_size:
                raise SmokeError(f"the schedule reads {need} tokens, more than the context ({self.ctx_size})",
                                 hint="raise smoke.ctx_size or score fewer positions")

            def shown(done: int, total: int) -> None:
                if self.status is not None:
                    self.status.running(f"{device} numerics ({level}): {done}/{total} positions")
            scored = score(server, toks, self.spec, timeout_s=self.timeout_s, progress=shown)
        finally:
            server.stop()
        plan = nm.schedule(rounds=self.spec.rounds, jump=self.spec.jump, steps=self.spec.steps)
        return (ScoreRun(device=device, level=level, layers=layers, scored=scored, seconds=time.monotonic() - t0,
                         log=log, batches_note=nm.batches_as_planned(scored, plan, self.spec.ubatch)), toks)


def judged(device: str, level: str, run: ScoreRun | None, base: tuple[nm.Scored, ...] | None,
           budget: nm.NumericsBudget, against: str) -> tuple[SmokeCheck, nm.Figures | None]:
    """The check of one run against its base. Pure."""
    name = "numerics" if level == "cpu" else f"numerics:{level}"
    where = "" if level == "cpu" else f" at {level} offload (-ngl {run.layers if run else '?'})"
    if run is None or base is None:
        return SmokeCheck(name=name, device=device, passed=False,
                          summary=f"{device}{where}: not compared: no base run", evidence={}), None
    try:
        fig = nm.compare(base, run.scored)
    except ValueError as exc:
        return SmokeCheck(name=name, device=device, passed=False,
                          summary=f"{device}{where}: cannot compare with {against}: {exc}", evidence={}), None
    evidence: dict[str, Any] = {"against": against, "layers": run.layers, "budget": budget.to_dict(),
                                **fig.to_dict(), "seconds": round(run.seconds, 2), "log": str(run.log)}
    if run.batches_note:
        evidence["batches"] = run.batches_note
    missed = nm.misses(fig, budget)
    figures = (f"ppl {fig.ppl:.4f} (x{fig.ppl_ratio:.5f}), KLD mean {fig.kld_mean:.3g} p99 {fig.kld_p99:.3g}, "
               f"top-1 {fig.top1:.1%} over {fig.positions} positions")
    if missed:
        summary = f"{device}{where}: {missed[0]} (against {against}); {figures}"
    else:
        summary = f"{device}{where} matches {against}: {figures}"
    return SmokeCheck(name=name, device=device, passed=not missed, summary=summary, evidence=evidence), fig


def budget_of(spec) -> nm.NumericsBudget:
    return nm.NumericsBudget(kld_mean=spec.kld_mean, kld_p99=spec.kld_p99, ppl_ratio=spec.ppl_ratio, top1=spec.top1)


def run_numerics(runner: Runner, *, devices: tuple[str, ...], text: str, workload: NumericsWorkload,
                 reference: NumericsReference | None, reference_note: str) -> NumericsResult:
    """The CPU run (against ``reference``), then every other device at each offload level
    (against the CPU run). Never raises for a failed run: it is a failed check."""
    spec = runner.spec
    checks: list[SmokeCheck] = []
    runs: list[ScoreRun] = []
    figures: list[tuple[str, str, nm.Figures]] = []
    t0 = time.monotonic()
    cpu: ScoreRun | None = None
    tokens: tuple[int, ...] | None = None
    try:
        cpu, tokens = runner.run(CPU_DEVICE, "cpu", "0", text, None)
        runs.append(cpu)
    except SmokeError as exc:
        checks.append(SmokeCheck(name="numerics", device=CPU_DEVICE, passed=False,
                                 summary=f"{CPU_DEVICE} numerics: {exc}", evidence={"error": str(exc)},
                                 seconds=time.monotonic() - t0))
    wl = workload.with_tokens(tokens) if tokens is not None else workload
    if cpu is not None:
        checks.append(_cpu_check(cpu, wl, reference, reference_note, budget_of(spec.reference), figures))
    layers = block_count(runner.model)
    for device in devices:
        if device == CPU_DEVICE:
            continue
        for level, ngl in levels_of(spec, layers):
            t1 = time.monotonic()
            try:
                run, _ = runner.run(device, level, ngl, text, tokens)
            except SmokeError as exc:
                checks.append(SmokeCheck(name=f"numerics:{level}", device=device, passed=False,
                                         summary=f"{device} at {level} offload (-ngl {ngl}): {exc}",
                                         evidence={"error": str(exc), "layers": ngl}, seconds=time.monotonic() - t1))
                continue
            runs.append(run)
            check, fig = judged(device, level, run, cpu.scored if cpu else None, budget_of(spec.device),
                                f"this box's {CPU_DEVICE} run")
            checks.append(_timed(check, run.seconds))
            if fig is not None:
                figures.append((device, level, fig))
    return NumericsResult(checks=tuple(checks), runs=tuple(runs), figures=tuple(figures), workload=wl.to_dict(),
                          reference=str(reference.path) if reference is not None else None)


def _timed(check: SmokeCheck, seconds: float) -> SmokeCheck:
    from dataclasses import replace

    return replace(check, seconds=seconds)


def _cpu_check(cpu: ScoreRun, wl: NumericsWorkload, reference: NumericsReference | None, note: str,
               budget: nm.NumericsBudget, figures: list[tuple[str, str, nm.Figures]]) -> SmokeCheck:
    ppl = nm.perplexity(cpu.scored)
    if reference is None:
        return _timed(SmokeCheck(
            name="numerics", device=CPU_DEVICE, passed=True,
            summary=f"{CPU_DEVICE} numerics: ppl {ppl:.4f} over {len(cpu.scored)} positions; not compared: {note}",
            evidence={"ppl": round(ppl, 6), "positions": len(cpu.scored), "reference": None, "note": note,
                      "log": str(cpu.log)}), cpu.seconds)
    problem = reference.workload.mismatch(wl)
    if problem:
        return _timed(SmokeCheck(
            name="numerics", device=CPU_DEVICE, passed=False,
            summary=f"{CPU_DEVICE} numerics: the reference {reference.path.name} is of another workload ({problem}); "
                    "record it again with 'onebit-build smoke --write-numerics FILE'",
            evidence={"reference": str(reference.path), "mismatch": problem}), cpu.seconds)
    check, fig = judged(CPU_DEVICE, "cpu", cpu, reference.scored, budget, f"the reference {reference.path.name}")
    if fig is not None:
        figures.append((CPU_DEVICE, "cpu", fig))
    return _timed(check, cpu.seconds)


@dataclass(frozen=True, kw_only=True)
class NumericsPlan:
    """What the numerical check of a smoke needs besides the recipe: the evaluation text and
    what it depends on, and the committed reference the CPU run is judged by (None, with
    ``note`` saying why, when there is none)."""

    text: str
    workload: NumericsWorkload
    reference: NumericsReference | None
    note: str = ""


def smoke_numerics(recipe: Any, plan: NumericsPlan, *, server_bin: Path, model: Path, logs: Path,
                   threads: int | None, timeout_s: Callable[[nm.Request], float], status: Any,
                   devices: tuple[str, ...]) -> NumericsResult:
    """The numerical check on the CPU and every other device the server offers, under the
    smoke stage's deadlines (a request's: its tokens to evaluate at smoke.min_tok_s)."""
    spec = recipe.smoke
    assert recipe.numerics is not None
    runner = Runner(server_bin=server_bin, model=model, spec=recipe.numerics, ctx_size=spec.ctx_size,
                    threads=threads, env=spec.env, health_timeout_s=spec.health_timeout_s, logs=logs,
                    timeout_s=timeout_s, status=status)
    return run_numerics(runner, devices=devices, text=plan.text, workload=plan.workload,
                        reference=plan.reference, reference_note=plan.note)
