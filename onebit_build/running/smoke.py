"""The smoke stage: serve the model with the built llama-server on each device and prove it works.

Per device: the server starts and becomes healthy, ``/health`` says ok, ``/v1/models``
lists exactly the served model, ``/props`` names the pinned commit, the model and the
context, every recipe prompt's greedy answer contains its expected text, and the decode
speed is measured on requests whose own answers are checked. Before that,
``--list-devices`` must show every device the recipe expects.

The checks are pure (:mod:`smoke_checks`: a server answer in, a :class:`SmokeCheck` out);
:func:`run_smoke` does the I/O, never raises for a failed check and always stops its servers.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable


from onebit_build.running import server as srvmod
from onebit_build.running.server_args import ServerSpec
from onebit_build.running.devices import missing_devices
from onebit_build.core import ui
from onebit_build.spec.recipe import PromptCheck, Recipe, SmokeSpec
from onebit_build.core.errors import SmokeError
from onebit_build.spec.model_spec import served_name
from onebit_build.core.names import label_part
from onebit_build.running.measure import Completion, Sample
from onebit_build.running.model import ModelFile
from onebit_build.running.numerics_run import NumericsPlan, NumericsResult, smoke_numerics
from onebit_build.running.offload import check_offload
from onebit_build.running.speed_baseline import SpeedReference, pick, smoke_workload
from onebit_build.running.stream import STREAM_MAX_TOKENS, stream_check
from onebit_build.running.smoke_checks import (
    CHAT_MIN_TOKENS,
    SmokeCheck,
    Speed,
    check_answer,
    chat_request,
    check_catalog,
    check_chat,
    check_devices,
    check_health,
    check_props,
    check_speed,
    judge_speed_sample,
    summarize_speed,
)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True)
class DeviceResult:
    device: str
    checks: tuple[SmokeCheck, ...]
    speed: Speed | None
    log: Path | None
    seconds: float
    port: int | None = None
    stopped_by: str | None = None  # the signal that ended the server: SIGTERM, second SIGTERM, SIGKILL

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)


@dataclass(frozen=True, kw_only=True)
class SmokeResult:
    recipe: str
    server_bin: Path
    model: ModelFile
    expect_commit: str
    run_dir: Path
    devices_expected: tuple[str, ...]
    devices_listed: tuple[str, ...] | None  # None when --list-devices failed
    checks: tuple[SmokeCheck, ...]  # checks of the whole run (the device list)
    device_results: tuple[DeviceResult, ...]
    started_at: str
    seconds: float
    numerics: NumericsResult | None = None  # the numerical check (None: the recipe has none)

    @property
    def all_checks(self) -> tuple[SmokeCheck, ...]:
        out = list(self.checks)
        for d in self.device_results:
            out.extend(d.checks)
        if self.numerics is not None:
            out.extend(self.numerics.checks)
        return tuple(out)

    @property
    def passed(self) -> bool:
        checks = self.all_checks
        return bool(self.device_results) and bool(checks) and all(c.passed for c in checks)

    def device(self, name: str) -> DeviceResult:
        for d in self.device_results:
            if d.device == name:
                return d
        raise KeyError(name)


def log_name(device: str) -> str:
    return f"server-{label_part(device)}.log"



# --------------------------------------------------------------------------- the run


@dataclass
class Deadlines:
    """The recipe's deadlines: one per request (from its tokens) and one for the stage."""

    spec: SmokeSpec
    t0: float
    hung: set[int] = field(default_factory=set)  # ports of servers that missed a deadline

    def request_s(self, tokens: int) -> float:
        return self.spec.request_base_s + tokens / self.spec.min_tok_s

    def left_s(self) -> float:
        return self.t0 + self.spec.stage_timeout_s - time.monotonic()

    def for_request(self, tokens: int) -> tuple[float, str]:
        """The timeout of the next request and the rule that sets it; SmokeError when the
        stage deadline has already passed."""
        own = self.request_s(tokens)
        left = self.left_s()
        if left <= 0:
            raise SmokeError(self.stage_hit())
        if left < own:
            return left, f"the smoke stage deadline (smoke.stage_timeout_s {self.spec.stage_timeout_s:g} s)"
        return own, (f"the request deadline ({self.spec.request_base_s:g} s + {tokens} tokens at "
                     f"smoke.min_tok_s {self.spec.min_tok_s:g} = {own:g} s)")

    def stage_hit(self) -> str:
        return f"smoke stage deadline reached: smoke.stage_timeout_s is {self.spec.stage_timeout_s:g} s"


def _complete(server: srvmod.Server, deadlines: Deadlines, prompt: str, *, n_predict: int,
              ignore_eos: bool = False) -> Completion:
    if server.port in deadlines.hung:
        raise SmokeError("not asked: the server missed an earlier deadline")
    timeout, rule = deadlines.for_request(n_predict)
    try:
        return server.complete(prompt, n_predict=n_predict, ignore_eos=ignore_eos, timeout=timeout)
    except srvmod.RequestTimeout:
        deadlines.hung.add(server.port)
        raise SmokeError(f"no answer within {timeout:.0f} s, {rule}; no more requests go to this server",
                         hint="raise it in the recipe's smoke section if the device is this slow, "
                              "else read the server log") from None


def _stream_on(server: srvmod.Server, run: _DeviceRun) -> SmokeCheck:
    """The streamed chat check, under the same deadlines as a completion of its tokens."""
    if server.port in run.deadlines.hung:
        raise SmokeError("not asked: the server missed an earlier deadline")
    timeout, rule = run.deadlines.for_request(STREAM_MAX_TOKENS)
    t0 = time.monotonic()
    try:
        return stream_check(server.url, run.device, timeout=timeout)
    except SmokeError as exc:
        if time.monotonic() - t0 >= timeout:
            run.deadlines.hung.add(server.port)
            raise SmokeError(f"{exc} ({rule}); no more requests go to this server") from None
        raise


def _failed(name: str, device: str | None, exc: BaseException, server: srvmod.Server | None = None) -> SmokeCheck:
    evidence: dict[str, Any] = {"error": str(exc)}
    detail = getattr(exc, "detail", None)
    if server is not None:
        rc = server.returncode()
        evidence["server_exit_code"] = rc
        if rc is not None and not detail:
            detail = server.log_tail()
    if detail:
        evidence["log_tail"] = detail
    return SmokeCheck(name=name, device=device, passed=False, summary=f"{name}: {exc}", evidence=evidence)


def _shown(status: ui.CheckStatus | None, check: SmokeCheck) -> SmokeCheck:
    if status is not None:
        where = f"{check.device} " if check.device else ""
        status.done(f"  {where}{'pass' if check.passed else 'FAIL'} {check.summary}")
    return check


def _guarded(name: str, run: _DeviceRun, server: srvmod.Server, fn: Callable[[], SmokeCheck]) -> SmokeCheck:
    """Run one check (its time measured, shown as it runs); a failed request is a failed check."""
    if run.status is not None:
        run.status.running(f"{run.device} {name} ...")
    import requests  # here, not at the top: a command that smoke-tests nothing skips its import

    t0 = time.monotonic()
    try:
        check = fn()
    except (SmokeError, requests.RequestException) as exc:
        check = _failed(name, run.device, exc, server)
    return _shown(run.status, replace(check, seconds=time.monotonic() - t0))


def _not_started(device: str, summary: str, evidence: dict[str, Any]) -> DeviceResult:
    check = SmokeCheck(name="start", device=device, passed=False, summary=summary, evidence=evidence)
    return DeviceResult(device=device, checks=(check,), speed=None, log=None, seconds=0.0)


def _speed_on(server: srvmod.Server, run: _DeviceRun, answers: dict[str, tuple[str, bool]]) -> Speed:
    device, spec, first = run.device, run.spec, run.spec.prompts[0]
    answer, answer_passed = answers.get(first.name, ("", False))

    def timed(tokens: int) -> Sample:
        got = _complete(server, run.deadlines, first.prompt, n_predict=tokens, ignore_eos=True)
        return judge_speed_sample(got, answer=answer, expect=first.expect, tokens=tokens, prompt=first.name)

    # The warm-up runs the same prompt through the same paths (prompt batch, then one-token
    # decode steps); a short one is enough and keeps the stage fast on slow devices.
    warmup = timed(min(spec.speed_tokens, max(spec.answer_tokens, 8)))
    samples = tuple(timed(spec.speed_tokens) for _ in range(spec.speed_repeats))
    workload = smoke_workload(spec, device, model_sha256=run.model.sha256, threads=run.threads)
    ref, note = pick(run.references, device, workload)
    return summarize_speed(
        device=device, prompt=first.name, tokens=spec.speed_tokens, warmup=warmup, samples=samples,
        answer_passed=answer_passed, reference=ref.decode_tok_s if ref else None, tolerance=spec.tolerance,
        workload=workload.to_dict(), reference_note=note,
    )


@dataclass(frozen=True, kw_only=True)
class _DeviceRun:
    """What the checks of one device need besides the server."""

    device: str
    spec: SmokeSpec
    model: ModelFile
    expect_commit: str
    deadlines: Deadlines
    chat: bool = False  # the model has its own chat template: check /v1/chat/completions
    threads: int | None = None  # the server's -t
    references: tuple[SpeedReference, ...] = ()  # speed references; only one of the same workload is used
    alias: str | None = None  # the name the server lists the model by; None: its path
    status: ui.CheckStatus | None = None  # where each check is shown as it runs


def _smoke_device(run: _DeviceRun, *, server_bin: Path, log: Path, threads: int | None) -> DeviceResult:
    t0 = time.monotonic()
    device, spec = run.device, run.spec
    sspec = ServerSpec(
        binary=server_bin, model=run.model.path, log=log, device=device, ctx_size=spec.ctx_size,
        env=spec.env, health_timeout_s=spec.health_timeout_s, threads=threads, alias=run.alias,
    )
    if run.status is not None:
        run.status.running(f"{device} start: loading {run.model.path.name} ...")
    try:
        server = srvmod.start(sspec)
    except SmokeError as exc:
        check = _shown(run.status, replace(_failed("start", device, exc), seconds=time.monotonic() - t0))
        return DeviceResult(device=device, checks=(check,), speed=None, log=log, seconds=time.monotonic() - t0)
    try:
        checks, speed = _checks_on(server, run)
    finally:
        server.stop()
    return DeviceResult(
        device=device, checks=tuple(checks), speed=speed, log=log, seconds=time.monotonic() - t0,
        port=server.port, stopped_by=server.stopped_by,
    )


def _load_log(server: srvmod.Server) -> str:
    """The server's log so far: a healthy server has logged its whole model load."""
    try:
        return Path(server.log).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SmokeError(f"cannot read the server log {server.log}: {exc.strerror}") from None


def _checks_on(server: srvmod.Server, run: _DeviceRun) -> tuple[list[SmokeCheck], Speed | None]:
    """Every check of one healthy server, in order; then its speed on the first prompt."""
    device, spec, model = run.device, run.spec, run.model
    checks = [_shown(run.status, SmokeCheck(
        name="start", device=device, passed=True, seconds=server.ready_s or 0.0,
        summary=f"llama-server healthy on port {server.port} after {server.ready_s:.1f} s",
        evidence={"port": server.port, "pid": server.pid, "ready_s": round(server.ready_s or 0.0, 3),
                  "argv": server.argv},
    ))]
    checks.append(_guarded("offload", run, server, lambda: check_offload(device, _load_log(server))))
    checks.append(_guarded("health", run, server, lambda: check_health(device, *server.get_json("/health"))))
    checks.append(_guarded("catalog", run, server, lambda: check_catalog(
        device, *server.get_json("/v1/models"), model_id=run.alias or str(model.path), ctx_size=spec.ctx_size)))
    checks.append(_guarded("props", run, server, lambda: check_props(
        device, *server.get_json("/props"), expect_commit=run.expect_commit, model_path=model.path,
        ctx_size=spec.ctx_size)))
    if run.chat:  # only a model with its own template answers the chat endpoint meaningfully
        body = chat_request(max_tokens=max(spec.answer_tokens, CHAT_MIN_TOKENS))
        checks.append(_guarded("chat", run, server,
                               lambda: check_chat(device, *server.post_json("/v1/chat/completions", body))))
    answers: dict[str, tuple[str, bool]] = {}
    for prompt in spec.prompts:
        def ask(prompt: PromptCheck = prompt) -> SmokeCheck:
            got = _complete(server, run.deadlines, prompt.prompt, n_predict=spec.answer_tokens)
            check = check_answer(device, prompt, got, n_predict=spec.answer_tokens)
            answers[prompt.name] = (got.text, check.passed)
            return check
        checks.append(_guarded(f"answer:{prompt.name}", run, server, ask))
    checks.append(_guarded("stream", run, server, lambda: _stream_on(server, run)))
    first_token_s = checks[-1].evidence.get("first_token_s") if checks[-1].passed else None
    if not spec.prompts:
        checks.append(SmokeCheck(name="answer", device=device, passed=False,
                                 summary="the recipe lists no smoke prompts", evidence={}))
        checks.append(SmokeCheck(name="speed", device=device, passed=False,
                                 summary="speed invalid: no prompt to check the timed answers against", evidence={}))
        return checks, None
    measured: list[Speed] = []

    def timed() -> SmokeCheck:
        measured.append(replace(_speed_on(server, run, answers), first_token_s=first_token_s))
        return check_speed(measured[0])
    checks.append(_guarded("speed", run, server, timed))
    return checks, (measured[0] if measured else None)


def measure_speed(*, server_bin: Path, model: ModelFile, spec: SmokeSpec, device: str, log: Path,
                  threads: int | None = None, extra_args: tuple[str, ...] = ()) -> Speed:
    """The smoke stage's speed measurement alone, on one device: the first prompt's greedy
    answer is checked, then timed as in :func:`run_smoke` (no reference: the figure is what
    a box adopts). SmokeError when the server does not start or a request misses its deadline."""
    sspec = ServerSpec(binary=server_bin, model=model.path, log=log, device=device, ctx_size=spec.ctx_size,
                              env=spec.env, health_timeout_s=spec.health_timeout_s, threads=threads,
                              extra_args=extra_args)
    deadlines = Deadlines(spec=spec, t0=time.monotonic())
    run = _DeviceRun(device=device, spec=spec, model=model, expect_commit="-", deadlines=deadlines, threads=threads)
    if not spec.prompts:
        raise SmokeError("the recipe lists no smoke prompts, so there is no speed workload to measure",
                         hint="add a prompt to the recipe's smoke section")
    import requests

    first = spec.prompts[0]
    server = srvmod.start(sspec)
    try:
        got = _complete(server, run.deadlines, first.prompt, n_predict=spec.answer_tokens)
        ok = check_answer(device, first, got, n_predict=spec.answer_tokens).passed
        speed = _speed_on(server, run, {first.name: (got.text, ok)})
    except requests.RequestException as exc:
        raise SmokeError(f"the speed requests to {device} failed: {exc}; log: {log}") from None
    finally:
        server.stop()
    workload = smoke_workload(spec, device, model_sha256=model.sha256, threads=threads, extra_args=extra_args)
    return replace(speed, workload=workload.to_dict(), reference_tok_s=None, on_par=None, reference_note="")


def run_smoke(*, recipe: Recipe, server_bin: Path, model: ModelFile, run_dir: Path, expect_commit: str,
              devices: tuple[str, ...] | None = None, threads: int | None = None,
              references: tuple[SpeedReference, ...] = (), numerics: NumericsPlan | None = None) -> SmokeResult:
    """Smoke-test ``server_bin`` serving ``model`` on each device (the recipe's by default).

    Failed checks are results, not exceptions; this raises only on misuse: ValueError for
    no devices or no commit to expect, SmokeError for a missing server binary. Every server
    it starts is stopped before it returns or raises, Ctrl-C included. Server logs go to
    ``run_dir/logs``; each device's speed is measured on the recipe's first prompt.
    ``threads`` is passed to the server as ``-t`` (None: llama.cpp's default). A device's
    decode speed is judged only against a reference in ``references`` measured on the same
    workload."""
    spec = recipe.smoke
    wanted = _wanted_devices(devices, spec, expect_commit, Path(server_bin))
    logs = Path(run_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    with ui.CheckStatus() as status:
        listed, device_check = _list_devices(Path(server_bin), wanted, spec, logs, status)
        missing = missing_devices(wanted, listed or ())
        deadlines = Deadlines(spec=spec, t0=t0)
        results: list[DeviceResult] = []
        for device in wanted:
            if deadlines.left_s() <= 0:
                results.append(_not_started(device, f"{device} not started: {deadlines.stage_hit()}",
                                            {"stage_timeout_s": spec.stage_timeout_s}))
            elif device in missing:
                results.append(_not_started(device, f"{device} is not offered by this llama-server (--list-devices); "
                                            "not started", {"listed": list(listed or ())}))
            else:
                run = _DeviceRun(device=device, spec=spec, model=model, expect_commit=expect_commit,
                                 deadlines=deadlines, chat=model.has_chat_template is True, threads=threads,
                                 references=references, status=status,
                                 alias=served_name(recipe.model, sha256=model.sha256, file=model.path))
                results.append(_smoke_device(run, server_bin=Path(server_bin), log=logs / log_name(device),
                                             threads=threads))
        checked = None
        if numerics is not None and recipe.numerics is not None:
            checked = smoke_numerics(recipe, numerics, server_bin=Path(server_bin), model=model.path, logs=logs,
                                     threads=threads, timeout_s=lambda req: deadlines.for_request(req.batch)[0],
                                     status=status, devices=tuple(d for d in wanted if d not in missing))
            for check in checked.checks:
                _shown(status, check)
    return SmokeResult(
        recipe=recipe.name, server_bin=Path(server_bin), model=model, expect_commit=expect_commit,
        run_dir=Path(run_dir), devices_expected=wanted, devices_listed=listed, checks=(device_check,),
        device_results=tuple(results),
        started_at=started_at, seconds=time.monotonic() - t0, numerics=checked,
    )


def _wanted_devices(devices: tuple[str, ...] | None, spec: SmokeSpec, expect_commit: str,
                    server_bin: Path) -> tuple[str, ...]:
    """The devices to test (the recipe's by default); ValueError or SmokeError on misuse."""
    wanted = tuple(devices) if devices is not None else spec.devices
    if not wanted:
        raise ValueError("run_smoke: no devices to test")
    if not expect_commit.strip():
        raise ValueError("run_smoke: expect_commit is empty")
    if not server_bin.is_file() or not os.access(server_bin, os.X_OK):
        raise SmokeError(f"llama-server not found or not executable: {server_bin}",
                         hint="build it first with 'onebit-build build'")
    return wanted


def _list_devices(server_bin: Path, wanted: tuple[str, ...], spec: SmokeSpec, logs: Path,
                  status: ui.CheckStatus | None = None) -> tuple[tuple[str, ...] | None, SmokeCheck]:
    """The devices the binary lists (None when it cannot say) and the check that every
    wanted one is among them."""
    listed: tuple[str, ...] | None
    if status is not None:
        status.running("llama-server --list-devices ...")
    t0 = time.monotonic()
    try:
        listed = srvmod.list_devices(server_bin, env=spec.env, log=logs / "list-devices.log")
        check = check_devices(wanted, listed)
    except SmokeError as exc:
        listed = None
        check = _failed("devices", None, exc)
    return listed, _shown(status, replace(check, seconds=time.monotonic() - t0))
