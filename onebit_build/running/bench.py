"""The bench stage: interleaved, locked, answer-gated decode benchmarks of llama-server.

A *variant* is one way to serve the model: a llama-server binary (a build), a device and
extra server arguments (a config). The first variant is the baseline. Variants run
interleaved (round 1: A B C, round 2: A B C, ...), each round with a fresh server, one
warm-up request, then one greedy request per prompt with the prompt cache off and a fixed
number of generated tokens. Speeds come from the server's ``timings``.

A figure counts only when its answer held: the greedy text of each prompt must start with
the expected prefix, which is the text of the first ``prefix_tokens`` tokens the baseline
generated in its first round (or a prefix given with ``--expect``). A variant whose text
diverges is invalid for that prompt in every table and plot; it is never reported as fast.
One divergence is excused: at a *near tie*, where the baseline's two most likely tokens
were within ``tie_margin`` (natural-log probability) and the variant took the second one.
Correct backends sum in different orders, so such a token may legitimately flip; the
comparison then ends there.

Pure parts (parsing, the schedule, judging, statistics, the table) are separate from the
I/O (:func:`run_bench`, :func:`write_outputs`, :class:`BenchLock`).
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import socket
import statistics
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

import requests

from onebit_build.running import server as srvmod
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, LockError, SmokeError
from onebit_build.core.fsutil import atomic_write_text, read_state, sha256_bytes, sha256_file, StateError, write_state
from onebit_build.running.model import ModelFile
from onebit_build.core.workspace import FileLock

BENCH_KIND = "onebit-bench"
BENCH_SCHEMA = 1
PROMPT_NAMES = ("code", "prose", "short")
DEFAULT_ROUNDS = 3
DEFAULT_DECODE_TOKENS = 64
DEFAULT_PREFIX_TOKENS = 16
DEFAULT_TIE_MARGIN = 0.1  # nats; a CPU/Vulkan0 flip at a margin of 0.053 was seen on an H200
WARMUP_TOKENS = 8
DEFAULT_CTX = 2048
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# Arguments the bench sets itself for every server; a config may not give them.
RESERVED_ARGS = ("-m", "--model", "--host", "--port", "--device", "-dev", "-np", "--parallel")
ALL_DEVICES = "all"
TEXT_KEPT = 240  # characters of generated text kept per sample


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, kw_only=True)
class Prompt:
    name: str
    text: str
    source: str = ""  # the file it was read from


@dataclass(frozen=True, kw_only=True)
class Config:
    """Extra llama-server arguments under a name (``--config NAME='ARGS'``)."""

    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Build:
    """A llama-server binary under a name (``--server``/``--build``)."""

    name: str
    server: Path


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One column of the benchmark: a build served on a device with a config's arguments."""

    name: str
    config: str
    build: str
    device: str
    server: Path
    args: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Step:
    """One generated token of the baseline and how sure the model was of it."""

    id: int
    text: str
    runner_up: int | None  # the second most likely token
    runner_up_text: str
    margin: float | None  # log-probability of the chosen token minus the runner-up's


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """The prefix every greedy answer of a prompt must start with."""

    prompt: str
    text: str
    tokens: int | None  # how many generated tokens it covers; None when given as text
    source: str  # "baseline NAME round 1" or "given (FILE)"
    steps: tuple[Step, ...] = ()  # per token, when recorded from a baseline answer

    def near_ties(self, margin: float) -> list[tuple[int, Step]]:
        return [(i, st) for i, st in enumerate(self.steps) if st.margin is not None and st.margin < margin]


@dataclass(frozen=True, kw_only=True)
class BenchRequest:
    variants: tuple[Variant, ...]
    model: ModelFile
    prompts: tuple[Prompt, ...]
    run_dir: Path
    rounds: int = DEFAULT_ROUNDS
    decode_tokens: int = DEFAULT_DECODE_TOKENS
    prefix_tokens: int = DEFAULT_PREFIX_TOKENS
    tie_margin: float = DEFAULT_TIE_MARGIN
    ctx_size: int = DEFAULT_CTX
    given: tuple[Expectation, ...] = ()  # expectations given up front (--expect)
    env: tuple[tuple[str, str], ...] = ()
    health_timeout_s: float = 120.0
    request_timeout_s: float = 600.0
    lock: Path | None = None  # recorded only; the caller holds it

    @property
    def baseline(self) -> Variant:
        return self.variants[0]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One timed request and the verdict on its answer."""

    round: int
    variant: str
    prompt: str
    prompt_tok_s: float | None
    decode_tok_s: float | None
    prompt_n: int | None
    predicted_n: int | None
    text: str
    valid: bool
    why: str  # "" when valid
    note: str = ""  # e.g. a near tie that ended the comparison early


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
class Stat:
    best: float
    median: float
    low: float
    high: float
    n: int


@dataclass(frozen=True, kw_only=True)
class Cell:
    """The summary of one variant on one prompt over all rounds."""

    variant: str
    prompt: str
    valid: bool
    reason: str  # why it is invalid; "" when valid
    decode: Stat | None  # only when valid
    prompt_speed: Stat | None  # only when valid
    decode_vs_base_pct: float | None
    prompt_vs_base_pct: float | None
    note: str = ""  # e.g. answers that took a near tie


@dataclass(frozen=True, kw_only=True)
class BenchResult:
    request: BenchRequest
    expectations: dict[str, Expectation]
    samples: tuple[Sample, ...]
    servers: tuple[ServerRun, ...]
    cells: tuple[Cell, ...]
    started_at: str
    seconds: float

    @property
    def all_valid(self) -> bool:
        return bool(self.cells) and all(c.valid for c in self.cells)

    def cell(self, variant: str, prompt: str) -> Cell:
        for c in self.cells:
            if c.variant == variant and c.prompt == prompt:
                return c
        raise KeyError((variant, prompt))


# --------------------------------------------------------------------------- parsing


def parse_config(text: str) -> Config:
    """``NAME=ARGS`` (ARGS split like a shell would; may be empty) into a Config."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not NAME_RE.match(name):
        raise ConfigError(
            f"--config {text!r}: expected NAME='SERVER ARGS' with a simple name",
            hint="e.g. --config t1='-t 1' (names: letters, digits, . _ + -)",
        )
    try:
        args = tuple(shlex.split(rest))
    except ValueError as exc:
        raise ConfigError(f"--config {name}: cannot split {rest!r}: {exc}", hint="check the quoting") from None
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in RESERVED_ARGS:
            raise ConfigError(
                f"--config {name}: {flag} is set by the bench for every server",
                hint="use the bench's --model/--device options instead; host, port and slots are fixed",
            )
    return Config(name=name, args=args)


def parse_configs(texts: Iterable[str]) -> tuple[Config, ...]:
    configs = tuple(parse_config(t) for t in texts)
    if not configs:
        return (Config(name="default"),)
    _unique([c.name for c in configs], "--config")
    return configs


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ConfigError(f"{what}: the name {n!r} is used twice", hint="give every one a different name")
        seen.add(n)


def server_in(path: Path) -> Path:
    """The llama-server binary a ``--build``/``--server`` path names: the file itself, or
    ``bin/llama-server`` (or ``llama-server``) inside a build folder."""
    path = Path(path).expanduser()
    if path.is_dir():
        for cand in (path / "bin" / "llama-server", path / "llama-server"):
            if cand.is_file():
                return cand.resolve()
        raise ConfigError(f"no llama-server in {path} (looked in bin/ and the folder itself)", hint="pass the build folder or the binary")
    if not path.is_file():
        raise ConfigError(f"llama-server not found: {path}", hint="pass an existing binary or build folder")
    if not os.access(path, os.X_OK):
        raise ConfigError(f"{path} is not executable", hint="pass the llama-server binary")
    return path.resolve()


def parse_build(text: str) -> Build:
    """``[NAME=]PATH``; without a name the build is named after its folder."""
    name, sep, rest = text.partition("=")
    if sep and NAME_RE.match(name) and rest:
        path = Path(rest)
    else:
        name, path = "", Path(text)
    server = server_in(path)
    if not name:
        folder = server.parent.parent if server.parent.name == "bin" else server.parent
        name = re.sub(r"[^A-Za-z0-9._+-]", "_", folder.name) or "server"
    return Build(name=name, server=server)


def parse_builds(texts: Iterable[str]) -> tuple[Build, ...]:
    builds = tuple(parse_build(t) for t in texts)
    _unique([b.name for b in builds], "--server/--build")
    return builds


def load_prompts(folder: Path, names: tuple[str, ...] = PROMPT_NAMES) -> tuple[Prompt, ...]:
    """The fixed prompt texts ``NAME.txt``; each file's final newline is not part of it."""
    out = []
    for name in names:
        path = Path(folder) / f"{name}.txt"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"prompt file {path} is missing", hint="restore smoke/prompts/ or pass --prompts DIR") from None
        if text.endswith("\n"):
            text = text[:-1]
        if not text.strip():
            raise ConfigError(f"prompt file {path} is empty", hint="write the prompt text into it")
        out.append(Prompt(name=name, text=text, source=path.name))
    return tuple(out)


def load_expectations(path: Path, prompts: tuple[str, ...]) -> tuple[Expectation, ...]:
    """Expected prefixes from a file: an earlier run's ``bench.json`` (its recorded
    expectations) or a YAML/JSON mapping ``prompt name: expected text``."""
    import yaml

    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--expect {path}: cannot read it ({exc.strerror})", hint="pass an existing file") from None
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--expect {path}: not YAML/JSON ({exc})", hint="write 'prompt: expected text' lines") from None
    if isinstance(doc, dict) and doc.get("kind") == BENCH_KIND:
        try:
            doc = read_state(path, BENCH_KIND, BENCH_SCHEMA)
        except StateError as exc:
            raise ConfigError(f"--expect {path}: {exc}", hint="use a bench.json of this version") from None
        recorded = doc.get("expectations") or {}
        out = []
        for key, value in recorded.items():
            if key in prompts and isinstance(value, dict) and isinstance(value.get("text"), str) and value["text"]:
                steps = tuple(Step(id=int(st["id"]), text=str(st.get("text", "")), runner_up=st.get("runner_up"),
                                   runner_up_text=str(st.get("runner_up_text", "")), margin=st.get("margin"))
                              for st in value.get("steps") or [])
                out.append(Expectation(prompt=key, text=value["text"], tokens=value.get("tokens"),
                                       source=f"given ({path.name}: {value.get('source', 'recorded')})", steps=steps))
        if not out:
            raise ConfigError(f"--expect {path}: that run recorded no expected prefixes", hint="use a run whose baseline answered")
        return tuple(out)
    elif isinstance(doc, dict):
        mapping = doc
    else:
        raise ConfigError(f"--expect {path}: expected a mapping of prompt name to text", hint="e.g. short: ' 6, 7, 8'")
    out = []
    for key, value in mapping.items():
        if key not in prompts:
            raise ConfigError(f"--expect {path}: unknown prompt {key!r}", hint=f"use some of: {', '.join(prompts)}")
        if not isinstance(value, str) or not value:
            raise ConfigError(f"--expect {path}: {key}: expected a non-empty text", hint="quote the expected prefix")
        out.append(Expectation(prompt=key, text=value, tokens=None, source=f"given ({path.name})"))
    return tuple(out)


# --------------------------------------------------------------------------- plan


def make_variants(configs: tuple[Config, ...], builds: tuple[Build, ...], devices: dict[str, tuple[str, ...]]) -> tuple[Variant, ...]:
    """Every build on each of its devices with every config, in that nesting order; the
    first is the baseline. Names carry only the parts that vary (``build/device/config``)."""
    if not configs or not builds:
        raise ValueError("make_variants: need at least one config and one build")
    combos = [(b, d, c) for b in builds for d in devices[b.name] for c in configs]
    if not combos:
        raise ConfigError("no device to benchmark on", hint="pass --device CPU (or a device --list-devices shows)")
    many_builds = len({b.name for b, _, _ in combos}) > 1
    many_devices = len({d for _, d, _ in combos}) > 1
    many_configs = len(configs) > 1 or not (many_builds or many_devices)
    out = []
    for b, d, c in combos:
        parts = [p for p, on in ((b.name, many_builds), (d, many_devices), (c.name, many_configs)) if on]
        out.append(Variant(name="/".join(parts), config=c.name, build=b.name, device=d, server=b.server, args=c.args))
    _unique([v.name for v in out], "variants")
    return tuple(out)


def pick_devices(requested: tuple[str, ...], listed: tuple[str, ...]) -> tuple[str, ...]:
    """The devices to use on one build: ``all`` means the CPU and every listed device."""
    if not requested:
        return (srvmod.CPU_DEVICE,)
    out: list[str] = []
    for d in requested:
        names = (srvmod.CPU_DEVICE, *listed) if d == ALL_DEVICES else (d,)
        for n in names:
            if n not in out:
                out.append(n)
    return tuple(out)


def resolve_devices(builds: tuple[Build, ...], requested: tuple[str, ...], *, env: tuple[tuple[str, str], ...], log_dir: Path) -> dict[str, tuple[str, ...]]:
    """The devices each build is benchmarked on. ``--list-devices`` is asked only when a
    device other than the CPU is wanted; a wanted device a build does not offer is an error."""
    need_list = any(d != srvmod.CPU_DEVICE for d in requested)
    out: dict[str, tuple[str, ...]] = {}
    for b in builds:
        listed: tuple[str, ...] = ()
        if need_list:
            listed = srvmod.list_devices(b.server, env=env, log=Path(log_dir) / f"list-devices-{b.name}.log")
        devices = pick_devices(requested, listed)
        missing = srvmod.missing_devices(devices, listed)
        if missing:
            raise ConfigError(
                f"{b.name}: this llama-server does not offer {', '.join(missing)} (--list-devices shows: {', '.join(listed) or 'none'}; the CPU is always there)",
                hint="pick devices it lists, or pass --device all",
            )
        out[b.name] = devices
    return out


def schedule(n_variants: int, rounds: int) -> list[tuple[int, int]]:
    """(round, variant index) in run order: A B C, A B C, ... (rounds count from 1)."""
    return [(r, i) for r in range(1, rounds + 1) for i in range(n_variants)]


def completion_body(prompt: str, n_predict: int) -> dict[str, Any]:
    """A greedy /completion request (see :func:`server.completion_body`): exactly
    ``n_predict`` tokens (end of text ignored), token ids returned."""
    return srvmod.completion_body(prompt, n_predict, ignore_eos=True, return_tokens=True)


# --------------------------------------------------------------------------- judging


def common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def answer_holds(text: str, expected: str) -> bool:
    """The answer holds when it starts with the expected prefix. An answer shorter than the
    prefix (fewer tokens asked than the prefix covers) holds when it is the prefix's start."""
    if not expected:
        return False
    if len(text) >= len(expected):
        return text.startswith(expected)
    return bool(text) and expected.startswith(text)


def divergence(text: str, expected: str) -> str:
    """Where and how ``text`` leaves ``expected``, for a person."""
    at = len(common_prefix(text, expected))
    before = f" after {text[max(0, at - 12):at]!r}" if at else ""
    return f"diverged at character {at}{before}: got {text[at:at + 20]!r}, expected {expected[at:at + 20]!r}"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    valid: bool
    why: str = ""  # why it is invalid
    note: str = ""  # something a valid answer did that a reader should know


def first_difference(got: list[int], steps: tuple[Step, ...]) -> int | None:
    """Index of the first generated token that is not the baseline's; None when all agree."""
    for i, (g, st) in enumerate(zip(got, steps)):
        if g != st.id:
            return i
    return None


def judge(data: Any, *, status: int, expected: Expectation | None, tokens: int, tie_margin: float = DEFAULT_TIE_MARGIN) -> Verdict:
    """Verdict on one timed answer. Its text must start with the expected prefix; where it
    does not, the divergence is excused only at a near tie: the first differing token is the
    baseline's runner-up there, and the baseline's margin was below ``tie_margin``."""
    if status != 200 or not isinstance(data, dict):
        return Verdict(valid=False, why=f"/completion answered HTTP {status}: {str(data)[:120]}")
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    text = str(data.get("content", ""))
    if timings.get("predicted_n") != tokens:
        return Verdict(valid=False, why=f"generated {timings.get('predicted_n')!r} tokens, not {tokens}")
    for key in ("prompt_per_second", "predicted_per_second"):
        v = timings.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            return Verdict(valid=False, why=f"no usable timings ({key} is {v!r})")
    if expected is None:
        return Verdict(valid=False, why="no reference answer (the baseline's first round gave none for this prompt)")
    if answer_holds(text, expected.text):
        return Verdict(valid=True)
    why = divergence(text, expected.text)
    got = data.get("tokens")
    if not expected.steps or not isinstance(got, list):
        return Verdict(valid=False, why=why)
    at = first_difference(got, expected.steps)
    if at is None:
        return Verdict(valid=False, why=why)
    st = expected.steps[at]
    if st.margin is None:
        return Verdict(valid=False, why=f"{why} (token {at})")
    if got[at] == st.runner_up and st.margin < tie_margin:
        return Verdict(valid=True, note=f"near tie at token {at}: took {st.runner_up_text!r} over {st.text!r} (baseline margin {st.margin:.3f})")
    taken = "the baseline's runner-up" if got[at] == st.runner_up else "not even the baseline's runner-up"
    return Verdict(valid=False, why=f"{why} (token {at}, {taken}; baseline margin there {st.margin:.3f}, ties are excused below {tie_margin:g})")


def make_sample(*, rnd: int, variant: str, prompt: str, data: Any, verdict: Verdict) -> Sample:
    timings = data.get("timings") if isinstance(data, dict) and isinstance(data.get("timings"), dict) else {}

    def num(key: str) -> float | None:
        v = timings.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    text = str(data.get("content", "")) if isinstance(data, dict) else ""
    return Sample(
        round=rnd, variant=variant, prompt=prompt,
        prompt_tok_s=num("prompt_per_second"), decode_tok_s=num("predicted_per_second"),
        prompt_n=timings.get("prompt_n"), predicted_n=timings.get("predicted_n"),
        text=text[:TEXT_KEPT], valid=verdict.valid, why=verdict.why, note=verdict.note,
    )


def failed_sample(*, rnd: int, variant: str, prompt: str, why: str) -> Sample:
    return Sample(round=rnd, variant=variant, prompt=prompt, prompt_tok_s=None, decode_tok_s=None,
                  prompt_n=None, predicted_n=None, text="", valid=False, why=why)


# --------------------------------------------------------------------------- statistics


def stat(values: list[float]) -> Stat:
    return Stat(best=max(values), median=statistics.median(values), low=min(values), high=max(values), n=len(values))


def pct_vs(value: float, base: float) -> float:
    return (value / base - 1.0) * 100.0


def summarize(variants: tuple[Variant, ...], prompts: tuple[str, ...], samples: tuple[Sample, ...], rounds: int) -> tuple[Cell, ...]:
    """One cell per variant and prompt. A cell is valid only when every round gave a valid
    sample; its figures are then best / median / min / max over the rounds, and the
    difference of its median against the baseline's median (when that is valid)."""
    by_key: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        by_key.setdefault((s.variant, s.prompt), []).append(s)
    raw: dict[tuple[str, str], Cell] = {}
    for v in variants:
        for p in prompts:
            got = sorted(by_key.get((v.name, p), []), key=lambda s: s.round)
            bad = [s for s in got if not s.valid]
            missing = sorted(set(range(1, rounds + 1)) - {s.round for s in got})
            reason = ""
            if bad:
                reason = f"round {bad[0].round}: {bad[0].why}"
                if len(bad) > 1:
                    reason += f" ({len(bad)} of {rounds} rounds invalid)"
            elif missing:
                reason = f"no answer in round {missing[0]}"
            if reason:
                raw[(v.name, p)] = Cell(variant=v.name, prompt=p, valid=False, reason=reason, decode=None,
                                        prompt_speed=None, decode_vs_base_pct=None, prompt_vs_base_pct=None)
                continue
            dec = stat([s.decode_tok_s for s in got if s.decode_tok_s is not None])
            pps = stat([s.prompt_tok_s for s in got if s.prompt_tok_s is not None])
            noted = [s for s in got if s.note]
            note = f"{noted[0].note} ({len(noted)} of {rounds} rounds)" if noted else ""
            raw[(v.name, p)] = Cell(variant=v.name, prompt=p, valid=True, reason="", decode=dec, prompt_speed=pps,
                                    decode_vs_base_pct=None, prompt_vs_base_pct=None, note=note)
    base = variants[0].name
    out = []
    for v in variants:
        for p in prompts:
            c = raw[(v.name, p)]
            b = raw[(base, p)]
            if c.valid and b.valid and c.decode and b.decode and c.prompt_speed and b.prompt_speed:
                c = replace(c, decode_vs_base_pct=pct_vs(c.decode.median, b.decode.median),
                            prompt_vs_base_pct=pct_vs(c.prompt_speed.median, b.prompt_speed.median))
            out.append(c)
    return tuple(out)


# --------------------------------------------------------------------------- the run


def steps_from_probs(probs: Any, ids: list[int]) -> list[Step]:
    """Per generated token: the chosen token and its runner-up with the log-probability
    margin, from ``completion_probabilities`` of an ``n_probs: 2`` request. Only positions
    where that request chose the same tokens as ``ids`` carry a margin."""
    out: list[Step] = []
    agree = True
    for i, tid in enumerate(ids):
        entry = probs[i] if isinstance(probs, list) and i < len(probs) and isinstance(probs[i], dict) else {}
        agree = agree and entry.get("id") == tid
        top = entry.get("top_logprobs") if agree else None
        text = str(entry.get("token", "")) if agree else ""
        runner, runner_text, margin = None, "", None
        if isinstance(top, list) and len(top) >= 2 and all(isinstance(t, dict) for t in top[:2]) and top[0].get("id") == tid:
            a, b = top[0].get("logprob"), top[1].get("logprob")
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                runner, runner_text, margin = top[1].get("id"), str(top[1].get("token", "")), float(a) - float(b)
        out.append(Step(id=tid, text=text, runner_up=runner, runner_up_text=runner_text, margin=margin))
    return out


def _post(server: srvmod.Server, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        return server.post_json(path, body, timeout=120)
    except requests.RequestException as exc:
        raise SmokeError(f"{path} failed: {type(exc).__name__}; log: {server.log}") from None


def _record_expectation(server: srvmod.Server, data: dict[str, Any], *, prompt: Prompt, prefix_tokens: int, decode_tokens: int, source: str) -> Expectation | None:
    """The first ``prefix_tokens`` generated tokens of a baseline answer: their text, and
    per token the runner-up and margin (from one extra, untimed request with ``n_probs``:
    asking for probabilities slows decoding, so timed requests never do)."""
    text = str(data.get("content", ""))
    k = min(prefix_tokens, decode_tokens)
    ids = data.get("tokens")
    if not (isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids)):
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
    steps = steps_from_probs(probs.get("completion_probabilities") if status == 200 and isinstance(probs, dict) else None, ids)
    return Expectation(prompt=prompt.name, text=expected, tokens=k, source=source, steps=tuple(steps))


def _ask(server: srvmod.Server, prompt: Prompt, tokens: int, timeout: float) -> tuple[int, Any]:
    try:
        return server.post_json("/completion", completion_body(prompt.text, tokens), timeout=timeout)
    except requests.RequestException as exc:
        rc = server.returncode()
        gone = f"; llama-server exited with code {rc}: {srvmod.first_error_line(server.log_tail())}" if rc is not None else ""
        raise SmokeError(f"/completion failed: {type(exc).__name__}{gone}; log: {server.log}") from None


def _log_name(rnd: int, variant: str) -> str:
    return f"server-r{rnd}-{re.sub(r'[^A-Za-z0-9._+-]+', '_', variant)}.log"


Progress = Callable[[str], None]


def run_bench(req: BenchRequest, *, progress: Progress | None = None) -> BenchResult:
    """Run every variant ``req.rounds`` times, interleaved, each time on a fresh server.

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
    warmup_prompt = max(req.prompts, key=lambda p: len(p.text))
    samples: list[Sample] = []
    servers: list[ServerRun] = []
    width = max(len(v.name) for v in req.variants)
    for rnd, index in schedule(len(req.variants), req.rounds):
        v = req.variants[index]
        record = index == 0 and rnd == 1
        log = logs / _log_name(rnd, v.name)
        spec = srvmod.ServerSpec(
            binary=v.server, model=req.model.path, log=log, device=v.device, ctx_size=req.ctx_size,
            extra_args=v.args, env=req.env, health_timeout_s=req.health_timeout_s,
        )
        head = f"round {rnd}/{req.rounds}  {v.name:<{width}}"
        try:
            server = srvmod.start(spec)
        except SmokeError as exc:
            servers.append(ServerRun(round=rnd, variant=v.name, log=log, port=None, ready_s=None, error=str(exc)))
            samples.extend(failed_sample(rnd=rnd, variant=v.name, prompt=p.name, why=f"the server did not start: {exc.message}") for p in req.prompts)
            say(f"{head}  server did not start: {exc.message}")
            continue
        error = ""
        warmup_s: float | None = None
        parts: list[str] = []
        try:
            tw = time.monotonic()
            try:
                _ask(server, warmup_prompt, min(WARMUP_TOKENS, req.decode_tokens), req.request_timeout_s)
                warmup_s = time.monotonic() - tw
            except SmokeError as exc:
                error = f"warm-up: {exc.message}"
            for p in req.prompts:
                if error:
                    samples.append(failed_sample(rnd=rnd, variant=v.name, prompt=p.name, why=error))
                    continue
                try:
                    status, data = _ask(server, p, req.decode_tokens, req.request_timeout_s)
                    if record and p.name not in expectations and status == 200 and isinstance(data, dict):
                        exp = _record_expectation(server, data, prompt=p, prefix_tokens=req.prefix_tokens,
                                                  decode_tokens=req.decode_tokens, source=f"baseline {v.name} round 1")
                        if exp is not None:
                            expectations[p.name] = exp
                except SmokeError as exc:
                    error = exc.message
                    samples.append(failed_sample(rnd=rnd, variant=v.name, prompt=p.name, why=error))
                    parts.append(f"{p.name} FAILED")
                    continue
                verdict = judge(data, status=status, expected=expectations.get(p.name), tokens=req.decode_tokens,
                                tie_margin=req.tie_margin)
                s = make_sample(rnd=rnd, variant=v.name, prompt=p.name, data=data, verdict=verdict)
                samples.append(s)
                figure = f"{s.decode_tok_s:.1f}" if s.decode_tok_s is not None else "-"
                parts.append(f"{p.name} {figure}" + ("" if verdict.valid else " INVALID") + (" (near tie)" if verdict.note else ""))
        finally:
            server.stop()
        servers.append(ServerRun(round=rnd, variant=v.name, log=log, port=server.port, ready_s=server.ready_s,
                                 error=error, warmup_s=warmup_s, pid=server.pid))
        say(f"{head}  decode tok/s: {', '.join(parts)}" + (f"  ({error})" if error else ""))
    cells = summarize(req.variants, tuple(p.name for p in req.prompts), tuple(samples), req.rounds)
    return BenchResult(
        request=req, expectations=expectations, samples=tuple(samples), servers=tuple(servers), cells=cells,
        started_at=started_at, seconds=time.monotonic() - t0,
    )


# --------------------------------------------------------------------------- the table


def _fmt(x: float) -> str:
    return f"{x:.0f}" if x >= 1000 else f"{x:.1f}"


def _pct(p: float | None, *, baseline: bool) -> str:
    if baseline:
        return "baseline"
    if p is None:
        return "n/a"
    return f"{p:+.1f}%"


def table_rows(result: BenchResult) -> list[list[str]]:
    base = result.request.baseline.name
    rows = []
    for p in result.request.prompts:
        for v in result.request.variants:
            c = result.cell(v.name, p.name)
            is_base = v.name == base
            if c.valid and c.decode and c.prompt_speed:
                rows.append([
                    p.name, v.name,
                    f"{_fmt(c.decode.best)} / {_fmt(c.decode.median)}",
                    _pct(c.decode_vs_base_pct, baseline=is_base),
                    f"{_fmt(c.prompt_speed.best)} / {_fmt(c.prompt_speed.median)}",
                    _pct(c.prompt_vs_base_pct, baseline=is_base),
                    f"ok; {c.note}" if c.note else "ok",
                ])
            else:
                rows.append([p.name, v.name, "INVALID", "-", "INVALID", "-", f"INVALID: {c.reason}"])
    return rows


TABLE_HEADER = ["prompt", "variant", "decode tok/s best / median", "decode vs base", "prompt tok/s best / median", "prompt vs base", "answer"]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "\\n")


def render_table(result: BenchResult) -> str:
    rows = [[_md_escape(c) for c in r] for r in table_rows(result)]
    lines = ["| " + " | ".join(TABLE_HEADER) + " |", "|" + "|".join(["---"] * len(TABLE_HEADER)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def render_markdown(result: BenchResult, *, plot_name: str | None = None) -> str:
    req = result.request
    out = [
        "# llama-server bench",
        "",
        f"- model: `{req.model.path.name}` (sha256 {req.model.sha256[:16]})",
        f"- {req.rounds} rounds, interleaved; a fresh server per variant per round; one warm-up request;"
        f" greedy, prompt cache off, {req.decode_tokens} generated tokens per request",
        f"- baseline: `{req.baseline.name}`; figures are best / median over the rounds; vs base compares medians",
        f"- a figure counts only when its answer starts with the expected prefix (first {req.prefix_tokens} tokens of the baseline's round-1 answer unless given);"
        f" a divergence is excused only at a near tie (the baseline's runner-up token, margin below {req.tie_margin:g})",
        f"- started {result.started_at}, took {result.seconds:.0f} s",
        "",
        render_table(result),
        "## Variants",
        "",
        "| variant | build | device | server arguments |",
        "|---|---|---|---|",
    ]
    for v in req.variants:
        out.append(f"| {_md_escape(v.name)} | {_md_escape(v.build)} | {v.device} | `{_md_escape(shlex.join(v.args)) or '(none)'}` |")
    out += ["", "## Expected answer prefixes", ""]
    for p in req.prompts:
        e = result.expectations.get(p.name)
        out.append(f"- {p.name}: " + (f"`{_md_escape(repr(e.text))}` ({e.source})" if e else "none (no reference answer)"))
        ties = e.near_ties(req.tie_margin) if e else []
        if ties:
            out.append("  near ties in it: " + "; ".join(
                f"token {i} {_md_escape(repr(st.text))} vs {_md_escape(repr(st.runner_up_text))} (margin {st.margin:.3f})" for i, st in ties))
    failed = [s for s in result.servers if s.error]
    if failed:
        out += ["", "## Server problems", ""]
        out += [f"- round {s.round} {s.variant}: {s.error} (log `logs/{s.log.name}`)" for s in failed]
    if plot_name:
        out += ["", f"![decode and prompt speed]({plot_name})"]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- JSON


def _stat_doc(s: Stat | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"best": round(s.best, 3), "median": round(s.median, 3), "min": round(s.low, 3), "max": round(s.high, 3), "n": s.n}


def _round(x: float | None, n: int = 3) -> float | None:
    return None if x is None else round(x, n)


def bench_doc(result: BenchResult, *, outputs: dict[str, str]) -> dict[str, Any]:
    req = result.request
    hashes: dict[Path, str] = {}
    for v in req.variants:
        if v.server not in hashes:
            try:
                hashes[v.server] = sha256_file(v.server)
            except OSError:
                hashes[v.server] = ""
    return {
        "started_at": result.started_at,
        "seconds": round(result.seconds, 1),
        "all_valid": result.all_valid,
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), "cpu_count": os.cpu_count()},
        "settings": {
            "rounds": req.rounds,
            "order": "interleaved",
            "decode_tokens": req.decode_tokens,
            "prefix_tokens": req.prefix_tokens,
            "tie_margin": req.tie_margin,
            "warmup_tokens": min(WARMUP_TOKENS, req.decode_tokens),
            "ctx_size": req.ctx_size,
            "request": {k: v for k, v in completion_body("", 0).items() if k not in ("prompt", "n_predict")},
            "lock": str(req.lock) if req.lock else None,
            "env": dict(req.env),
        },
        "model": {"path": str(req.model.path), "sha256": req.model.sha256, "source": req.model.source},
        "prompts": [{"name": p.name, "file": p.source, "chars": len(p.text), "sha256": sha256_bytes(p.text.encode())} for p in req.prompts],
        "variants": [
            {"name": v.name, "baseline": i == 0, "config": v.config, "build": v.build, "device": v.device,
             "server": str(v.server), "server_sha256": hashes[v.server], "args": list(v.args)}
            for i, v in enumerate(req.variants)
        ],
        "expectations": {
            k: {"text": e.text, "tokens": e.tokens, "source": e.source,
                "steps": [{"id": st.id, "text": st.text, "runner_up": st.runner_up, "runner_up_text": st.runner_up_text,
                           "margin": _round(st.margin, 4)} for st in e.steps]}
            for k, e in result.expectations.items()
        },
        "servers": [
            {"round": s.round, "variant": s.variant, "log": str(s.log), "pid": s.pid, "port": s.port, "ready_s": _round(s.ready_s),
             "warmup_s": _round(s.warmup_s), "error": s.error}
            for s in result.servers
        ],
        "samples": [
            {"round": s.round, "variant": s.variant, "prompt": s.prompt, "prompt_n": s.prompt_n, "predicted_n": s.predicted_n,
             "prompt_tok_s": _round(s.prompt_tok_s), "decode_tok_s": _round(s.decode_tok_s), "valid": s.valid, "why": s.why,
             "note": s.note, "text": s.text}
            for s in result.samples
        ],
        "results": [
            {"variant": c.variant, "prompt": c.prompt, "valid": c.valid, "reason": c.reason, "note": c.note,
             "decode_tok_s": _stat_doc(c.decode), "prompt_tok_s": _stat_doc(c.prompt_speed),
             "decode_vs_baseline_pct": _round(c.decode_vs_base_pct, 2), "prompt_vs_baseline_pct": _round(c.prompt_vs_base_pct, 2)}
            for c in result.cells
        ],
        "outputs": outputs,
    }


# --------------------------------------------------------------------------- the plot


BASE_COLOR = "#4c72b0"
OTHER_COLOR = "#dd8452"
INVALID_COLOR = "#c0392b"


def plot(result: BenchResult, path: Path) -> Path:
    """A PNG: one panel per prompt for decode tok/s (top row) and prompt tok/s (bottom
    row); a bar per variant at its median with a min-max whisker; the baseline in its own
    colour; an invalid variant has no bar, only a red INVALID mark."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    req = result.request
    prompts = [p.name for p in req.prompts]
    names = [v.name for v in req.variants]
    ncols = len(prompts)
    width = max(8.5, min(16.0, 1.0 + ncols * max(2.4, 0.75 * len(names) + 0.8)))
    fig = Figure(figsize=(width, 6.8), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, ncols, squeeze=False)
    metrics = (("decode", "decode tok/s", "decode_vs_base_pct"), ("prompt_speed", "prompt tok/s", "prompt_vs_base_pct"))
    for row, (attr, label, pct_attr) in enumerate(metrics):
        for col, p in enumerate(prompts):
            ax = axes[row][col]
            cells = [result.cell(n, p) for n in names]
            tops = [getattr(c, attr).high for c in cells if c.valid and getattr(c, attr)]
            ymax = max(tops) * 1.28 if tops else 1.0
            for i, c in enumerate(cells):
                s: Stat | None = getattr(c, attr)
                if not c.valid or s is None:
                    # A full-height band, so that it cannot be read as a speed.
                    ax.axvspan(i - 0.31, i + 0.31, facecolor="#fbe9e7", edgecolor=INVALID_COLOR, hatch="//", linewidth=0.0)
                    ax.text(i, ymax * 0.5, "INVALID", rotation=90, ha="center", va="center", color=INVALID_COLOR,
                            fontsize=10, fontweight="bold", backgroundcolor="white")
                    continue
                color = BASE_COLOR if i == 0 else OTHER_COLOR
                ax.bar(i, s.median, width=0.62, color=color, edgecolor="black", linewidth=0.5)
                ax.errorbar(i, s.median, yerr=[[s.median - s.low], [s.high - s.median]], fmt="none", ecolor="black",
                            elinewidth=1.0, capsize=4)
                pct = getattr(c, pct_attr)
                note = _fmt(s.median) + ("*" if c.note else "") + ("" if i == 0 or pct is None else f"\n{pct:+.0f}%")
                ax.text(i, s.high + ymax * 0.02, note, ha="center", va="bottom", fontsize=8)
            ax.set_ylim(0, ymax)
            ax.set_xlim(-0.6, len(names) - 0.4)
            ax.set_xticks(range(len(names)))
            long_names = max(len(n) for n in names) > 6
            ax.set_xticklabels(names, rotation=20 if long_names else 0, ha="right" if long_names else "center", fontsize=8)
            for tick, c in zip(ax.get_xticklabels(), cells):
                if not c.valid:
                    tick.set_color(INVALID_COLOR)
            ax.set_title(f"{p}: {label}", fontsize=10)
            if col == 0:
                ax.set_ylabel(label)
            ax.grid(axis="y", alpha=0.3)
            ax.set_axisbelow(True)
    tie_note = "; * valid after a near tie" if any(c.note for c in result.cells) else ""
    fig.suptitle(
        f"llama-server bench: {req.model.path.name}, {req.decode_tokens} generated tokens, {req.rounds} rounds\n"
        f"bars: median, whiskers: min-max; labels: median and change vs the baseline {names[0]!r} (blue)\n"
        f"red INVALID: the answer diverged, no figure{tie_note}",
        fontsize=10,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True, kw_only=True)
class BenchOutputs:
    json: Path
    table: Path
    plot: Path


def write_outputs(result: BenchResult, run_dir: Path) -> BenchOutputs:
    """``bench.json`` (versioned), ``bench.md`` (the table and its context) and ``bench.png``."""
    run_dir = Path(run_dir)
    png = plot(result, run_dir / "bench.png")
    md = run_dir / "bench.md"
    atomic_write_text(md, render_markdown(result, plot_name=png.name))
    js = run_dir / "bench.json"
    write_state(js, BENCH_KIND, BENCH_SCHEMA, bench_doc(result, outputs={"table": md.name, "plot": png.name}))
    return BenchOutputs(json=js, table=md, plot=png)


# --------------------------------------------------------------------------- the lock


class BenchLock(FileLock):
    """An exclusive lock for a whole benchmark, so that two benchmarks never share the
    machine. The lock file names its holder. When it is held, fail at once naming the
    holder (``wait_s`` 0) or wait up to ``wait_s`` seconds for it."""

    def __init__(self, path: Path, command: str, *, wait_s: float = 0.0, poll_s: float = 0.5,
                 on_wait: Callable[[str], None] | None = None):
        super().__init__(path, command, wait_s=wait_s, poll_s=poll_s, on_wait=on_wait or ui.info)

    def busy(self, holder: str) -> LockError:
        return LockError(f"bench lock {self.path} is held by {holder}",
                         hint="wait for that benchmark to finish, or pass --wait SECONDS to wait for it")

    def timed_out(self, holder: str) -> LockError:
        return LockError(f"bench lock {self.path} is still held by {holder} after waiting {self.wait_s:g} s",
                         hint="try again later or wait longer with --wait SECONDS")

    def waiting(self, holder: str) -> str:
        return f"waiting for the bench lock {self.path}: held by {holder} (up to {self.wait_s:g} s)"
