"""The smoke stage: serve the model with the built llama-server on each device and prove it works.

Per device: the server starts and becomes healthy, ``/health`` says ok, ``/v1/models``
lists exactly the served model, ``/props`` names the pinned commit, the model and the
context, every recipe prompt's greedy answer contains its expected text, and the decode
speed is measured on requests whose own answers are checked. Before that,
``--list-devices`` must show every device the recipe expects.

The check functions are pure (a server answer in, a :class:`Check` out); :func:`run_smoke`
does the I/O, never raises for a failed check and always stops its servers.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import requests

from onebit_build.running import server as srvmod
from onebit_build.core import ui
from onebit_build.core.config import PromptCheck, Recipe, SmokeSpec
from onebit_build.core.errors import SmokeError
from onebit_build.running.model import ModelFile

SHORT_TEXT = 200  # characters of generated text kept as evidence


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True)
class Check:
    """One pass/fail verdict with the evidence it was drawn from."""

    name: str  # devices, start, health, catalog, props, answer:<prompt>, speed
    device: str | None  # None for checks of the whole run
    passed: bool
    summary: str  # one line for a person
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class SpeedSample:
    """One timed request: its speeds from the server's ``timings`` and whether its answer held."""

    prompt_tok_s: float | None
    decode_tok_s: float | None
    prompt_n: int | None
    predicted_n: int | None
    answer_ok: bool
    why: str  # why the answer did not hold; "" when it did
    text: str


@dataclass(frozen=True, kw_only=True)
class Speed:
    """Median speeds of a device over requests whose answers were checked."""

    device: str
    prompt: str  # name of the prompt used
    tokens: int  # generated tokens per request
    warmup: SpeedSample | None
    samples: tuple[SpeedSample, ...]
    valid: bool
    reason: str  # why the figures are invalid; "" when valid
    prompt_tok_s: float | None  # median, only when valid
    decode_tok_s: float | None  # median, only when valid
    reference_tok_s: float | None = None
    tolerance: float = 0.25
    on_par: bool | None = None  # None without a reference or without a valid figure


@dataclass(frozen=True, kw_only=True)
class DeviceResult:
    device: str
    checks: tuple[Check, ...]
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
    checks: tuple[Check, ...]  # checks of the whole run (the device list)
    device_results: tuple[DeviceResult, ...]
    started_at: str
    seconds: float

    @property
    def all_checks(self) -> tuple[Check, ...]:
        out = list(self.checks)
        for d in self.device_results:
            out.extend(d.checks)
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


# --------------------------------------------------------------------------- pure checks


def short(text: str, n: int = SHORT_TEXT) -> str:
    return text if len(text) <= n else text[:n] + "..."


def check_devices(expected: tuple[str, ...], listed: tuple[str, ...]) -> Check:
    missing = srvmod.missing_devices(expected, listed)
    evidence = {"expected": list(expected), "listed": list(listed), "missing": list(missing), "cpu_always_present": True}
    if missing:
        return Check(
            name="devices", device=None, passed=False,
            summary=f"--list-devices lacks {', '.join(missing)} (lists: {', '.join(listed) or 'none'})",
            evidence=evidence,
        )
    return Check(
        name="devices", device=None, passed=True,
        summary=f"--list-devices shows every expected device ({', '.join(expected)})",
        evidence=evidence,
    )


def check_health(device: str, status: int, body: Any) -> Check:
    state = srvmod.health_state(status, body)
    ok = state == "ready"
    return Check(
        name="health", device=device, passed=ok,
        summary="/health: 200 status ok" if ok else f"/health: HTTP {status} {short(str(body), 120)}",
        evidence={"http_status": status, "body": body},
    )


def check_catalog(device: str, status: int, body: Any, *, model_id: str, ctx_size: int) -> Check:
    """/v1/models must list exactly one model: the one served, with its size and context."""
    problems: list[str] = []
    evidence: dict[str, Any] = {"http_status": status, "expected_id": model_id, "expected_n_ctx": ctx_size}
    data = body.get("data") if isinstance(body, dict) else None
    if status != 200:
        problems.append(f"HTTP {status}")
    if not isinstance(data, list):
        problems.append("no data list")
        data = []
    evidence["ids"] = [m.get("id") if isinstance(m, dict) else None for m in data]
    if len(data) != 1:
        problems.append(f"{len(data)} models listed, expected exactly 1")
    else:
        entry = data[0] if isinstance(data[0], dict) else {}
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        evidence.update({"id": entry.get("id"), "n_params": meta.get("n_params"), "n_ctx": meta.get("n_ctx"), "n_ctx_train": meta.get("n_ctx_train")})
        if entry.get("id") != model_id:
            problems.append(f"id {entry.get('id')!r} is not {model_id!r}")
        n_params = meta.get("n_params")
        if not isinstance(n_params, int) or isinstance(n_params, bool) or n_params <= 0:
            problems.append(f"parameter count {n_params!r} is not a positive number")
        if meta.get("n_ctx") != ctx_size:
            problems.append(f"context {meta.get('n_ctx')!r} is not {ctx_size}")
    if problems:
        return Check(name="catalog", device=device, passed=False, summary="/v1/models: " + "; ".join(problems), evidence=evidence)
    return Check(
        name="catalog", device=device, passed=True,
        summary=f"/v1/models lists only {Path(model_id).name} ({evidence['n_params']:,} parameters, context {ctx_size})",
        evidence=evidence,
    )


_BUILD_INFO_RE = re.compile(r"^b(?P<number>[^-\s]+)-(?P<commit>[0-9A-Za-z]+)$")


def build_commit(build_info: str) -> str | None:
    """The commit label in llama.cpp's ``build_info`` (``b<number>-<commit>``)."""
    m = _BUILD_INFO_RE.match(build_info.strip())
    return m.group("commit").lower() if m else None


def commit_matches(build_info: str, expect_commit: str) -> bool:
    """True when the build's commit label and the pin agree on at least 7 hex digits
    (either may be the abbreviation of the other)."""
    got = build_commit(build_info)
    want = expect_commit.strip().lower()
    if not got or len(got) < 7 or len(want) < 7:
        return False
    return want.startswith(got) or got.startswith(want)


def check_props(device: str, status: int, body: Any, *, expect_commit: str, model_path: Path, ctx_size: int) -> Check:
    """/props: the build names the pinned commit, the model is ours, the context as asked."""
    problems: list[str] = []
    props = body if isinstance(body, dict) else {}
    if status != 200:
        problems.append(f"HTTP {status}")
    build_info = str(props.get("build_info", ""))
    got_model = props.get("model_path")
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    evidence = {
        "http_status": status,
        "build_info": build_info,
        "expect_commit": expect_commit,
        "model_path": got_model,
        "expected_model_path": str(model_path),
        "n_ctx": n_ctx,
        "expected_n_ctx": ctx_size,
        "total_slots": props.get("total_slots"),
    }
    if not commit_matches(build_info, expect_commit):
        problems.append(f"build_info {build_info!r} does not name commit {expect_commit[:12]}")
    if not isinstance(got_model, str) or not _same_file(Path(got_model), model_path):
        problems.append(f"model_path {got_model!r} is not {model_path}")
    if n_ctx != ctx_size:
        problems.append(f"context {n_ctx!r} is not {ctx_size}")
    if props.get("total_slots") != 1:
        problems.append(f"total_slots {props.get('total_slots')!r} is not 1")
    if problems:
        return Check(name="props", device=device, passed=False, summary="/props: " + "; ".join(problems), evidence=evidence)
    return Check(
        name="props", device=device, passed=True,
        summary=f"/props: build {build_info}, model {model_path.name}, context {ctx_size}",
        evidence=evidence,
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def answer_holds(text: str, expect: str) -> bool:
    return expect in text


def check_answer(device: str, prompt: PromptCheck, data: dict[str, Any], *, n_predict: int) -> Check:
    text = str(data.get("content", ""))
    ok = answer_holds(text, prompt.expect)
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    evidence = {
        "prompt": prompt.prompt,
        "expect": prompt.expect,
        "answer": short(text),
        "n_predict": n_predict,
        "predicted_n": timings.get("predicted_n"),
        "stop_type": data.get("stop_type"),
    }
    verdict = "contains" if ok else "lacks"
    return Check(
        name=f"answer:{prompt.name}", device=device, passed=ok,
        summary=f"{prompt.name}: answer {short(text, 60)!r} {verdict} {prompt.expect!r}",
        evidence=evidence,
    )


def judge_speed_sample(data: dict[str, Any], *, answer: str, expect: str, tokens: int) -> SpeedSample:
    """Judge one timed request. Its speed counts only when its own text starts with the
    checked greedy answer of the same prompt (which contains the expected text) and it
    generated exactly ``tokens`` tokens."""
    text = str(data.get("content", ""))
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    pps = timings.get("prompt_per_second")
    dps = timings.get("predicted_per_second")
    predicted_n = timings.get("predicted_n")
    why = ""
    if not answer or not answer_holds(answer, expect):
        why = f"the reference answer {short(answer, 40)!r} lacks {expect!r}"
    elif not text.startswith(answer):
        why = f"the text {short(text, 40)!r} does not start with the checked answer {short(answer, 40)!r}"
    elif predicted_n != tokens:
        why = f"generated {predicted_n!r} tokens, not {tokens}"
    elif not isinstance(dps, (int, float)) or dps <= 0 or not isinstance(pps, (int, float)) or pps <= 0:
        why = f"no usable timings ({timings!r})"
    return SpeedSample(
        prompt_tok_s=float(pps) if isinstance(pps, (int, float)) else None,
        decode_tok_s=float(dps) if isinstance(dps, (int, float)) else None,
        prompt_n=timings.get("prompt_n"),
        predicted_n=predicted_n,
        answer_ok=not why,
        why=why,
        text=short(text),
    )


def on_par(measured: float, reference: float, tolerance: float) -> bool:
    """Measured decode speed is on par when it is at most ``tolerance`` below the reference.
    Faster is on par too."""
    return measured >= reference * (1.0 - tolerance)


def summarize_speed(
    *,
    device: str,
    prompt: str,
    tokens: int,
    warmup: SpeedSample | None,
    samples: tuple[SpeedSample, ...],
    answer_passed: bool,
    reference: float | None,
    tolerance: float,
) -> Speed:
    """Medians over the samples, reported only when the prompt's answer check passed and
    every timed request's own answer held."""
    reason = ""
    if not answer_passed:
        reason = f"the answer check of prompt {prompt!r} failed"
    elif not samples:
        reason = "no timed requests"
    else:
        bad = [s for s in samples if not s.answer_ok]
        if bad:
            reason = f"{len(bad)} of {len(samples)} timed answers failed their check: {bad[0].why}"
    if reason:
        return Speed(
            device=device, prompt=prompt, tokens=tokens, warmup=warmup, samples=samples,
            valid=False, reason=reason, prompt_tok_s=None, decode_tok_s=None,
            reference_tok_s=reference, tolerance=tolerance, on_par=None,
        )
    pps = statistics.median(s.prompt_tok_s for s in samples if s.prompt_tok_s is not None)
    dps = statistics.median(s.decode_tok_s for s in samples if s.decode_tok_s is not None)
    return Speed(
        device=device, prompt=prompt, tokens=tokens, warmup=warmup, samples=samples,
        valid=True, reason="", prompt_tok_s=pps, decode_tok_s=dps,
        reference_tok_s=reference, tolerance=tolerance,
        on_par=None if reference is None else on_par(dps, reference, tolerance),
    )


def check_speed(speed: Speed) -> Check:
    evidence = {
        "prompt": speed.prompt,
        "tokens": speed.tokens,
        "repeats": len(speed.samples),
        "valid": speed.valid,
        "reason": speed.reason,
        "prompt_tok_s": speed.prompt_tok_s,
        "decode_tok_s": speed.decode_tok_s,
        "reference_tok_s": speed.reference_tok_s,
        "tolerance": speed.tolerance,
        "on_par": speed.on_par,
        "samples_decode_tok_s": [s.decode_tok_s for s in speed.samples],
        "samples_answer_ok": [s.answer_ok for s in speed.samples],
    }
    if not speed.valid:
        return Check(name="speed", device=speed.device, passed=False, summary=f"speed invalid: {speed.reason}", evidence=evidence)
    figures = f"decode {speed.decode_tok_s:.1f} tok/s, prompt {speed.prompt_tok_s:.1f} tok/s (median of {len(speed.samples)} x {speed.tokens} tokens)"
    if speed.on_par is False:
        assert speed.reference_tok_s is not None and speed.decode_tok_s is not None
        floor = speed.reference_tok_s * (1 - speed.tolerance)
        return Check(
            name="speed", device=speed.device, passed=False,
            summary=f"{figures}: below the reference {speed.reference_tok_s:g} tok/s - {speed.tolerance:.0%} = {floor:.1f}",
            evidence=evidence,
        )
    if speed.on_par:
        figures += f", on par with the reference {speed.reference_tok_s:g} tok/s"
    return Check(name="speed", device=speed.device, passed=True, summary=figures, evidence=evidence)


def reference_for(spec: SmokeSpec, device: str) -> float | None:
    for name, value in spec.reference_tok_s:
        if name == device:
            return value
    return None


def log_name(device: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", device)
    return f"server-{safe}.log"


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


def _complete(server: srvmod.Server, deadlines: Deadlines, prompt: str, *, n_predict: int, ignore_eos: bool = False) -> dict[str, Any]:
    if server.port in deadlines.hung:
        raise SmokeError("not asked: the server missed an earlier deadline")
    timeout, rule = deadlines.for_request(n_predict)
    try:
        return server.complete(prompt, n_predict=n_predict, ignore_eos=ignore_eos, timeout=timeout)
    except srvmod.RequestTimeout:
        deadlines.hung.add(server.port)
        raise SmokeError(f"no answer within {timeout:.0f} s, {rule}; no more requests go to this server",
                         hint="raise it in the recipe's smoke section if the device is this slow, else read the server log") from None


def _failed(name: str, device: str | None, exc: BaseException, server: srvmod.Server | None = None) -> Check:
    evidence: dict[str, Any] = {"error": str(exc)}
    detail = getattr(exc, "detail", None)
    if server is not None:
        rc = server.returncode()
        evidence["server_exit_code"] = rc
        if rc is not None and not detail:
            detail = server.log_tail()
    if detail:
        evidence["log_tail"] = detail
    return Check(name=name, device=device, passed=False, summary=f"{name}: {exc}", evidence=evidence)


def _guarded(name: str, device: str, server: srvmod.Server, fn: Callable[[], Check]) -> Check:
    try:
        check = fn()
    except (SmokeError, requests.RequestException) as exc:
        check = _failed(name, device, exc, server)
    ui.detail(f"  {device} {'pass' if check.passed else 'FAIL'} {check.summary}")
    return check


def _speed_on(server: srvmod.Server, device: str, spec: SmokeSpec, answers: dict[str, tuple[str, bool]], deadlines: Deadlines) -> Speed:
    first = spec.prompts[0]
    answer, answer_passed = answers.get(first.name, ("", False))

    def timed(tokens: int) -> SpeedSample:
        data = _complete(server, deadlines, first.prompt, n_predict=tokens, ignore_eos=True)
        return judge_speed_sample(data, answer=answer, expect=first.expect, tokens=tokens)

    # The warm-up runs the same prompt through the same paths (prompt batch, then one-token
    # decode steps); a short one is enough and keeps the stage fast on slow devices.
    warmup = timed(min(spec.speed_tokens, max(spec.answer_tokens, 8)))
    samples = tuple(timed(spec.speed_tokens) for _ in range(spec.speed_repeats))
    return summarize_speed(
        device=device, prompt=first.name, tokens=spec.speed_tokens, warmup=warmup, samples=samples,
        answer_passed=answer_passed, reference=reference_for(spec, device), tolerance=spec.tolerance,
    )


def _smoke_device(
    *, device: str, spec: SmokeSpec, server_bin: Path, model: ModelFile, log: Path, expect_commit: str, threads: int | None,
    deadlines: Deadlines,
) -> DeviceResult:
    t0 = time.monotonic()
    sspec = srvmod.ServerSpec(
        binary=server_bin, model=model.path, log=log, device=device, ctx_size=spec.ctx_size,
        env=spec.env, health_timeout_s=spec.health_timeout_s, threads=threads,
    )
    try:
        server = srvmod.start(sspec)
    except SmokeError as exc:
        check = _failed("start", device, exc)
        ui.detail(f"  {device} FAIL {check.summary}")
        return DeviceResult(device=device, checks=(check,), speed=None, log=log, seconds=time.monotonic() - t0)
    checks: list[Check] = []
    speed: Speed | None = None
    try:
        checks.append(Check(
            name="start", device=device, passed=True,
            summary=f"llama-server healthy on port {server.port} after {server.ready_s:.1f} s",
            evidence={"port": server.port, "pid": server.pid, "ready_s": round(server.ready_s or 0.0, 3), "argv": server.argv},
        ))
        checks.append(_guarded("health", device, server, lambda: check_health(device, *server.get_json("/health"))))
        checks.append(_guarded("catalog", device, server, lambda: check_catalog(
            device, *server.get_json("/v1/models"), model_id=str(model.path), ctx_size=spec.ctx_size)))
        checks.append(_guarded("props", device, server, lambda: check_props(
            device, *server.get_json("/props"), expect_commit=expect_commit, model_path=model.path, ctx_size=spec.ctx_size)))
        answers: dict[str, tuple[str, bool]] = {}
        for prompt in spec.prompts:
            def ask(prompt: PromptCheck = prompt) -> Check:
                data = _complete(server, deadlines, prompt.prompt, n_predict=spec.answer_tokens)
                check = check_answer(device, prompt, data, n_predict=spec.answer_tokens)
                answers[prompt.name] = (str(data.get("content", "")), check.passed)
                return check
            checks.append(_guarded(f"answer:{prompt.name}", device, server, ask))
        if not spec.prompts:
            checks.append(Check(name="answer", device=device, passed=False, summary="the recipe lists no smoke prompts", evidence={}))
            checks.append(Check(name="speed", device=device, passed=False, summary="speed invalid: no prompt to check the timed answers against", evidence={}))
        else:
            try:
                speed = _speed_on(server, device, spec, answers, deadlines)
                checks.append(check_speed(speed))
            except (SmokeError, requests.RequestException) as exc:
                checks.append(_failed("speed", device, exc, server))
            ui.detail(f"  {device} {'pass' if checks[-1].passed else 'FAIL'} {checks[-1].summary}")
    finally:
        server.stop()
    return DeviceResult(
        device=device, checks=tuple(checks), speed=speed, log=log, seconds=time.monotonic() - t0,
        port=server.port, stopped_by=server.stopped_by,
    )


def run_smoke(
    *,
    recipe: Recipe,
    server_bin: Path,
    model: ModelFile,
    run_dir: Path,
    expect_commit: str,
    devices: tuple[str, ...] | None = None,
    threads: int | None = None,
) -> SmokeResult:
    """Smoke-test ``server_bin`` serving ``model`` on each device (the recipe's by default).

    Failed checks are results, not exceptions; this raises only on misuse: ValueError for
    no devices or no commit to expect, SmokeError for a missing server binary. Every server
    it starts is stopped before it returns or raises, Ctrl-C included. Server logs go to
    ``run_dir/logs``; each device's speed is measured on the recipe's first prompt.
    ``threads`` is passed to the server as ``-t`` (None: llama.cpp's default)."""
    spec = recipe.smoke
    wanted = tuple(devices) if devices is not None else spec.devices
    if not wanted:
        raise ValueError("run_smoke: no devices to test")
    if not expect_commit.strip():
        raise ValueError("run_smoke: expect_commit is empty")
    server_bin = Path(server_bin)
    if not server_bin.is_file() or not os.access(server_bin, os.X_OK):
        raise SmokeError(f"llama-server not found or not executable: {server_bin}", hint="build it first with 'onebit-build build'")
    run_dir = Path(run_dir)
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()

    listed: tuple[str, ...] | None
    try:
        listed = srvmod.list_devices(server_bin, env=spec.env, log=logs / "list-devices.log")
        device_check = check_devices(wanted, listed)
    except SmokeError as exc:
        listed = None
        device_check = _failed("devices", None, exc)
    ui.detail(f"  {'pass' if device_check.passed else 'FAIL'} {device_check.summary}")
    missing = srvmod.missing_devices(wanted, listed or ())

    results: list[DeviceResult] = []
    deadlines = Deadlines(spec=spec, t0=t0)
    for device in wanted:
        if deadlines.left_s() <= 0:
            results.append(DeviceResult(
                device=device,
                checks=(Check(name="start", device=device, passed=False, summary=f"{device} not started: {deadlines.stage_hit()}",
                              evidence={"stage_timeout_s": spec.stage_timeout_s}),),
                speed=None, log=None, seconds=0.0,
            ))
            continue
        if device in missing:
            results.append(DeviceResult(
                device=device,
                checks=(Check(name="start", device=device, passed=False,
                              summary=f"{device} is not offered by this llama-server (--list-devices); not started",
                              evidence={"listed": list(listed or ())}),),
                speed=None, log=None, seconds=0.0,
            ))
            continue
        results.append(_smoke_device(
            device=device, spec=spec, server_bin=Path(server_bin), model=model,
            log=logs / log_name(device), expect_commit=expect_commit, threads=threads, deadlines=deadlines,
        ))
    return SmokeResult(
        recipe=recipe.name,
        server_bin=Path(server_bin),
        model=model,
        expect_commit=expect_commit,
        run_dir=run_dir,
        devices_expected=wanted,
        devices_listed=listed,
        checks=(device_check,),
        device_results=tuple(results),
        started_at=started_at,
        seconds=time.monotonic() - t0,
    )
