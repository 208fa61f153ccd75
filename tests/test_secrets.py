"""Secrets stay secret: an API key for 'serve' reaches llama-server in its environment, never
on its command line, in a log, a report or a message; a server open beyond loopback without a
key is warned about on every start. The pure decisions first, then real processes: the one
process runner's log, the CLI, and the real llama-server behind 'serve'."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from _support import REPO, run_cli, shared_from_user, sigint_default
from onebit_build.core import proc
from onebit_build.running.server_args import ServerSpec, open_without_key, server_argv, server_env

KEY = "s3cret-0b1t-key"
OTHER_KEY = "an0ther-s3cret"


def _spec(**kw) -> ServerSpec:
    return ServerSpec(binary=Path("llama-server"), model=Path("m.gguf"), log=Path("server.log"), **kw)


@pytest.mark.parametrize("extra", [("--api-key", KEY), (f"--api-key={KEY}",)])
def test_a_key_after_the_double_dash_moves_to_the_environment(extra):
    spec = _spec(extra_args=("-t", "2", *extra))
    argv = server_argv(spec, 8080)
    assert not any(KEY in a for a in argv) and "--api-key" not in " ".join(argv)
    assert argv[-2:] == ["-t", "2"]  # the other extra arguments stay, in order
    assert server_env(spec, {})["LLAMA_API_KEY"] == KEY


def test_keys_from_the_option_and_the_arguments_are_all_given():
    env = server_env(_spec(api_key=KEY, extra_args=("--api-key", OTHER_KEY)), {})
    assert env["LLAMA_API_KEY"] == f"{KEY},{OTHER_KEY}"
    assert KEY not in repr(_spec(api_key=KEY))  # a spec printed or logged never shows it


@pytest.mark.parametrize("host,warned", [("127.0.0.1", False), ("::1", False), ("localhost", False),
                                         ("0.0.0.0", True), ("::", True), ("192.168.1.5", True)])
def test_listening_beyond_loopback_without_a_key_is_warned(host, warned):
    assert (open_without_key(_spec(host=host), {}) is not None) is warned
    assert open_without_key(_spec(host=host, api_key=KEY), {}) is None
    assert open_without_key(_spec(host=host), {"LLAMA_API_KEY": KEY}) is None
    assert open_without_key(_spec(host=host, extra_args=("--api-key-file", "k")), {}) is None


@pytest.mark.parametrize("extra", [("--host", "0.0.0.0"), ("--host=0.0.0.0",), ("--host", "127.0.0.1,0.0.0.0")])
def test_a_host_after_the_double_dash_is_the_one_judged_and_printed(extra):
    """llama-server listens where the last --host says: that host is the spec's, the only one
    on its command line, and the one the key check judges."""
    spec = _spec(host="127.0.0.1", extra_args=("-t", "2", *extra))
    assert spec.host == extra[-1].removeprefix("--host=") and spec.extra_args == ("-t", "2")
    argv = server_argv(spec, 8080)
    assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == spec.host
    assert not any(a.startswith("--host=") for a in argv)
    assert open_without_key(spec, {}) is not None and spec.host in open_without_key(spec, {})
    assert open_without_key(_spec(extra_args=("--host", "::1")), {}) is None


def test_serve_checks_the_host_after_the_double_dash_before_anything_is_built(tmp_path):
    """``serve -- --host 0.0.0.0`` is probed as 0.0.0.0 before the build: a port in use on
    another address of the machine (free on 127.0.0.1) is refused at once; a bad host too."""
    import socket

    from onebit_build.running.ports import free_port

    port = free_port("127.0.0.2")
    with socket.socket() as s:
        s.bind(("127.0.0.2", port))
        s.listen(1)
        out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--offline", "serve", "--port", str(port),
                      "--", "--host", "0.0.0.0", timeout=120)
    assert out.returncode == 2 and f"port {port} is in use on some address" in out.stderr, out.stderr
    assert not (tmp_path / "ws" / "src").exists()
    for host, said in (("999.1.1.1", "not an IP address"), ("127.0.0.1,0.0.0.0", "one address")):
        out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "serve", "--", f"--host={host}", timeout=120)
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
        assert out.returncode == 2 and len(errors) == 1 and said in errors[0], out.stderr


def test_the_process_runner_never_logs_a_key(tmp_path):
    """Whatever program gets --api-key, the runner's echo and log show *** instead."""
    log = tmp_path / "run.log"
    proc.run(["true", "--api-key", KEY, f"--api-key={OTHER_KEY}"], log=log)
    proc.run_split(["true", "--api-key", KEY], log=log)
    server = proc.spawn(["sleep", "0"], log=log)
    server.wait()
    text = log.read_text()
    assert KEY not in text and OTHER_KEY not in text
    assert "--api-key '***'" in text or "--api-key ***" in text


def test_a_missing_key_file_is_one_line_before_anything_is_built(tmp_path):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "serve", "--api-key-file", str(tmp_path / "nope"))
    assert out.returncode == 2, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "--api-key-file" in errors[0] and "Traceback" not in out.stderr
    assert not (tmp_path / "ws" / "src").exists()  # nothing fetched or built
    empty = tmp_path / "empty"
    empty.write_text("# no key here\n\n")
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "serve", "--api-key-file", str(empty))
    assert out.returncode == 2 and "holds no key" in out.stderr, out.stderr


# --------------------------------------------------------------------------- the real server


def _serve(args: list[str], env_extra: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Start the real 'serve' in the test workspace; return it and its output up to the URL."""
    from conftest import workspace_for_tests

    ws = workspace_for_tests()
    env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_MIRROR_DIR", "ONEBIT_WORKSPACE", "LLAMA_API_KEY")}
    env.update({"ONEBIT_ROOT": str(REPO), **env_extra})
    argv = [sys.executable, "-m", "onebit_build", "--workspace", str(ws), *shared_from_user(ws), *args]
    p = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=sigint_default)
    seen = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        seen.append(line)
        if not line or "OpenAI base URL" in line:
            break
    return p, "".join(seen)


def _stop(p: subprocess.Popen) -> str:
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.stdout.read()


def _latest_serve_log() -> Path:
    from conftest import workspace_for_tests

    runs = workspace_for_tests() / "runs"
    return max((r for r in runs.iterdir() if r.name.endswith("-serve")), key=lambda r: r.name) / "server.log"


@pytest.mark.slow
@pytest.mark.shared_workspace
def test_serve_takes_keys_from_a_file_and_after_the_dash_and_shows_them_nowhere(llama_server, gemma_model, tmp_path):
    from onebit_build.running.ports import free_port

    key_file = tmp_path / "key"
    key_file.write_text(f"# the test's key\n{KEY}\n")
    port = free_port()
    p, text = _serve(["--model", str(gemma_model), "serve", "--host", "0.0.0.0", "--port", str(port),
                      "--api-key-file", str(key_file), "--", "--api-key", OTHER_KEY], {})
    try:
        assert "OpenAI base URL" in text, text
        pid = int(re.search(r"\(pid (\d+),", text).group(1))
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        base = f"http://127.0.0.1:{port}/v1/models"
        assert requests.get(base, timeout=30).status_code == 401
        for key in (KEY, OTHER_KEY):
            assert requests.get(base, headers={"Authorization": f"Bearer {key}"}, timeout=30).status_code == 200
    finally:
        text += _stop(p)
    log = _latest_serve_log().read_text()
    for key in (KEY, OTHER_KEY):
        assert key not in cmdline and key not in text and key not in log
    assert "without an API key" not in text + log


@pytest.mark.slow
@pytest.mark.shared_workspace
def test_serve_open_to_the_network_without_a_key_warns_on_start_and_in_its_log(llama_server, gemma_model):
    from onebit_build.running.ports import free_port

    port = free_port()
    p, text = _serve(["--model", str(gemma_model), "serve", "--host", "0.0.0.0", "--port", str(port)], {})
    try:
        assert "OpenAI base URL" in text, text
    finally:
        text += _stop(p)
    assert "warning: llama-server listens on 0.0.0.0 without an API key" in text
    assert "# warning: llama-server listens on 0.0.0.0 without an API key" in _latest_serve_log().read_text()
    p, text = _serve(["--model", str(gemma_model), "serve", "--host", "0.0.0.0", "--port", str(port)],
                     {"ONEBIT_API_KEY": KEY})  # the environment's key: no warning, and the key asked for
    try:
        assert requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=30).status_code == 401
    finally:
        text += _stop(p)
    assert "without an API key" not in text and KEY not in text


# --------------------------------------------------------------------------- secret files others can read


def _pem_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _read_dist_token(path: Path) -> None:
    from onebit_build.building.cache import dist

    dist.read_token({dist.ENV_TOKEN_FILE: str(path)})


def _read_api_key(path: Path) -> None:
    from onebit_build.commands.serve import api_key

    api_key(path, {})


def _read_signing_key(path: Path) -> None:
    from onebit_build.evidence.keys import load_signing_key

    load_signing_key(path)


@pytest.mark.parametrize("read,origin,content", [
    (_read_signing_key, "--signing-key", None),
    (_read_dist_token, "$ONEBIT_COMPILER_CACHE_DIST_TOKEN_FILE", b"dist-token-0123456789\n"),
    (_read_api_key, "--api-key-file", KEY.encode() + b"\n"),
])
def test_a_secret_file_others_can_read_is_warned_about_as_a_signing_key_is(tmp_path, capsys, read, origin, content):
    for mode, warned in ((0o600, False), (0o640, True), (0o644, True)):
        f = tmp_path / f"secret-{mode:o}"
        f.write_bytes(content if content is not None else _pem_key())
        f.chmod(mode)
        read(f)
        err = capsys.readouterr().err
        assert (f"warning: {origin} {f} can be read by other users (mode {mode:o}): chmod 600 it" in err) is warned, err
        assert KEY not in err and "dist-token" not in err


def test_serve_judges_the_port_after_the_double_dash_as_its_own(tmp_path):
    """``serve -- --port Q`` listens on Q (the last one given): Q is the port probed before the
    build, so a Q in use is refused at once, naming Q; a Q that is no port is refused too."""
    import socket

    from onebit_build.commands.serve import options
    from onebit_build.running.ports import free_port

    flags = options({"port": 8080, "server_args": ["--", "-t", "2", "--port", "9001", "--port=9002"]})
    assert flags.port == 9002 and flags.extra == ("-t", "2")
    port = free_port("127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--offline", "serve", "--", "--port", str(port),
                      timeout=120)
    assert out.returncode == 2 and f"port {port} is in use" in out.stderr, out.stderr
    bad = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--offline", "serve", "--", "--port", "70000",
                  timeout=120)
    assert bad.returncode == 2 and "-- --port: '70000' is not a port" in bad.stderr, bad.stderr
    assert not (tmp_path / "ws" / "build").exists()
