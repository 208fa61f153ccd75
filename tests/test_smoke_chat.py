"""The chat check: every chat request turns the model's thinking off, the answer is
``content`` (never ``reasoning_content``) and must contain the expected word. Proven on the
real llama-server with upstream llama.cpp's own Qwen3 template (from the pinned tree the
default build was made from) in a tiny random-weight GGUF: the smoke test's request renders
the empty think block that switches Qwen3's thinking off, the old request did not."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import workspace_for_tests
from tiny_chat_model import write_tiny_model

from onebit_build.running import server as srvmod
from onebit_build.running.server_args import ServerSpec
from onebit_build.running.smoke_checks import CHAT_EXPECT, chat_reply, chat_request, check_chat

QWEN3_TEMPLATE = "models/templates/Qwen-Qwen3-0.6B.jinja"
THINKING_OFF = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
# What the smoke test sent before: no chat_template_kwargs, so Qwen3 thinks first.
OLD_REQUEST = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}


def reply(content: str | None, reasoning: str | None = None) -> dict:
    message: dict = {"role": "assistant"}
    if content is not None:
        message["content"] = content
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {"choices": [{"message": message}]}


# --------------------------------------------------------------------------- pure decisions


def test_every_chat_request_is_greedy_with_thinking_off():
    body = chat_request()
    assert body["temperature"] == 0 and body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"] == [{"role": "user", "content": "What is the capital of France? One word."}]
    assert chat_request(max_tokens=40)["max_tokens"] == 40


def test_the_answer_must_name_the_expected_word():
    ok = check_chat("HRX20", 200, reply("Paris"))
    assert ok.passed and "'Paris'" in ok.summary
    wrong = check_chat("HRX20", 200, reply("Hello! How can I help?"))
    assert not wrong.passed and "lacks 'Paris'" in wrong.summary


def test_reasoning_is_not_the_answer():
    """A thinking model's reply within a few tokens: empty content, the thought split off."""
    thought = check_chat("Vulkan0", 200, reply("", reasoning="Okay, the user asks about France. Paris"))
    assert not thought.passed
    assert "only reasoning" in thought.summary and "enable_thinking" in thought.summary
    assert thought.evidence["reasoning"].startswith("Okay")


@pytest.mark.parametrize(
    "status, body, why",
    [
        (500, {"error": "x"}, "HTTP 500"),
        (200, "not json", "no assistant message"),
        (200, {"choices": []}, "no assistant message"),
        (200, reply("   "), "an empty answer"),
    ],
)
def test_no_answer_fails(status, body, why):
    check = check_chat("CPU", status, body)
    assert not check.passed and why in check.summary


def test_chat_reply_reads_both_fields():
    assert chat_reply(reply("Paris", "thought")) == ("Paris", "thought")
    assert chat_reply({"choices": [{"message": {"content": 3}}]}) == (None, None)


# --------------------------------------------------------------------------- the real server


def pinned_qwen3_template() -> Path:
    """Upstream's Qwen3 template in the source tree the test build was made from."""
    found = sorted((workspace_for_tests() / "src").glob(f"llama.cpp-*/{QWEN3_TEMPLATE}"))
    if not found:
        pytest.fail(f"no {QWEN3_TEMPLATE} under {workspace_for_tests() / 'src'}: the default build fetches it")
    return found[0]


@pytest.fixture(scope="module")
def qwen3_server(llama_server, tmp_path_factory):
    folder = tmp_path_factory.mktemp("qwen3-template")
    model = write_tiny_model(folder / "tiny-qwen3-template.gguf", chat_template=pinned_qwen3_template().read_text())
    spec = ServerSpec(binary=Path(llama_server), model=model, log=folder / "server.log", ctx_size=512, threads=2)
    server = srvmod.start(spec)
    yield server
    server.stop()


def rendered(server, body: dict) -> str:
    status, doc = server.post_json("/apply-template", body)
    assert status == 200 and isinstance(doc, dict), doc
    return doc["prompt"]


def test_the_smoke_request_turns_qwen3_thinking_off(qwen3_server):
    prompt = rendered(qwen3_server, chat_request())
    assert prompt.endswith(THINKING_OFF), prompt
    assert "<|im_start|>user\nWhat is the capital of France? One word.<|im_end|>" in prompt


def test_the_old_request_leaves_qwen3_thinking_on(qwen3_server):
    prompt = rendered(qwen3_server, OLD_REQUEST)
    assert prompt.endswith("<|im_start|>assistant\n") and "<think>" not in prompt, prompt


def test_the_chat_check_fails_on_a_real_reply_without_the_answer(qwen3_server):
    """The real endpoint answers the smoke request with a message; random weights do not
    know Paris, so the check fails, naming what came back."""
    status, body = qwen3_server.post_json("/v1/chat/completions", chat_request())
    content, _ = chat_reply(body)
    assert status == 200 and content is not None
    check = check_chat("CPU", status, body)
    assert CHAT_EXPECT not in content and not check.passed
