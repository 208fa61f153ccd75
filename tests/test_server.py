"""llama-server lifecycle: pure argument/parse decisions, then the real binary with the real
model (start, health, stop) and its faults (bad model files, a taken port, a server that
never becomes healthy, a parent that dies)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import requests

from onebit_build.running import server as srvmod
from onebit_build.running.ports import port_is_free
from onebit_build.core.errors import SmokeError
from onebit_build.running.server import health_state, is_bind_failure, first_error_line
from onebit_build.running.server_args import ServerSpec, device_args, server_argv, server_env
from onebit_build.running.devices import missing_devices, parse_list_devices
from _support import serving

REPO = Path(__file__).resolve().parent.parent


def pid_gone(pid: int, timeout: float = 15.0) -> bool:
    """True once ``pid`` no longer runs (absent, or a zombie nobody has reaped yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            state = stat.rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def spec_for(binary: Path, model: Path, tmp_path: Path, **kw) -> ServerSpec:
    kw.setdefault("health_timeout_s", 60.0)
    kw.setdefault("threads", 1)  # robust on a busy 2-core machine (see test_smoke.THREADS)
    return ServerSpec(binary=Path(binary), model=Path(model), log=tmp_path / "server.log", ctx_size=512, **kw)


# --------------------------------------------------------------------------- pure decisions


def test_device_args():
    assert device_args("CPU") == ["--device", "none", "-ngl", "0"]
    assert device_args("Vulkan0") == ["--device", "Vulkan0", "-ngl", "all"]
    assert device_args("HRX20") == ["--device", "HRX20", "-ngl", "all"]


def test_server_argv_binds_loopback_one_slot():
    spec = ServerSpec(binary=Path("bin/llama-server"), model=Path("m.gguf"), log=Path("l"), device="CUDA0",
                      ctx_size=4096, threads=2)
    argv = server_argv(spec, 8123)
    assert argv[0] == "bin/llama-server"
    pairs = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("-")}
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8123" and pairs["-np"] == "1"
    assert pairs["-m"] == "m.gguf" and pairs["-c"] == "4096" and pairs["-t"] == "2"
    assert pairs["--device"] == "CUDA0" and pairs["-ngl"] == "all"
    assert "--no-webui" in argv
    assert pairs["--log-verbosity"] == "4"  # else the load log (offload lines) is not written


def test_server_env_turns_the_fit_off_unless_it_is_set():
    def spec(env=()):
        return ServerSpec(binary=Path("s"), model=Path("m"), log=Path("l"), env=env)

    assert server_env(spec(), {}) == {"LLAMA_ARG_FIT": "off"}
    assert server_env(spec((("RADV_DEBUG", "x"),)), {"PATH": "/bin"}) == {"RADV_DEBUG": "x", "LLAMA_ARG_FIT": "off"}
    # the recipe's or the user's own setting wins (the user's reaches the server from the environment)
    assert server_env(spec((("LLAMA_ARG_FIT", "on"),)), {}) == {"LLAMA_ARG_FIT": "on"}
    assert server_env(spec(), {"LLAMA_ARG_FIT": "on"}) == {}


def test_parse_list_devices():
    text = textwrap.dedent("""\
        ggml_vulkan: Found 1 Vulkan devices:
        load_backend: loaded Vulkan backend
        Available devices:
          Vulkan0: AMD Radeon Graphics (RADV STRIX_HALO) (65536 MiB, 60000 MiB free)
          HRX20: gfx1151 (65536 MiB, 60000 MiB free)
        """)
    assert parse_list_devices(text) == ("Vulkan0", "HRX20")
    assert parse_list_devices("Available devices:\n  (none)\n") == ()
    assert parse_list_devices("garbage only\n") == ()


def test_missing_devices_cpu_is_always_present():
    assert missing_devices(("CPU",), ()) == ()
    assert missing_devices(("CPU", "HRX20", "Vulkan0"), ("Vulkan0",)) == ("HRX20",)


def test_health_state():
    assert health_state(200, {"status": "ok"}) == "ready"
    assert health_state(503, {"error": {"message": "Loading model"}}) == "loading"
    assert health_state(200, {"status": "weird"}) == "unexpected"
    assert health_state(500, "boom") == "unexpected"


def test_bind_failure_and_error_line():
    assert is_bind_failure("srv init: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080")
    assert not is_bind_failure("model loaded")
    tail = (
        "0.00.006.141 I srv    load_model: loading model 'x.gguf'\n"
        "0.00.072.772 E llama_model_load: error loading model: tensor 'token_embd.weight' data is not "
        "within the file bounds\n"
        "0.00.146.007 E srv    load_model: failed to load model, 'x.gguf'\n"
        "0.00.146.776 E srv  llama_server: exiting due to model loading error\n"
    )
    assert first_error_line(tail) == ("llama_model_load: error loading model: tensor 'token_embd.weight' data is "
                                      "not within the file bounds")
    assert first_error_line("all good\nbye\n") == "bye"
    assert first_error_line("") == "(the log is empty)"


def test_choose_port_avoids_a_taken_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        assert not port_is_free(taken)
        assert srvmod.choose_port(taken) != taken
    assert port_is_free(taken)
    assert srvmod.choose_port(taken) == taken


# --------------------------------------------------------------------------- the real server


def test_list_devices_of_the_cpu_build(llama_server, tmp_path):
    log = tmp_path / "list.log"
    assert srvmod.list_devices(llama_server, log=log) == ()
    assert "Available devices:" in log.read_text()


def test_serve_health_and_stop(llama_server, gemma_model, tmp_path):
    spec = spec_for(llama_server, gemma_model, tmp_path, threads=None)  # llama.cpp's default threads
    with serving(spec) as server:
        pid = server.pid
        assert "-t" not in server.argv
        assert server.alive() and server.ready_s is not None and server.ready_s < 60
        r = requests.get(server.url + "/health", timeout=5)
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert server.url == f"http://127.0.0.1:{server.port}"
    assert not server.alive() and pid_gone(pid)
    assert server.returncode() is not None
    log = spec.log.read_text()
    assert log.startswith("$ ") and "--port" in log and "-np 1" in log
    # no dry load to fit the parameters the tool sets anyway; the log says so (see below)
    assert log.splitlines()[1] == "# environment: LLAMA_ARG_FIT=off" and "fitting params" not in log
    with pytest.raises(requests.ConnectionError):
        requests.get(server.url + "/health", timeout=2)


def test_the_users_fit_setting_reaches_the_server(llama_server, gemma_model, tmp_path, monkeypatch):
    """The variable is the one llama.cpp reads: set to on by the user, the server fits again
    (its trace-level load log says so), and answers as with the fit off."""
    monkeypatch.setenv("LLAMA_ARG_FIT", "on")
    spec = spec_for(llama_server, gemma_model, tmp_path)
    with serving(spec) as server:
        assert server.alive()
    log = spec.log.read_text()
    assert "# environment: LLAMA_ARG_FIT=on" in log and "fitting params to device memory" in log


def test_busy_server_is_stopped_promptly(llama_server, gemma_model, tmp_path):
    """A request in flight from another client stalls llama-server's SIGTERM shutdown; stop()
    still ends it within its grace plus the second SIGTERM, without needing SIGKILL."""
    spec = spec_for(llama_server, gemma_model, tmp_path, threads=1, stop_timeout_s=1.0)
    server = srvmod.start(spec)
    outcome = []

    def long_request():
        try:
            requests.post(server.url + "/completion",
                          json={"prompt": "1, 2,", "n_predict": 4000, "ignore_eos": True}, timeout=60)
            outcome.append("answered")
        except requests.RequestException:
            outcome.append("cut off")

    client = threading.Thread(target=long_request)
    client.start()
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        server.stop()
        took = time.monotonic() - t0
    finally:
        server.stop()
        client.join(timeout=60)
    assert pid_gone(server.pid, timeout=0)
    assert took < 1.0 + 2.0 + 1.0, f"stop took {took:.1f} s"
    assert server.stopped_by in ("SIGTERM", "second SIGTERM")
    assert outcome == ["cut off"]


def test_taken_port_makes_the_server_use_another(llama_server, gemma_model, tmp_path, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        # First as a preference: another port is chosen before starting.
        with serving(spec_for(llama_server, gemma_model, tmp_path, port=taken)) as server:
            assert server.port != taken
            assert requests.get(server.url + "/health", timeout=5).status_code == 200
        # Then as a race: the port looked free but is taken when the server binds it. The
        # real server fails to bind and is started again on another port.
        calls = []
        real_choose = srvmod.choose_port

        def racy_choose(preferred, *host):
            calls.append(preferred)
            return taken if len(calls) == 1 else real_choose(None, *host)

        monkeypatch.setattr(srvmod, "choose_port", racy_choose)
        spec = spec_for(llama_server, gemma_model, tmp_path)
        with serving(spec) as server:
            assert server.port != taken and len(calls) == 2
            assert requests.get(server.url + "/health", timeout=5).status_code == 200
        assert "couldn't bind" in spec.log.read_text()


def test_servers_started_together_load_side_by_side(llama_server, gemma_model, tmp_path):
    """The second process runs before the first is healthy (started one after the other, it
    would start only once the first answers /health); a missing binary is its own SmokeError
    and the others still start."""
    import psutil

    specs = [spec_for(llama_server, gemma_model, tmp_path / name) for name in ("a", "b")]
    specs.append(spec_for(tmp_path / "no-such-server", gemma_model, tmp_path / "c"))
    got = srvmod.start_together(specs)
    try:
        a, b, missing = got
        assert isinstance(a, srvmod.Server) and isinstance(b, srvmod.Server), got
        assert isinstance(missing, SmokeError) and "not found or not executable" in missing.message
        assert a.port != b.port
        for server in (a, b):
            assert requests.get(server.url + "/health", timeout=5).status_code == 200
        created = psutil.Process(b.pid).create_time() - psutil.Process(a.pid).create_time()
        assert a.ready_s is not None and created < a.ready_s, (created, a.ready_s)
    finally:
        for server in got:
            if isinstance(server, srvmod.Server):
                server.stop()
    assert not srvmod._LIVE


def test_not_a_gguf_exits_early_with_the_log_tail(llama_server, tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("just some text, certainly not a model\n" * 100)
    spec = spec_for(llama_server, bad, tmp_path)
    t0 = time.monotonic()
    with pytest.raises(SmokeError) as err:
        srvmod.start(spec)
    assert time.monotonic() - t0 < 30
    msg = str(err.value)
    assert "exited with code" in msg and "before it became healthy" in msg and str(spec.log) in msg
    assert "invalid magic characters" in msg  # the server's own diagnosis, in the one line
    assert err.value.detail and "notes.gguf" in err.value.detail
    assert not srvmod._LIVE


def test_truncated_gguf_dies_while_loading(llama_server, gemma_model, tmp_path):
    truncated = tmp_path / "truncated.gguf"
    with open(gemma_model, "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read(8 << 20))
    spec = spec_for(llama_server, truncated, tmp_path)
    with pytest.raises(SmokeError) as err:
        srvmod.start(spec)
    msg = str(err.value)
    assert "exited with code" in msg and "not within the file bounds" in msg
    tail = err.value.detail or ""
    assert "truncated.gguf" in tail and "error" in tail.lower()
    assert not srvmod._LIVE


def test_never_healthy_server_is_timed_out_and_killed(llama_server, tmp_path, monkeypatch):
    # A named pipe with no writer: the real server blocks opening its model forever.
    fifo = tmp_path / "stuck.gguf"
    os.mkfifo(fifo)
    spec = spec_for(llama_server, fifo, tmp_path, health_timeout_s=3.0, stop_timeout_s=1.0)
    spawned = []
    real_spawn = srvmod._spawn

    def spy(*a, **kw):
        server = real_spawn(*a, **kw)
        spawned.append(server)
        return server

    monkeypatch.setattr(srvmod, "_spawn", spy)
    t0 = time.monotonic()
    with pytest.raises(SmokeError, match=r"did not become healthy within 3 s") as err:
        srvmod.start(spec)
    elapsed = time.monotonic() - t0
    assert 3.0 <= elapsed < 20.0
    assert "it was stopped" in str(err.value)
    assert len(spawned) == 1 and pid_gone(spawned[0].pid)
    assert spawned[0].returncode() is not None


def test_server_dies_with_a_killed_parent(llama_server, gemma_model, tmp_path):
    """Even a SIGKILLed caller (no finally, no atexit) leaves no server behind."""
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from onebit_build.running.server import start
        from onebit_build.running.server_args import ServerSpec
        s = start(ServerSpec(binary=Path({str(llama_server)!r}), model=Path({str(gemma_model)!r}),
                             log=Path({str(tmp_path / 'orphan.log')!r}), ctx_size=512, threads=1))
        print(s.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"no server pid from the parent: {line!r}"
        pid = int(line)
        assert not pid_gone(pid, timeout=0.5)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert pid_gone(pid), f"llama-server {pid} outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
