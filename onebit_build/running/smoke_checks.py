"""The smoke stage's verdicts: pure functions from what a server answered to a
:class:`SmokeCheck` (one pass/fail with its evidence), and the decode speed of a device
measured on answers that were checked."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onebit_build.spec.recipe import PromptCheck
from onebit_build.running import server as srvmod
from onebit_build.running.devices import missing_devices
from onebit_build.running.measure import (Completion, Sample, Stat, answer_contains, decode_stat, prompt_stat,
                                          timed_sample, timing_problem)

SHORT_TEXT = 200  # characters of generated text kept as evidence


@dataclass(frozen=True, kw_only=True)
class SmokeCheck:
    """One pass/fail verdict of the smoke stage with the evidence it was drawn from."""

    name: str  # devices, start, health, catalog, props, answer:<prompt>, speed
    device: str | None  # None for checks of the whole run
    passed: bool
    summary: str  # one line for a person
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0  # how long the check took (its requests; the start: until healthy)


@dataclass(frozen=True, kw_only=True)
class Speed:
    """The speeds of a device over requests whose answers were checked."""

    device: str
    prompt: str  # name of the prompt used
    tokens: int  # generated tokens per request
    warmup: Sample | None
    samples: tuple[Sample, ...]
    valid: bool
    reason: str  # why the figures are invalid; "" when valid
    decode: Stat | None  # only when valid
    prompt_speed: Stat | None  # only when valid
    reference_tok_s: float | None = None  # only a reference measured on this same workload
    tolerance: float = 0.25
    on_par: bool | None = None  # None without a reference or without a valid figure
    workload: dict[str, Any] | None = None  # what was measured (speed_baseline.SpeedWorkload.to_dict())
    reference_note: str = ""  # which reference was used, or why none was
    first_token_s: float | None = None  # the streamed chat's time to its first token, when it passed

    @property
    def decode_tok_s(self) -> float | None:
        """The median decode speed; None when invalid."""
        return self.decode.median if self.decode else None

    @property
    def prompt_tok_s(self) -> float | None:
        """The median prompt speed; None when invalid."""
        return self.prompt_speed.median if self.prompt_speed else None


def short(text: str, n: int = SHORT_TEXT) -> str:
    return text if len(text) <= n else text[:n] + "..."


def check_devices(expected: tuple[str, ...], listed: tuple[str, ...]) -> SmokeCheck:
    missing = missing_devices(expected, listed)
    evidence = {"expected": list(expected), "listed": list(listed), "missing": list(missing),
                "cpu_always_present": True}
    if missing:
        return SmokeCheck(
            name="devices", device=None, passed=False,
            summary=f"--list-devices lacks {', '.join(missing)} (lists: {', '.join(listed) or 'none'})",
            evidence=evidence,
        )
    return SmokeCheck(
        name="devices", device=None, passed=True,
        summary=f"--list-devices shows every expected device ({', '.join(expected)})",
        evidence=evidence,
    )


def check_health(device: str, status: int, body: Any) -> SmokeCheck:
    state = srvmod.health_state(status, body)
    ok = state == "ready"
    return SmokeCheck(
        name="health", device=device, passed=ok,
        summary="/health: 200 status ok" if ok else f"/health: HTTP {status} {short(str(body), 120)}",
        evidence={"http_status": status, "body": body},
    )


def check_catalog(device: str, status: int, body: Any, *, model_id: str, ctx_size: int) -> SmokeCheck:
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
        evidence.update({"id": entry.get("id"), "n_params": meta.get("n_params"), "n_ctx": meta.get("n_ctx"),
                         "n_ctx_train": meta.get("n_ctx_train")})
        if entry.get("id") != model_id:
            problems.append(f"id {entry.get('id')!r} is not {model_id!r}")
        n_params = meta.get("n_params")
        if not isinstance(n_params, int) or isinstance(n_params, bool) or n_params <= 0:
            problems.append(f"parameter count {n_params!r} is not a positive number")
        if meta.get("n_ctx") != ctx_size:
            problems.append(f"context {meta.get('n_ctx')!r} is not {ctx_size}")
    if problems:
        return SmokeCheck(name="catalog", device=device, passed=False, summary="/v1/models: " + "; ".join(problems),
                          evidence=evidence)
    return SmokeCheck(
        name="catalog", device=device, passed=True,
        summary=f"/v1/models lists only {Path(model_id).name} ({evidence['n_params']:,} "
                f"parameters, context {ctx_size})",
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


def check_props(device: str, status: int, body: Any, *, expect_commit: str, model_path: Path,
                ctx_size: int) -> SmokeCheck:
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
        return SmokeCheck(name="props", device=device, passed=False, summary="/props: " + "; ".join(problems),
                          evidence=evidence)
    return SmokeCheck(
        name="props", device=device, passed=True,
        summary=f"/props: build {build_info}, model {model_path.name}, context {ctx_size}",
        evidence=evidence,
    )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def check_answer(device: str, prompt: PromptCheck, answer: Completion, *, n_predict: int) -> SmokeCheck:
    """The greedy answer to a recipe prompt must contain its expected text."""
    text = answer.text
    ok = answer_contains(text, prompt.expect)
    evidence = {
        "prompt": prompt.prompt,
        "expect": prompt.expect,
        "answer": short(text),
        "n_predict": n_predict,
        "predicted_n": answer.predicted_n,
        "stop_type": answer.stop_type,
    }
    verdict = "contains" if ok else "lacks"
    return SmokeCheck(
        name=f"answer:{prompt.name}", device=device, passed=ok,
        summary=f"{prompt.name}: answer {short(text, 60)!r} {verdict} {prompt.expect!r}",
        evidence=evidence,
    )


# The chat check: a question every chat model answers in a word, asked greedily with the
# model's thinking switched off (Qwen3's template thinks by default and then answers nothing
# within a few tokens; the template reads enable_thinking from chat_template_kwargs).
CHAT_QUESTION = "What is the capital of France? One word."
CHAT_EXPECT = "Paris"
CHAT_MIN_TOKENS = 24


def chat_request(question: str = CHAT_QUESTION, *, max_tokens: int = CHAT_MIN_TOKENS) -> dict[str, Any]:
    """The body of every chat request the smoke test sends: greedy, thinking off."""
    return {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
    }


def chat_reply(body: Any) -> tuple[str | None, str | None]:
    """The assistant message's ``content`` (the answer) and ``reasoning_content`` (what the
    server split off as the model's thinking); None where absent."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
        return None, None
    first = body["choices"][0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        return None, None
    content, reasoning = message.get("content"), message.get("reasoning_content")
    return (content if isinstance(content, str) else None), (reasoning if isinstance(reasoning, str) else None)


def check_chat(device: str, status: int, body: Any, *, expect: str = CHAT_EXPECT) -> SmokeCheck:
    """/v1/chat/completions of a model with its own chat template: HTTP 200 and an answer
    (``content``, never ``reasoning_content``) that contains ``expect``."""
    content, reasoning = chat_reply(body)
    evidence = {"status": status, "expect": expect, "reply": short(content or ""), "reasoning": short(reasoning or "")}
    answer = (content or "").strip()
    if status == 200 and answer_contains(answer, expect):
        return SmokeCheck(name="chat", device=device, passed=True,
                          summary=f"chat: answer {short(answer, 60)!r} contains {expect!r}", evidence=evidence)
    if status != 200:
        why = f"HTTP {status}"
    elif not answer and reasoning and reasoning.strip():
        why = (f"no answer, only reasoning ({short(reasoning.strip(), 60)!r}): the model thought although the "
               "request turned thinking off (chat_template_kwargs enable_thinking false); does its template read it?")
    elif not answer:
        why = "no assistant message" if content is None else "an empty answer"
    else:
        why = f"answer {short(answer, 60)!r} lacks {expect!r}"
    return SmokeCheck(name="chat", device=device, passed=False, summary=f"chat: {why}", evidence=evidence)


def judge_speed_sample(timed: Completion, *, answer: str, expect: str, tokens: int, prompt: str = "") -> Sample:
    """Judge one timed request. Its speed counts only when its own text starts with
    ``answer``, the checked greedy answer of the same prompt (which must contain the
    expected text), and it generated exactly ``tokens`` tokens with usable timings."""
    text = timed.text
    if not answer or not answer_contains(answer, expect):
        why = f"the reference answer {short(answer, 40)!r} lacks {expect!r}"
    elif not text.startswith(answer):
        why = f"the text {short(text, 40)!r} does not start with the checked answer {short(answer, 40)!r}"
    else:
        why = timing_problem(timed, tokens)
    return timed_sample(timed, why=why, text=short(text), prompt=prompt)


def on_par(measured: float, reference: float, tolerance: float) -> bool:
    """Measured decode speed is on par when it is at most ``tolerance`` below the reference.
    Faster is on par too."""
    return measured >= reference * (1.0 - tolerance)


def summarize_speed(
    *,
    device: str,
    prompt: str,
    tokens: int,
    warmup: Sample | None,
    samples: tuple[Sample, ...],
    answer_passed: bool,
    reference: float | None,
    tolerance: float,
    workload: dict[str, Any] | None = None,
    reference_note: str = "",
) -> Speed:
    """Statistics over the samples, reported only when the prompt's answer check passed
    and every timed request's own answer held."""
    reason = ""
    if not answer_passed:
        reason = f"the answer check of prompt {prompt!r} failed"
    elif not samples:
        reason = "no timed requests"
    else:
        bad = [s for s in samples if not s.valid]
        if bad:
            reason = f"{len(bad)} of {len(samples)} timed answers failed their check: {bad[0].why}"
    if reason:
        return Speed(
            device=device, prompt=prompt, tokens=tokens, warmup=warmup, samples=samples,
            valid=False, reason=reason, decode=None, prompt_speed=None,
            reference_tok_s=reference, tolerance=tolerance, on_par=None,
            workload=workload, reference_note=reference_note,
        )
    decode = decode_stat(samples)
    return Speed(
        device=device, prompt=prompt, tokens=tokens, warmup=warmup, samples=samples,
        valid=True, reason="", decode=decode, prompt_speed=prompt_stat(samples),
        reference_tok_s=reference, tolerance=tolerance, workload=workload, reference_note=reference_note,
        on_par=None if reference is None else on_par(decode.median, reference, tolerance),
    )


def check_speed(speed: Speed) -> SmokeCheck:
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
        "samples_answer_ok": [s.valid for s in speed.samples],
        "workload": speed.workload,
        "reference_note": speed.reference_note,
        "first_token_s": speed.first_token_s,
    }
    if not speed.valid:
        return SmokeCheck(name="speed", device=speed.device, passed=False, summary=f"speed invalid: {speed.reason}",
                          evidence=evidence)
    figures = (f"decode {speed.decode_tok_s:.1f} tok/s, prompt {speed.prompt_tok_s:.1f} tok/s (median of "
               f"{len(speed.samples)} x {speed.tokens} tokens)")
    if speed.first_token_s is not None:
        figures += f", first token {speed.first_token_s:.2f} s (streamed chat)"
    if speed.on_par is False:
        assert speed.reference_tok_s is not None and speed.decode_tok_s is not None
        floor = speed.reference_tok_s * (1 - speed.tolerance)
        return SmokeCheck(
            name="speed", device=speed.device, passed=False,
            summary=f"{figures}: below the reference {speed.reference_tok_s:g} tok/s - "
                    f"{speed.tolerance:.0%} = {floor:.1f}",
            evidence=evidence,
        )
    if speed.on_par:
        figures += f", on par with the reference {speed.reference_tok_s:g} tok/s"
    elif speed.reference_note:
        figures += f"; {speed.reference_note}"
    return SmokeCheck(name="speed", device=speed.device, passed=True, summary=figures, evidence=evidence)
