"""Smoke deadlines against a stand-in server process that is healthy but never answers a
completion: the stage ends in bounded time and says which deadline it hit."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from onebit_build.spec.recipe import load_recipe

from onebit_build.spec.pins import load_pins
from onebit_build.core.errors import ConfigError
from onebit_build.running.model import ModelFile
from onebit_build.running.smoke import run_smoke

REPO = Path(__file__).resolve().parent.parent

SILENT_SERVER = r'''
import http.server, json, sys, threading, time
args = sys.argv[1:]
if "--list-devices" in args:
    print("Available devices:\n  (none)")
    sys.exit(0)
port = int(args[args.index("--port") + 1])
model = args[args.index("-m") + 1]

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, doc):
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health":
            self._send({"status": "ok"})
        elif self.path == "/v1/models":
            self._send({"data": [{"id": model, "meta": {"n_ctx_train": 2048}}]})
        else:
            self._send({"build_info": "b1-0c1e570", "model_path": model,
                        "default_generation_settings": {"n_ctx": 2048}})
    def do_POST(self):
        # Accepts the request and never answers.
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        time.sleep(3600)

srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
srv.daemon_threads = True
srv.serve_forever()
'''


@pytest.fixture
def silent_server(tmp_path) -> Path:
    script = tmp_path / "llama-server"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(SILENT_SERVER))
    script.chmod(0o755)
    return script


def _recipe(**smoke):
    base = load_recipe(REPO / "recipes" / "default.yaml", load_pins(REPO / "pins.yaml"))
    return replace(base, smoke=replace(base.smoke, **smoke))


def _model(tmp_path: Path) -> ModelFile:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    return ModelFile(path=f, sha256="0" * 64, source="local")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_request_deadline_comes_from_the_tokens(silent_server, tmp_path):
    recipe = _recipe(answer_tokens=4, speed_tokens=8, speed_repeats=1, request_base_s=1.0, min_tok_s=4.0,
                     stage_timeout_s=120.0)
    t0 = time.monotonic()
    result = run_smoke(recipe=recipe, server_bin=silent_server, model=_model(tmp_path), run_dir=tmp_path / "run",
                       expect_commit="0c1e570")
    took = time.monotonic() - t0
    assert not result.passed
    checks = {c.name: c for c in result.device("CPU").checks}
    first = checks["answer:capital"]
    assert not first.passed and "no answer within 2 s" in first.summary and "smoke.min_tok_s 4" in first.summary
    # The server is known to hang: nothing more is sent to it.
    assert "missed an earlier deadline" in checks["answer:landmark"].summary
    assert "missed an earlier deadline" in checks["stream"].summary and not checks["speed"].passed
    assert took < 20, f"the stage took {took:.0f} s"
    pid = next(c for c in result.device("CPU").checks if c.name == "start").evidence["pid"]
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the stand-in server was left running"


def test_stage_deadline_bounds_every_device(silent_server, tmp_path):
    recipe = _recipe(devices=("CPU", "CPU"), answer_tokens=4, request_base_s=30.0, min_tok_s=1.0, stage_timeout_s=3.0)
    t0 = time.monotonic()
    result = run_smoke(recipe=recipe, server_bin=silent_server, model=_model(tmp_path), run_dir=tmp_path / "run",
                       expect_commit="0c1e570")
    took = time.monotonic() - t0
    assert took < 15, f"the stage took {took:.0f} s with a 3 s deadline"
    summaries = [c.summary for d in result.device_results for c in d.checks]
    assert any("smoke.stage_timeout_s 3 s" in s for s in summaries), summaries
    assert any("smoke stage deadline reached" in s for s in summaries), summaries


def test_deadlines_are_validated(tmp_path):
    text = (REPO / "recipes" / "default.yaml").read_text()
    bad = tmp_path / "recipes" / "default.yaml"
    bad.parent.mkdir()
    bad.write_text(text.replace("smoke:\n", "smoke:\n  min_tok_s: 0\n", 1))
    with pytest.raises(ConfigError) as e:
        load_recipe(bad, load_pins(REPO / "pins.yaml"))
    assert "min_tok_s" in str(e.value) and "default.yaml" in str(e.value)
