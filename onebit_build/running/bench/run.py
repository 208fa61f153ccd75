"""The benchmark run: interleaved rounds, a fresh server per variant per round, one warm-up
request, then one greedy request per prompt; and the lock that keeps two benchmarks apart.

Speeds come from the server's ``timings``; the baseline's first round records the
expected answer prefixes (see :mod:`judge`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import requests

from onebit_build.core import ui
from onebit_build.core.errors import BoxLockError, SmokeError
from onebit_build.core.names import label_part
from onebit_build.core.workspace import FileLock
from onebit_build.running import server as srvmod
from onebit_build.running.server_args import ServerSpec
from onebit_build.running.bench.judge import Expectation, common_prefix, judge_answer, steps_from_probs
from onebit_build.running.bench.plan import REQUEST_FLAGS, Prompt, Variant, completion_body
from onebit_build.running.bench.settings import DEFAULTS, TEXT_KEPT
from onebit_build.running.bench.summary import Cell, summarize
from onebit_build.running.measure import Completion, Sample, failed_sample, timed_sample
from onebit_build.running.model import ModelFile


@dataclass(frozen=True, kw_only=True)
class BenchRequest:
    variants: tuple[Variant, ...]
    model: ModelFile
    prompts: tuple[Prompt, ...]
    run_dir: Path
    rounds: int = DEFAULTS.rounds
    decode_tokens: int = DEFAULTS.decode_tokens
    prefix_tokens: int = DEFAULTS.prefix_tokens
    tie_margin: float = DEFAULTS.tie_margin
    ctx_size: int = DEFAULTS.ctx_size
    given: tuple[Expectation, ...] = ()  # expectations given up front (--expect)
    env: tuple[tuple[str, str], ...] = ()
    health_timeout_s: float = DEFAULTS.health_timeout_s
    request_timeout_s: float = DEFAULTS.request_timeout_s
    lock: Path | None = None  # recorded only; the caller holds it
    alias: str | None = None  # the name the servers list the model by
    # False: one variant's server at a time. True: every variant's fresh server of a round
    # is up at once and each prompt is asked of one variant after the other, so the figures
    # compared were taken seconds apart (verify-run: pairs cancel the machine's load drift).
    together: bool = False

    @property
    def baseline(self) -> Variant:
        return self.variants[0]


@dataclass(frozen=True, kw_only=True)
class ServerRun:
    """One fresh server of one variant in one round."""

    round: int
    variant: str
    log: Path
    port: int | None
    ready_s: float | None
    error: str  # "" when it started and answered
    pid: int | None = None
    warmup_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    request: BenchRequest
    expectations: dict[str, Expectation]
    samples: tuple[Sample, ...]
    servers: tuple[ServerRun, ...]
    cells: tuple[Cell, ...]
    started_at: str
    seconds: float
    rounds_run: int = 0  # the request's rounds, and any that ``more`` added

    @property
    def all_valid(self) -> bool:
        return bool(self.cells) and all(c.valid for c in self.cells)

    def cell(self, variant: str, prompt: str) -> Cell:
        for c in self.cells:
            if c.variant == variant and c.prompt == prompt:
                return c
        raise KeyError((variant, prompt))


def _post(server: srvmod.Server, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        return server.post_json(path, body, timeout=120)
    except requests.RequestException as exc:
        raise SmokeError(f"{path} failed: {type(exc).__name__}; log: {server.log}") from None


def _record_expectation(server: srvmod.Server, answer: Completion, *, prompt: Prompt, prefix_tokens: int,
                        decode_tokens: int, source: str) -> Expectation | None:
    """The first ``prefix_tokens`` generated tokens of a baseline answer: their text, and
    per token the runner-up and margin (from one extra, untimed request with ``n_probs``:
    asking for probabilities slows decoding, so timed requests never do)."""
    text = answer.text
    k = min(prefix_tokens, decode_tokens)
    ids: Any = list(answer.tokens or ())
    if not ids:
        # An older server without return_tokens: tokenize the text it returned.
        status, tok = _post(server, "/tokenize", {"content": text, "add_special": False})
        ids = tok.get("tokens") if status == 200 and isinstance(tok, dict) else None
        if not isinstance(ids, list):
            raise SmokeError(f"/tokenize answered {status}: {str(tok)[:120]}", hint=f"see the server log {server.log}")
    ids = ids[:k]
    status, det = _post(server, "/detokenize", {"tokens": ids})
    if status != 200 or not isinstance(det, dict) or not isinstance(det.get("content"), str):
        raise SmokeError(f"/detokenize answered {status}: {str(det)[:120]}", hint=f"see the server log {server.log}")
    # A prefix that ends inside a multi-byte character decodes with a replacement mark;
    # keep only what the answer itself starts with.
    expected = common_prefix(det["content"], text)
    if not expected:
        return None
    status, probs = _post(server, "/completion", {**completion_body(prompt.text, k), "n_probs": 2})
    steps = steps_from_probs(
        probs.get("completion_probabilities") if status == 200 and isinstance(probs, dict) else None, ids)
    return Expectation(prompt=prompt.name, text=expected, tokens=k, source=source, steps=tuple(steps))


def _ask(server: srvmod.Server, prompt: Prompt, tokens: int, timeout: float) -> Completion:
    return server.complete(prompt.text, n_predict=tokens, timeout=timeout, **REQUEST_FLAGS)


def _log_name(rnd: int, variant: str) -> str:
    return f"server-r{rnd}-{label_part(variant)}.log"


Progress = Callable[[str], None]
# Called with each server as soon as it is healthy, before any request (round, from 1):
# verify-run reads what the live process mapped.
OnStart = Callable[[srvmod.Server, Variant, int], None]


# Called after each round from the request's last one on, with every sample so far and the
# rounds done: True runs one more round of every variant (verify-run's sequential speed part).
More = Callable[[tuple[Sample, ...], int], bool]


def run_bench(req: BenchRequest, *, progress: Progress | None = None, on_start: OnStart | None = None,
              more: More | None = None) -> BenchResult:
    """Run every variant ``req.rounds`` times, interleaved, each time on a fresh server; then
    one more round at a time for as long as ``more`` asks for it. With ``req.together``, the
    servers of a round are up at once and take the prompts in turn (:func:`_round_together`).

    Failures of one server (it does not start, it crashes, it answers wrongly) are
    results, not exceptions; every server is stopped before this returns or raises."""
    if not req.variants:
        raise ValueError("run_bench: no variants")
    if req.rounds < 1 or req.decode_tokens < 1 or req.prefix_tokens < 1:
        raise ValueError("run_bench: rounds, decode_tokens and prefix_tokens must be at least 1")
    say = progress or ui.info
    logs = Path(req.run_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    expectations: dict[str, Expectation] = {e.prompt: e for e in req.given}
    samples: list[Sample] = []
    servers: list[ServerRun] = []
    width = max(len(v.name) for v in req.variants)
    rnd = 0
    while rnd < req.rounds or (more is not None and more(tuple(samples), rnd)):
        rnd += 1
        if req.together:
            done = _round_together(req, rnd, logs, expectations, on_start=on_start)
        else:
            # a generator: each variant's line is said as soon as its server is done
            done = (_serve_round(req, v, rnd, logs / _log_name(rnd, v.name), expectations,
                                 record=index == 0 and rnd == 1, on_start=on_start)
                    for index, v in enumerate(req.variants))
        for v, (run, got, line) in zip(req.variants, done):
            servers.append(run)
            samples.extend(got)
            say(f"round {rnd}/{req.rounds}  {v.name:<{width}}  {line}" if rnd <= req.rounds
                else f"round {rnd} (added)  {v.name:<{width}}  {line}")
    cells = summarize(req.variants, tuple(p.name for p in req.prompts), tuple(samples), rnd)
    return BenchResult(
        request=req, expectations=expectations, samples=tuple(samples), servers=tuple(servers), cells=cells,
        started_at=started_at, seconds=time.monotonic() - t0, rounds_run=rnd,
    )


@dataclass(kw_only=True)
class _Live:
    """A server of a round run together, and what it has answered so far."""

    server: srvmod.Server
    log: Path
    warmup_s: float | None = None
    error: str = ""
    samples: list[Sample] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)


def _spec(req: BenchRequest, v: Variant, log: Path) -> ServerSpec:
    return ServerSpec(
        binary=v.server, model=req.model.path, log=log, device=v.device, ctx_size=req.ctx_size,
        extra_args=v.args, env=req.env, health_timeout_s=req.health_timeout_s, alias=req.alias,
    )


def _not_started(req: BenchRequest, v: Variant, rnd: int, log: Path,
                 exc: SmokeError) -> tuple[ServerRun, list[Sample], str]:
    """The record, samples and line of a server that did not start."""
    run = ServerRun(round=rnd, variant=v.name, log=log, port=None, ready_s=None, error=str(exc))
    why = f"the server did not start: {exc.message}"
    return (run, [failed_sample(why=why, round=rnd, variant=v.name, prompt=p.name) for p in req.prompts],
            f"server did not start: {exc.message}")


def _served(one: _Live, v: Variant, rnd: int) -> tuple[ServerRun, list[Sample], str]:
    """The record, samples and line of a server that started (it is stopped by now)."""
    run = ServerRun(round=rnd, variant=v.name, log=one.log, port=one.server.port, ready_s=one.server.ready_s,
                    error=one.error, warmup_s=one.warmup_s, pid=one.server.pid)
    return run, one.samples, f"decode tok/s: {', '.join(one.parts)}" + (f"  ({one.error})" if one.error else "")


def _serve_round(req: BenchRequest, v: Variant, rnd: int, log: Path, expectations: dict[str, Expectation], *,
                 record: bool, on_start: OnStart | None = None) -> tuple[ServerRun, list[Sample], str]:
    """One fresh server of variant ``v`` in round ``rnd``: a warm-up, then every prompt once.
    With ``record``, answers of prompts without an expectation become theirs. Returns the
    server's record, the samples and a line of progress."""
    try:
        one = _Live(server=srvmod.start(_spec(req, v, log)), log=log)
    except SmokeError as exc:
        return _not_started(req, v, rnd, log, exc)
    try:
        if on_start is not None:
            on_start(one.server, v, rnd)
        one.warmup_s, one.error = _warm_up(one.server, req)
        for p in req.prompts:
            sample, part, one.error = _ask_one(one.server, req, v, rnd, p, expectations, record=record, error=one.error)
            one.samples.append(sample)
            one.parts += [part] if part else []
    finally:
        one.server.stop()
    return _served(one, v, rnd)


def _round_together(req: BenchRequest, rnd: int, logs: Path, expectations: dict[str, Expectation], *,
                    on_start: OnStart | None = None) -> list[tuple[ServerRun, list[Sample], str]]:
    """Round ``rnd`` with a fresh server of every variant up at once: started together (their
    models load side by side) and warmed up together, then each prompt asked of every variant
    in turn, one request at a time (in the variants' order in odd rounds, the
    other way round in even ones, so neither side is always first). The baseline records
    the expectations in round 1, before the others are judged. Per variant, in the
    variants' order: the record, the samples and a line."""
    live: dict[str, _Live] = {}
    failed: dict[str, tuple[ServerRun, list[Sample], str]] = {}
    log_of = {v.name: logs / _log_name(rnd, v.name) for v in req.variants}
    started = srvmod.start_together([_spec(req, v, log_of[v.name]) for v in req.variants])
    try:
        for v, got in zip(req.variants, started):
            if isinstance(got, SmokeError):
                failed[v.name] = _not_started(req, v, rnd, log_of[v.name], got)
            else:
                live[v.name] = _Live(server=got, log=log_of[v.name])
        for v in req.variants:
            if on_start is not None and v.name in live:
                on_start(live[v.name].server, v, rnd)
        _warm_up_together(list(live.values()), req)
        order = [v for v in (req.variants if rnd % 2 else req.variants[::-1]) if v.name in live]
        for p in req.prompts:
            for v in order:
                one = live[v.name]
                sample, part, one.error = _ask_one(one.server, req, v, rnd, p, expectations,
                                                   record=rnd == 1 and v is req.baseline, error=one.error)
                one.samples.append(sample)
                one.parts += [part] if part else []
    finally:
        for one in live.values():
            one.server.stop()
    return [failed[v.name] if v.name in failed else _served(live[v.name], v, rnd) for v in req.variants]


def _warm_up_together(lives: list[_Live], req: BenchRequest) -> None:
    """Every server's warm-up at the same time (nothing is timed yet)."""
    done = srvmod.side_by_side([lambda one=one: _warm_up(one.server, req) for one in lives])
    for one, got in zip(lives, done):
        one.warmup_s, one.error = got or (None, "warm-up: it ended without an answer")


def _warm_up(server: srvmod.Server, req: BenchRequest) -> tuple[float | None, str]:
    """One short request with the longest prompt; its seconds, or the error it met."""
    prompt = max(req.prompts, key=lambda p: len(p.text))
    t0 = time.monotonic()
    try:
        _ask(server, prompt, min(DEFAULTS.warmup_tokens, req.decode_tokens), req.request_timeout_s)
    except SmokeError as exc:
        return None, f"warm-up: {exc.message}"
    return time.monotonic() - t0, ""


def _ask_one(server: srvmod.Server, req: BenchRequest, v: Variant, rnd: int, p: Prompt,
             expectations: dict[str, Expectation], *, record: bool, error: str) -> tuple[Sample, str, str]:
    """One timed request, judged: its sample, its part of the progress line ("" when the
    server was not asked) and the server's error so far. After a failed request (or warm-up:
    ``error``) the server is not asked again; its remaining prompts fail with that error."""
    if error:
        return failed_sample(why=error, round=rnd, variant=v.name, prompt=p.name), "", error
    try:
        answer = _ask(server, p, req.decode_tokens, req.request_timeout_s)
        if record and p.name not in expectations:
            exp = _record_expectation(server, answer, prompt=p, prefix_tokens=req.prefix_tokens,
                                      decode_tokens=req.decode_tokens, source=f"baseline {v.name} round 1")
            if exp is not None:
                expectations[p.name] = exp
    except srvmod.AnswerError as exc:  # this request failed; the server still serves
        return failed_sample(why=exc.message, round=rnd, variant=v.name, prompt=p.name), f"{p.name} - INVALID", ""
    except SmokeError as exc:
        return failed_sample(why=exc.message, round=rnd, variant=v.name, prompt=p.name), f"{p.name} FAILED", exc.message
    verdict = judge_answer(answer, expected=expectations.get(p.name), tokens=req.decode_tokens,
                           tie_margin=req.tie_margin)
    s = timed_sample(answer, why=verdict.why, note=verdict.note, text=answer.text[:TEXT_KEPT], round=rnd,
                     variant=v.name, prompt=p.name)
    figure = f"{s.decode_tok_s:.1f}" if s.decode_tok_s is not None else "-"
    return s, f"{p.name} {figure}" + ("" if verdict.valid else " INVALID") + (" (near tie)" if verdict.note else ""), ""


# --------------------------------------------------------------------------- the lock


class BenchLock(FileLock):
    """An exclusive lock for a whole benchmark, so that two benchmarks never share the
    machine. The lock file names its holder. When it is held, fail at once naming the
    holder (``wait_s`` 0) or wait up to ``wait_s`` seconds for it."""

    def __init__(self, path: Path, command: str, *, wait_s: float = 0.0, poll_s: float = 0.5,
                 on_wait: Callable[[str], None] | None = None):
        super().__init__(path, command, wait_s=wait_s, poll_s=poll_s, on_wait=on_wait or ui.info)

    def busy(self, holder: str) -> BoxLockError:
        return BoxLockError(f"bench lock {self.path} is held by {holder}",
                         hint="wait for that benchmark to finish, or pass --wait SECONDS to wait for it")

    def timed_out(self, holder: str) -> BoxLockError:
        return BoxLockError(f"bench lock {self.path} is still held by {holder} after waiting {self.wait_s:g} s",
                         hint="try again later or wait longer with --wait SECONDS")

    def waiting(self, holder: str) -> str:
        return f"waiting for the bench lock {self.path}: held by {holder} (up to {self.wait_s:g} s)"
