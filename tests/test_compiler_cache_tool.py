"""The compiler cache through the tool: a tiny project built in two workspaces through one Redis,
Redis stopped mid-way, no launcher, nested projects, and the counts of builds sharing one server."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path


from onebit_build.building.cache import session as cr
from onebit_build.building.cache import compiler as cc
from onebit_build.building.cache.request import parse_url

from _compiler_cache import (  # noqa: F401 (fixtures apply where they are imported)
    _no_cache_settings_of_the_user, _no_server_outlives_its_test, redis_server_fixture,
)
from _compiler_cache import (LAUNCHER, PROJECT, SCCACHE, component_of, launchers_in, manifest_of, needs_sccache, tool,
                             tool_project)


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
