"""Using what was built: 'serve' in the foreground and 'install --prefix', on the real
default build (cached in the test workspace) and the real model."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests

from _support import REPO, run_cli, shared_from_user, sigint_default
from conftest import workspace_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.shared_workspace]


def _free_port() -> int:
    from onebit_build.running.ports import free_port

    return free_port()


def test_serve_prints_the_base_url_answers_and_stops_on_ctrl_c(llama_server, gemma_model):
    ws = workspace_for_tests()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_MIRROR_DIR", "ONEBIT_WORKSPACE")}
    env["ONEBIT_ROOT"] = str(REPO)
    argv = [sys.executable, "-m", "onebit_build", "--workspace", str(ws), *shared_from_user(ws), "--model",
            str(gemma_model), "serve", "--port", str(port), "--", "--threads", "2"]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=sigint_default)
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if "OpenAI base URL" in line:
                break
        text = "".join(seen)
        assert f"OpenAI base URL: http://127.0.0.1:{port}/v1" in text, text
        pid = int(re.search(r"\(pid (\d+),", text).group(1))
        models = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == ["gemma-3-270m-q4_k_m"]  # the recipe's model name, not a path
        r = requests.post(f"http://127.0.0.1:{port}/v1/completions",
                          json={"prompt": "Question: What is the capital of France?\nAnswer:", "max_tokens": 8,
                                "temperature": 0},
                          timeout=120)
        assert r.status_code == 200 and "Paris" in r.json()["choices"][0]["text"]
        # The extra argument after -- reached the server.
        run = max((p for p in (ws / "runs").iterdir() if p.name.endswith("-serve")), key=lambda p: p.name)
        assert "--threads 2" in (run / "server.log").read_text()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        text += proc.stdout.read()  # through the same buffer readline used (communicate would skip what it holds)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, text
    assert "no chat template" in text
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/health", timeout=5)


def test_serve_refuses_a_port_in_use(llama_server, gemma_model):
    import socket

    ws = workspace_for_tests()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = run_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "--model", str(gemma_model), "serve",
                      "--port", str(port))
    assert out.returncode == 2, out.stderr
    assert f"port {port} is in use" in out.stderr and "--port" in out.stderr


def test_install_gives_a_relocatable_tree_with_its_manifest(llama_server, tmp_path):
    ws = workspace_for_tests()
    prefix = tmp_path / "prefix"
    out = run_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "install", "--prefix", str(prefix))
    assert out.returncode == 0, out.stderr
    server = prefix / "bin" / "llama-server"
    # What went where answers the command: stdout (kept with -q); progress stays on stderr.
    assert out.stdout.startswith("installed ") and str(prefix) in out.stdout and "installed" not in out.stderr
    doc = json.loads((prefix / "share" / "onebit-build" / "build-manifest.json").read_text())
    outputs = {o["name"]: o for c in doc["components"] for o in c["outputs"]}
    from onebit_build.core.fsutil import sha256_file

    assert sha256_file(server) == outputs["llama-server"]["sha256"]
    # Moved elsewhere, it still runs with its own libraries (RUNPATH $ORIGIN), not the build's.
    moved = tmp_path / "moved"
    prefix.rename(moved)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ver = subprocess.run([str(moved / "bin" / "llama-server"), "--version"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert ver.returncode == 0 and "0c1e570" in ver.stdout + ver.stderr
    ldd = subprocess.run(["ldd", str(moved / "bin" / "llama-server")], capture_output=True,
                         text=True, timeout=60).stdout
    assert str(moved / "bin" / "libllama-server-impl.so") in ldd, ldd
