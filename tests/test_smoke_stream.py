"""The streamed chat check: more than 3 SSE chunks, ending with [DONE], whose text is the
whole answer's, and the time to the first token. The judges on hand-made events; a real
HTTP server on loopback that streams too few chunks, another text or no [DONE] fails the
check; the real llama-server with the real model passes it."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from onebit_build.running import server as srvmod
from onebit_build.running.server_args import ServerSpec
from onebit_build.running.stream import (DONE, STREAM_QUESTION, SSEReader, StreamFacts, Streamed, check_stream,
                                         stream_body, stream_check)

WHOLE = "One, two, three, four, five."
PIECES = ["One", ",", " two", ",", " three", ",", " four", ",", " five", "."]


def chunk(text: str | None = None, *, role: bool = False, finish: str | None = None) -> str:
    delta = {"role": "assistant", "content": None} if role else ({"content": text} if text is not None else {})
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta,
                                                                        "finish_reason": finish}]})


def events(pieces: list[str], *, done: bool = True, start: float = 0.5) -> tuple[tuple[float, str], ...]:
    datas = [chunk(role=True), *(chunk(p) for p in pieces), chunk(finish="length")]
    datas += [DONE] if done else []
    return tuple((start + 0.01 * i, d) for i, d in enumerate(datas))


def whole(text: str = WHOLE) -> dict:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


def streamed(evs, status: int = 200, content_type: str = "text/event-stream") -> Streamed:
    return Streamed(status=status, content_type=content_type, events=evs, seconds=1.0)


# --------------------------------------------------------------------------- pure judges


def sse_events(lines: list[str]) -> list[str]:
    reader = SSEReader()
    found = [d for d in (reader.feed(line) for line in lines) if d is not None]
    last = reader.end()
    return found + ([last] if last is not None else [])


def test_sse_events_are_read_as_the_format_says():
    lines = [": a comment", "data: {\"a\": 1}", "", "event: x", "data:first", "data: second", "\r", "data: [DONE]"]
    assert sse_events(lines) == ['{"a": 1}', "first\nsecond", "[DONE]"]
    assert sse_events(["", "", "id: 3", ""]) == []


def test_the_request_is_greedy_with_thinking_and_prompt_cache_off():
    body = stream_body(stream=True)
    assert body["stream"] is True and body["temperature"] == 0 and body["cache_prompt"] is False
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"] == [{"role": "user", "content": STREAM_QUESTION}]
    assert stream_body(stream=False) == {**body, "stream": False}


def test_a_good_stream_passes_with_its_time_to_first_token():
    facts = StreamFacts.of(events(PIECES))
    assert facts.chunks == len(PIECES) + 2 and facts.text == WHOLE and facts.done_last
    assert facts.first_token_s == pytest.approx(0.51)  # the role chunk carries no text
    check = check_stream("CPU", 200, whole(), streamed(events(PIECES)))
    assert check.passed, check.summary
    assert "12 chunks ending with [DONE]" in check.summary and "first token after 0.51 s" in check.summary
    assert check.evidence["first_token_s"] == 0.51 and check.evidence["chunks"] == 12


@pytest.mark.parametrize("evs, why", [
    (events(["One"]), "3 chunk(s), expected more than 3"),
    (events(PIECES, done=False), "does not end with data: [DONE]"),
    (events(PIECES) + ((2.0, chunk("late")),), "does not end with data: [DONE]"),
    (events(PIECES[:-1]), "differs from the whole answer at character 27"),
    (events(PIECES) + ((2.0, "not json"),), "is not JSON"),
])
def test_a_wrong_stream_fails_saying_why(evs, why):
    check = check_stream("CPU", 200, whole(), streamed(evs))
    assert not check.passed and why in check.summary, check.summary


def test_http_status_content_type_and_the_whole_answer_count_too():
    assert "HTTP 500" in check_stream("CPU", 200, whole(), streamed(events(PIECES), status=500)).summary
    assert "is not text/event-stream" in check_stream("CPU", 200, whole(),
                                                      streamed(events(PIECES), content_type="application/json")).summary
    assert "whole answer to the same request failed (HTTP 503)" in check_stream(
        "CPU", 503, {"error": "busy"}, streamed(events(PIECES))).summary


# --------------------------------------------------------------------------- a real server that answers wrongly


class Scripted(BaseHTTPRequestHandler):
    """Answers the chat endpoint as ``self.server.mode`` says: whole, or as SSE chunks."""

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = self.server.mode  # type: ignore[attr-defined]
        if not body.get("stream"):
            data = json.dumps(whole()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        pieces = {"good": PIECES, "few": [WHOLE], "other": [*PIECES[:-1], "!"], "no-done": PIECES}[mode]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(f"data: {chunk(role=True)}\n\n".encode())
        self.wfile.flush()
        time.sleep(0.3)  # the first token comes later than the role chunk
        for p in pieces:
            self.wfile.write(f"data: {chunk(p)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(f"data: {chunk(finish='stop')}\n\n".encode())
        if mode != "no-done":
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def scripted_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


@pytest.mark.parametrize("mode, why", [
    ("few", "3 chunk(s), expected more than 3"),
    ("other", "differs from the whole answer at character 27: '!' against '.'"),
    ("no-done", "does not end with data: [DONE]"),
])
def test_a_real_server_that_streams_wrongly_fails(scripted_server, mode, why):
    scripted_server.mode = mode
    check = stream_check(f"http://127.0.0.1:{scripted_server.server_port}", "CPU", timeout=30)
    assert not check.passed and why in check.summary, check.summary


def test_a_real_server_that_streams_right_passes_and_its_first_token_is_timed(scripted_server):
    scripted_server.mode = "good"
    check = stream_check(f"http://127.0.0.1:{scripted_server.server_port}", "CPU", timeout=30)
    assert check.passed, check.summary
    assert 0.3 <= check.evidence["first_token_s"] < 5 and check.evidence["chunks"] == len(PIECES) + 2


# --------------------------------------------------------------------------- the real llama-server


def test_the_real_llama_server_streams_the_whole_answer(llama_server, gemma_model, tmp_path):
    spec = ServerSpec(binary=Path(llama_server), model=Path(gemma_model), log=tmp_path / "server.log", ctx_size=2048,
                      threads=2, alias="gemma")
    server = srvmod.start(spec)
    try:
        check = stream_check(server.url, "CPU", timeout=300)
    finally:
        server.stop()
    assert check.passed, check.summary
    ev = check.evidence
    assert ev["chunks"] > 3 and ev["ends_with_done"] and ev["streamed_text"] == ev["whole_text"] != ""
    assert 0 < ev["first_token_s"] < ev["seconds"]
