"""The compiler cache on real builds of a small CMake project through sccache and a real Redis at
two workspace paths, and on the real default recipe, CUDA and ccache."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from _redis import RedisServer, free_port
from onebit_build.building.cache import session as cr
from onebit_build.building.cache import compiler as cc
from onebit_build.building.cache.request import CacheRequest
from onebit_build.building.cmake import find_tools

from _compiler_cache import (  # noqa: F401 (fixtures apply where they are imported)
    _no_cache_settings_of_the_user, _no_server_outlives_its_test, redis_server_fixture,
)
from _compiler_cache import (SCCACHE, build_project, launchers_in, make_project,
                             needs_redis, needs_sccache, sccache_launcher, tool, tool_project)


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
                                      cc.prefix_maps(src, build), launcher_kind=launcher.kind)
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
