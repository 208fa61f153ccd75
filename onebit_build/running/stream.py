"""The streamed chat check: the same greedy chat asked twice, once whole and once with
``"stream": true``. The stream must arrive as server-sent events, more than
:data:`MIN_CHUNKS` - 1 JSON chunks ending with ``data: [DONE]``, and the text its chunks carry
must be the whole answer's, character for character. The time from sending the request to
the first chunk that carries text is the time to the first token.

The judges are pure (events in, a :class:`SmokeCheck` out); :func:`stream_check` does the two
requests.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from onebit_build.core.errors import SmokeError
from onebit_build.running.smoke_checks import SmokeCheck, chat_reply, chat_request, short

# Counting asks for several tokens of any chat model; a base model answers junk, but greedy
# junk all the same, so the streamed and the whole answer must still agree.
STREAM_QUESTION = "Count from one to five."
STREAM_MAX_TOKENS = 16
MIN_CHUNKS = 4  # "more than 3 chunks": a role chunk, a text chunk and a closing one are not a stream
DONE = "[DONE]"
EVENT_STREAM = "text/event-stream"


def stream_body(*, stream: bool, max_tokens: int = STREAM_MAX_TOKENS) -> dict[str, Any]:
    """The chat request of the check: greedy, thinking off, the prompt cache off (so that the
    second request computes what the first did)."""
    return {**chat_request(STREAM_QUESTION, max_tokens=max_tokens), "cache_prompt": False, "stream": stream}


@dataclass(frozen=True, kw_only=True)
class Streamed:
    """What a streamed request brought: its status, its content type and every event's data
    with the seconds from sending the request to the event's arrival."""

    status: int
    content_type: str
    events: tuple[tuple[float, str], ...]
    seconds: float


class SSEReader:
    """Server-sent events from lines: the ``data:`` fields of an event joined with newlines,
    an event ending at a blank line; comment lines (``:``) and other fields ignored."""

    def __init__(self) -> None:
        self.data: list[str] = []

    def feed(self, line: str) -> str | None:
        """One line (without its end); the data of the event it completes, else None."""
        line = line.rstrip("\r")
        if not line:
            done, self.data = self.data, []
            return "\n".join(done) if done else None
        field, _, value = line.partition(":")
        if field == "data":
            self.data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> str | None:
        """The data of an event the stream did not close with a blank line."""
        return self.feed("")


def chunk_text(chunk: Any) -> str | None:
    """The text one chat chunk adds (``choices[0].delta.content``); None when it adds none."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    delta = first.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) and content else None


@dataclass(frozen=True, kw_only=True)
class StreamFacts:
    """What a stream said, read from its events. Pure to make."""

    chunks: int  # JSON chunks before [DONE]
    text: str  # the text the chunks carry, joined
    done_last: bool  # the stream ended with data: [DONE] and nothing after it
    problems: tuple[str, ...]  # events that are not chat chunks
    first_token_s: float | None  # when the first chunk with text arrived

    @classmethod
    def of(cls, events: tuple[tuple[float, str], ...]) -> StreamFacts:
        chunks, parts, problems = 0, [], []
        first: float | None = None
        for i, (at, data) in enumerate(events):
            if data.strip() == DONE:
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                problems.append(f"event {i + 1} is not JSON: {short(data, 60)!r}")
                continue
            chunks += 1
            text = chunk_text(chunk)
            if text is not None:
                parts.append(text)
                first = at if first is None else first
        done_last = bool(events) and events[-1][1].strip() == DONE
        return cls(chunks=chunks, text="".join(parts), done_last=done_last, problems=tuple(problems),
                   first_token_s=first)


def check_stream(device: str, status: int, body: Any, streamed: Streamed) -> SmokeCheck:
    """The verdict on one streamed chat against the whole answer (``status``, ``body``) to the
    same request. Pure."""
    facts = StreamFacts.of(streamed.events)
    whole, _ = chat_reply(body)
    evidence = {"question": STREAM_QUESTION, "http_status": streamed.status, "content_type": streamed.content_type,
                "chunks": facts.chunks, "ends_with_done": facts.done_last, "streamed_text": short(facts.text),
                "whole_status": status, "whole_text": short(whole or ""),
                "first_token_s": None if facts.first_token_s is None else round(facts.first_token_s, 4),
                "seconds": round(streamed.seconds, 3)}
    problems = list(facts.problems)
    if streamed.status != 200:
        problems.insert(0, f"HTTP {streamed.status}")
    if not streamed.content_type.startswith(EVENT_STREAM):
        problems.append(f"content type {streamed.content_type!r} is not {EVENT_STREAM}")
    if facts.chunks < MIN_CHUNKS:
        problems.append(f"{facts.chunks} chunk(s), expected more than {MIN_CHUNKS - 1}")
    if not facts.done_last:
        problems.append(f"the stream does not end with data: {DONE}")
    if status != 200 or whole is None:
        problems.append(f"the whole answer to the same request failed (HTTP {status})")
    elif facts.text != whole:
        at = next((i for i, (a, b) in enumerate(zip(facts.text, whole)) if a != b), min(len(facts.text), len(whole)))
        problems.append(f"the streamed text differs from the whole answer at character {at}: "
                        f"{short(facts.text[at:], 30)!r} against {short(whole[at:], 30)!r}")
    if problems:
        return SmokeCheck(name="stream", device=device, passed=False, summary="stream: " + "; ".join(problems),
                          evidence=evidence)
    return SmokeCheck(name="stream", device=device, passed=True, evidence=evidence,
                      summary=f"stream: {facts.chunks} chunks ending with {DONE}, the text of the whole answer; "
                              f"first token after {facts.first_token_s:.2f} s")


# --------------------------------------------------------------------------- I/O


def read_stream(url: str, body: dict[str, Any], *, timeout: float) -> Streamed:
    """POST ``body`` to ``url`` and read its events as they arrive, for at most ``timeout``
    seconds in all (SmokeError after that, or when the request fails)."""
    import requests

    with requests.Session() as http:
        http.trust_env = False  # loopback: never through a proxy
        t0 = time.monotonic()
        events: list[tuple[float, str]] = []
        reader = SSEReader()
        try:
            with http.post(url, json=body, stream=True, timeout=timeout) as r:
                for raw in r.iter_lines(decode_unicode=False):
                    at = time.monotonic() - t0
                    if at > timeout:
                        raise SmokeError(f"the stream did not end within {timeout:.0f} s")
                    data = reader.feed(raw.decode("utf-8", errors="replace"))
                    if data is not None:
                        events.append((at, data))
                last = reader.end()
                if last is not None:
                    events.append((time.monotonic() - t0, last))
                return Streamed(status=r.status_code, content_type=r.headers.get("Content-Type", ""),
                                events=tuple(events), seconds=time.monotonic() - t0)
        except requests.RequestException as exc:
            raise SmokeError(f"the streamed chat failed: {exc}") from None


def stream_check(base_url: str, device: str, *, timeout: float, max_tokens: int = STREAM_MAX_TOKENS) -> SmokeCheck:
    """Ask the check's chat whole, then streamed, of the server at ``base_url``; the verdict."""
    import requests

    url = base_url.rstrip("/") + "/v1/chat/completions"
    with requests.Session() as http:
        http.trust_env = False
        try:
            r = http.post(url, json=stream_body(stream=False, max_tokens=max_tokens), timeout=timeout)
        except requests.RequestException as exc:
            raise SmokeError(f"the chat to compare the stream with failed: {exc}") from None
    try:
        whole: Any = r.json()
    except ValueError:
        whole = r.text
    streamed = read_stream(url, stream_body(stream=True, max_tokens=max_tokens), timeout=timeout)
    return check_stream(device, r.status_code, whole, streamed)
