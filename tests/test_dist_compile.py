"""Distributed compiles through sccache-dist: the options and files (pure), and builds through a
real scheduler and two real build servers, each in a network namespace of its own (tests/_dist.py),
checked object by object against builds made here."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from _dist import DistCluster, why_not
from _support import REPO, bare_mirror, make_repo, project_tree, run_cli
from onebit_build.building.cache import dist
from onebit_build.building.cache.compiler import plan_launcher
from onebit_build.building.cache.dist_watch import LogReader, output_of
from onebit_build.building.cache.request import CacheRequest, parse_dist_url, request_from
from onebit_build.checking.manifest import Manifest
from onebit_build.checking.references import fingerprint, reference_name
from onebit_build.core.errors import ConfigError, ToolMissingError

TOKEN = "s3cr3t-t0ken-abcdef0123456789"


# --------------------------------------------------------------------------- pure


@pytest.mark.parametrize("given, want", [
    ("http://10.0.0.1:10600", "http://10.0.0.1:10600"), ("http://sched.example", "http://sched.example:10600"),
    ("https://sched.example:443/", "https://sched.example:443"), ("http://[fd00::1]:7", "http://[fd00::1]:7"),
])
def test_the_scheduler_url_is_checked_and_normalised(given, want):
    assert parse_dist_url(given) == want


@pytest.mark.parametrize("bad", ["redis://h:1", "http://u:pw@h:1", "http://h:1/path", "http://h:1?x=1", "h:10600",
                                 "http://h:99999", "http://h;rm:1", "http://:1"])
def test_a_scheduler_url_that_is_not_one_is_refused_without_its_password(bad):
    with pytest.raises(ConfigError) as err:
        parse_dist_url(bad)
    assert "pw" not in str(err.value)


def test_the_request_takes_the_option_else_the_environment_and_needs_sccache():
    env = {"ONEBIT_COMPILER_CACHE_DIST": "http://10.1.1.1:10600"}
    assert request_from(None, None, env).dist == "http://10.1.1.1:10600"
    assert request_from(None, None, env, dist="http://10.2.2.2:1").dist == "http://10.2.2.2:1"
    assert request_from(None, None, {}).dist is None
    for mode in ("none", "ccache"):
        with pytest.raises(ConfigError, match="distributes compiles through sccache"):
            request_from(mode, None, env)
    req = CacheRequest(mode="auto", dist="http://10.1.1.1:10600")
    with pytest.raises(ToolMissingError):
        plan_launcher(req, programs={"sccache": None, "ccache": "/usr/bin/ccache"}, env={})
    with pytest.raises(ConfigError, match="SCCACHE_CONF"):
        plan_launcher(req, programs={"sccache": "/x/sccache"}, env={"SCCACHE_CONF": "/etc/sccache.toml"})
    ln = plan_launcher(req, programs={"sccache": "/x/sccache"}, env={dist.ENV_TOKEN: TOKEN})
    assert ln.dist == "http://10.1.1.1:10600" and "distributed to http://10.1.1.1:10600" in ln.label
    assert TOKEN not in json.dumps(dist_describe(ln))


def dist_describe(ln):
    from onebit_build.building.cache.compiler import describe
    return describe(ln)


def test_the_token_comes_from_a_file_or_the_environment(tmp_path):
    f = tmp_path / "token"
    f.write_text(TOKEN + "\nsecond line\n")
    assert dist.read_token({dist.ENV_TOKEN_FILE: str(f), dist.ENV_TOKEN: "other-token-1234"}) == TOKEN
    assert dist.read_token({dist.ENV_TOKEN: f" {TOKEN} "}) == TOKEN
    with pytest.raises(ConfigError, match="needs the scheduler's token"):
        dist.read_token({})
    with pytest.raises(ConfigError, match="missing: no such file"):
        dist.read_token({dist.ENV_TOKEN_FILE: str(tmp_path / "missing")})
    for bad in ('abc"def]ghijk', "short", "x" * 5000, "tok en with spaces"):
        with pytest.raises(ConfigError) as err:
            dist.read_token({dist.ENV_TOKEN: bad})
        assert bad not in str(err.value)


def test_the_client_configuration_holds_the_token_for_this_user_only(tmp_path):
    path = tmp_path / "sccache.conf"
    dist.write_client_config(path, dist.client_config("http://10.1.1.1:10600", TOKEN, tmp_path / "tc"))
    text = path.read_text()
    assert '[dist]\nscheduler_url = "http://10.1.1.1:10600"' in text and f'token = "{TOKEN}"' in text
    assert path.stat().st_mode & 0o777 == 0o600
    dist.write_client_config(path, dist.client_config(None, None, tmp_path))
    assert "[dist]" not in path.read_text() and TOKEN not in path.read_text()


def test_a_debug_build_gets_no_column_info_and_others_are_unchanged():
    rel = (("CMAKE_C_FLAGS", "-O2"),)
    assert dist.dist_defines(rel, "Release", "http://s:1") == rel
    assert dist.dist_defines(rel, "RelWithDebInfo", None) == rel
    out = dict(dist.dist_defines(rel, "RelWithDebInfo", "http://s:1", {"CXXFLAGS": "-pipe"}))
    assert out == {"CMAKE_C_FLAGS": "-O2 -gno-column-info", "CMAKE_CXX_FLAGS": "-pipe -gno-column-info"}
    assert dist.debug_build((("CMAKE_CXX_FLAGS", "-O2 -g3"),), "Release")
    assert not dist.debug_build((("CMAKE_CXX_FLAGS", "-O2 -gno-column-info -g0"),), "Release")
    assert dist.debug_build((), "Release", {"CFLAGS": "-ggdb"})
    twice = dist.dist_defines(dist.dist_defines(rel, "Debug", "http://s:1"), "Debug", "http://s:1")
    assert dict(twice)["CMAKE_C_FLAGS"] == "-O2 -gno-column-info"


def test_status_and_counts_as_sccache_prints_them():
    up = dist.parse_status('{"SchedulerStatus":["http://10.1.1.1:10600/",{"num_servers":2,"num_cpus":4,'
                           '"in_progress":0}]}')
    assert up.usable and up.line == "2 build server(s), 4 CPU(s)"
    down = dist.parse_status('{"NotConnected":["http://10.1.1.1:10699/","enabled, not connected, will retry"]}')
    assert not down.usable and down.state == "not-connected" and "will retry" in down.line
    assert dist.parse_status('"Disabled"').state == "disabled"
    assert not dist.parse_status('{"SchedulerStatus":["u",{"num_servers":0,"num_cpus":0}]}').usable
    assert dist.parse_status("garbage").state == "unknown"
    counts = dist.parse_counts(json.dumps({"stats": {"dist_compiles": {"10.0.1.2:10501": 6, "10.0.2.2:10501": 2},
                                                     "dist_errors": 1}}))
    assert counts.total == 8 and counts.errors == 1
    later = dist.DistCounts(per_server={"10.0.1.2:10501": 9, "10.0.2.2:10501": 2}, errors=1)
    assert later.minus(counts).per_server == {"10.0.1.2:10501": 3}


LOG = """\
[t DEBUG C] [f2.c.o]: get_cached_or_compile: ["-O3", "-o", "CMakeFiles/tl.dir/f2.c.o", "-c", "/s/f2.c"]
[t DEBUG C] [f1.c.o]: get_cached_or_compile: ["-DX=\\"a b\\"", "-o", "CMakeFiles/tl.dir/f1.c.o", "-c", "/s/f1.c"]
[t DEBUG C] [f2.c.o]: Running job
[t DEBUG C] [f1.c.o]: Running job
[t DEBUG C] [f1.c.o]: Could not perform distributed compile, falling back to local: x
[t DEBUG C] [f2.c.o]: Compiled in 5.806 s, storing in cache
[t DEBUG C] [f1.c.o]: Compiled in 1.000 s, storing in cache
[t DEBUG C] [a.o]: get_cached_or_compile: ["-o", "x/a.o", "-c", "x/a.c"]
[t DEBUG C] [a.o]: get_cached_or_compile: ["-o", "y/a.o", "-c", "y/a.c"]
[t DEBUG C] [a.o]: Running job
[t DEBUG C] [a.o]: Compiled in 1.0 s, storing in cache
[t DEBUG C] [a.o]: Compiled in 1.0 s, storing in cache
"""


def test_the_log_says_which_objects_build_servers_compiled():
    """As sccache 0.16 logs (module name shortened)."""
    assert output_of('["-DX=\\"a b\\"", "-o", "CMakeFiles/x.dir/a b.c.o", "-c"]') == "CMakeFiles/x.dir/a b.c.o"
    reader = LogReader()
    written = [w for line in LOG.splitlines() if (w := reader.feed(line))]
    assert written == reader.remote == ["CMakeFiles/tl.dir/f2.c.o"]  # f1 fell back to a local compile
    assert reader.unclear == ["x/a.o", "y/a.o"]  # two objects named a.o at once: not sampled, never trusted


def test_the_report_and_the_build_line_say_what_the_servers_did():
    from onebit_build.job.build import cache_note
    from onebit_build.running.report import _cache_section

    d = {"scheduler": "http://10.1.1.1:10600", "dist_compiles": {"10.0.1.2:10501": 120, "10.0.2.2:10501": 92},
         "dist_errors": 1, "spot_checks": {"checked": 12, "identical": 11}, "stopped": "an object differs (x.o)",
         "compiled_again_here": ["a.o", "b.o"]}
    cache = {"launcher": "sccache", "version": "0.16.0", "backend": "local", "dist": d,
             "stats": {"requests": 212, "hits": 0, "misses": 212, "errors": 0, "not_cacheable": 0, "hit_rate": 0}}
    lines = _cache_section({"components": [{"name": "llama", "compiler_cache": cache}]})
    assert ("| llama | sccache-dist | scheduler http://10.1.1.1:10600 | — | — | — | — | 120 on 10.0.1.2:10501, 92 on "
            "10.0.2.2:10501; 1 failed remotely; 11/12 spot-checked objects identical; stopped: an object differs "
            "(x.o); 2 compiled again here |") in lines
    build = type("B", (), {"compiler_cache": cache})()
    assert cache_note(build) == ", 0/212 compiler cache hits, 212 compiled on 2 build server(s)"


# --------------------------------------------------------------------------- a real cluster


def cpp_file(i: int) -> str:
    return (f"#include <vector>\n#include <numeric>\nnamespace t{i} {{ struct Acc {{ std::vector<int> v; }}; }}\n"
            f'extern "C" int part{i}(int n) {{\n  t{i}::Acc a; for (int k = 0; k < n; ++k) a.v.push_back(k * {i});\n'
            f"  return std::accumulate(a.v.begin(), a.v.end(), 0); }}\n")


def many_files(column_info: bool = False) -> dict[str, str]:
    """Six C++ sources (system headers: their remote objects differ with column info) and two C ones."""
    files = {f"part{i}.cpp": cpp_file(i) for i in range(1, 7)}
    files.update({f"c{i}.c": f"int cpart{i}(int x) {{ return x * {i} + {i}; }}\n" for i in (1, 2)})
    files["main.c"] = ('#include <stdio.h>\nint part1(int); int cpart1(int);\n'
                       'int main(void) { printf("%d\\n", part1(5) + cpart1(2)); return 0; }\n')
    extra = "target_compile_options(parts PRIVATE -gcolumn-info)\n" if column_info else ""
    files["CMakeLists.txt"] = ("cmake_minimum_required(VERSION 3.20)\nproject(many C CXX)\n"
                               "add_library(parts STATIC " + " ".join(sorted(f for f in files if f != "main.c"))
                               + ")\n" + extra + "add_executable(many main.c)\ntarget_link_libraries(many parts)\n")
    return files


RECIPE = """\
    schema: 1
    name: many
    description: eight sources, C and C++
    backends: [cpu]
    components:
      - name: many
        source: many
        build_type: RelWithDebInfo
        targets: [many]
        outputs:
          many: many
    """


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    why = why_not()
    if why:
        pytest.skip(why)
    c = DistCluster(tmp_path_factory.mktemp("dist")).start()
    yield c
    c.stop()


def project(tmp_path: Path, files: dict[str, str]):
    commit = make_repo(tmp_path / "many-src", files)
    bare_mirror(tmp_path / "many-src", tmp_path / "mirrors", "many")
    return project_tree(tmp_path / "proj", recipes={"many": RECIPE},
                        pins=f"schema: 1\nsources:\n  many:\n    url: https://example.invalid/many.git\n"
                             f"    commit: {commit}\n")


def build(root: Path, tmp_path: Path, ws: str, *flags: str, env: dict[str, str] | None = None):
    cache = tmp_path / f"sccache-{ws}"  # empty: every compile misses, so it goes to a build server
    out = run_cli(root, "--workspace", str(tmp_path / ws), "--mirror-dir", str(tmp_path / "mirrors"), "--recipe",
                  "many", *flags, "build",
                  env={"SCCACHE_DIR": str(cache), "XDG_CACHE_HOME": str(tmp_path / "xdg"), **(env or {})})
    man = json.loads((tmp_path / ws / "manifests" / "many.json").read_text()) if out.returncode == 0 else None
    return out, man


def objects(man: dict) -> dict[str, str]:
    return {k: v for c in man["components"] for k, v in c["objects"].items()}


def test_two_build_servers_compile_and_every_object_is_the_local_one(cluster, tmp_path):
    root = project(tmp_path, many_files())
    env = {dist.ENV_TOKEN_FILE: str(cluster.token_file)}
    out, man = build(root, tmp_path, "ws-dist", "--compiler-cache-dist", cluster.url, env=env)
    assert out.returncode == 0, out.stderr
    cache = man["components"][0]["compiler_cache"]
    info = cache["dist"]
    assert info["scheduler"] == cluster.url and info["stopped"] is None, info
    assert set(info["dist_compiles"]) == {cluster.server_addr(1), cluster.server_addr(2)}, info
    assert sum(info["dist_compiles"].values()) == 9 and info["dist_errors"] == 0  # 8 sources and main.c
    assert info["probes"] == {"C": "identical", "CXX": "identical"} and info["debug_info"] is True
    assert info["spot_checks"]["checked"] >= 2 and info["spot_checks"]["differ"] == []
    assert "warning" not in out.stderr.lower(), out.stderr
    local, lman = build(root, tmp_path, "ws-local", "--compiler-cache", "none", "-D", "CMAKE_C_FLAGS=-gno-column-info",
                        "-D", "CMAKE_CXX_FLAGS=-gno-column-info")
    assert local.returncode == 0, local.stderr
    assert objects(man) == objects(lman) and len(objects(man)) == 9
    assert [o["sha256"] for o in man["components"][0]["outputs"]] == [o["sha256"] for o in
                                                                      lman["components"][0]["outputs"]]
    for text in (out.stderr, out.stdout, json.dumps(man), *(p.read_text(errors="replace") for p in
                                                               (tmp_path / "ws-dist" / "runs").rglob("*.log"))):
        assert cluster.token_file.read_text().strip() not in text
    again, _ = build(root, tmp_path, "ws-dist2", "--compiler-cache-dist", cluster.url, env=env)
    assert again.returncode == 0 and "probed" in json.dumps(_["components"][0]["compiler_cache"]["dist"]["probes"])


def local_objects(root: Path, tmp_path: Path) -> dict[str, str]:
    """The same configuration built here, without any cache: -gno-column-info as the distributed
    build has it (the recipe is a -g build)."""
    out, man = build(root, tmp_path, "ws-local", "--compiler-cache", "none", "-D", "CMAKE_C_FLAGS=-gno-column-info",
                     "-D", "CMAKE_CXX_FLAGS=-gno-column-info")
    assert out.returncode == 0, out.stderr
    return objects(man)


def test_an_object_that_differs_stops_distribution_and_is_compiled_again_here(cluster, tmp_path):
    """The sources ask for column info after the tool's -gno-column-info (a target's own option):
    the build servers' objects differ from local ones (they compile preprocessed source). The
    probe, with the tool's flags, passes; the spot-check finds the first such object."""
    root = project(tmp_path, many_files(column_info=True))
    out, man = build(root, tmp_path, "ws-dist", "--compiler-cache-dist", cluster.url,
                     env={dist.ENV_TOKEN: cluster.token_file.read_text().strip()})
    assert out.returncode == 0, out.stderr
    info = man["components"][0]["compiler_cache"]["dist"]
    assert info["probes"] == {"C": "identical", "CXX": "identical"}
    assert info["stopped"] and "differs from the one compiled here" in info["stopped"], info
    assert info["spot_checks"]["differ"] and info["compiled_again_here"], info
    assert info["cache_entries_removed"], info  # the local cache no longer holds what a server made differently
    warnings = [ln for ln in out.stderr.splitlines() if "warning" in ln.lower()]
    assert len(warnings) == 1 and "compiling here without distribution" in warnings[0], out.stderr
    assert objects(man) == local_objects(root, tmp_path)


def test_an_unreachable_scheduler_is_one_warning_and_a_local_build(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    root = project(tmp_path, many_files())
    t0 = time.monotonic()
    out, man = build(root, tmp_path, "ws", "--compiler-cache-dist", f"http://127.0.0.1:{port}",
                     env={dist.ENV_TOKEN: TOKEN})
    assert out.returncode == 0, out.stderr
    warnings = [ln for ln in out.stderr.splitlines() if "warning" in ln.lower()]
    assert len(warnings) == 1 and f"the scheduler http://127.0.0.1:{port} is not usable" in warnings[0], out.stderr
    info = man["components"][0]["compiler_cache"]["dist"]
    assert info["dist_compiles"] == {} and info["stopped"] and info["status"].startswith("not-connected")
    assert man["components"][0]["compiler_cache"]["stats"]["misses"] == 9
    assert time.monotonic() - t0 < 120
    assert objects(man) == local_objects(root, tmp_path)
    assert TOKEN not in out.stderr + json.dumps(man)


def test_without_a_token_the_build_stops_before_it_starts(tmp_path):
    root = project(tmp_path, many_files())
    out, _ = build(root, tmp_path, "ws", "--compiler-cache-dist", "http://127.0.0.1:9")
    assert out.returncode == 2 and "needs the scheduler's token" in out.stderr and "Traceback" not in out.stderr


def test_a_missing_token_is_refused_before_any_stage_and_before_fresh_empties_a_folder(tmp_path):
    """The token is read when the job's plan is made: without one, nothing is fetched, no
    build folder is made or emptied (--fresh), whether the build would run or is up to date."""
    root = project(tmp_path, many_files())
    out, _ = build(root, tmp_path, "ws", "--compiler-cache", "none")
    assert out.returncode == 0, out.stderr
    folders = {p: sorted(p.rglob("*")) for p in (tmp_path / "ws" / "build").iterdir()}
    for flags in ((), ("--fresh",)):
        out, _ = build(root, tmp_path, "ws", *flags, "--compiler-cache-dist", "http://127.0.0.1:9")
        assert out.returncode == 2 and "needs the scheduler's token" in out.stderr, (flags, out.stderr)
        assert "fetch " not in out.stderr and "build " not in out.stderr, out.stderr  # no stage began
        assert {p: sorted(p.rglob("*")) for p in (tmp_path / "ws" / "build").iterdir()} == folders, flags


@pytest.mark.slow
def test_the_default_recipe_on_two_build_servers_is_its_reference_byte_for_byte(cluster, tmp_path):
    """A cold distributed build of llama-server (an empty compiler cache, so that every compile
    goes to the scheduler), then verify: every output and object against the committed reference
    of this toolchain (references/default/), which local builds made."""
    from _support import sources_from_workspaces

    ws = tmp_path / "ws"
    t0 = time.monotonic()
    out = run_cli(REPO, "--workspace", str(ws), *sources_from_workspaces(ws), "--compiler-cache-dist", cluster.url,
                  "verify", env={"SCCACHE_DIR": str(tmp_path / "sccache"), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
                                 dist.ENV_TOKEN_FILE: str(cluster.token_file)}, timeout=5400)
    seconds = time.monotonic() - t0
    said = out.stderr + out.stdout
    assert out.returncode == 0, out.stderr[-4000:]
    man = json.loads((ws / "manifests" / "default.json").read_text())
    # The committed reference of the toolchain this build was made with (one per Debian release).
    ref = f"{reference_name(fingerprint(Manifest.from_doc(man)))}.json"
    assert (REPO / "references" / "default" / ref).is_file(), f"no committed reference {ref} for this toolchain"
    assert f"against {ref}" in said and "UNVERIFIED" not in said, out.stderr[-4000:]
    info = man["components"][0]["compiler_cache"]["dist"]
    per_server = info["dist_compiles"]
    assert set(per_server) == {cluster.server_addr(1), cluster.server_addr(2)} and min(per_server.values()) > 0, info
    assert info["stopped"] is None and info["spot_checks"]["differ"] == [] and info["spot_checks"]["checked"] >= 2
    assert man["components"][0]["compiler_cache"]["stats"]["hits"] == 0  # nothing came from a cache
    print(f"\ncold distributed build and verify of the default recipe: {seconds:.0f} s; {per_server}, "
          f"{info['dist_errors']} remote failures, {info['spot_checks']['checked']} spot-checked")


def doctor_line(out) -> str:
    (line,) = [ln for ln in out.stdout.splitlines() if "distributed compiles" in ln]
    return line


def test_doctor_shows_the_schedulers_status(cluster, tmp_path):
    root = project(tmp_path, many_files())
    env = {dist.ENV_TOKEN_FILE: str(cluster.token_file), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out = run_cli(root, "--mirror-dir", str(tmp_path / "mirrors"), "--recipe", "many", "--compiler-cache-dist",
                  cluster.url, "doctor", env=env)
    line = doctor_line(out)
    assert line.split()[0] == "ok" and f"{cluster.url}: 2 build server(s)" in line, out.stdout
    assert cluster.token_file.read_text().strip() not in out.stdout + out.stderr


def test_doctor_names_an_unreachable_scheduler_and_the_fix(tmp_path):
    root = project(tmp_path, many_files())
    out = run_cli(root, "--mirror-dir", str(tmp_path / "mirrors"), "--recipe", "many", "--compiler-cache-dist",
                  "http://127.0.0.1:9", "doctor", env={dist.ENV_TOKEN: TOKEN, "XDG_CACHE_HOME": str(tmp_path / "x")})
    line = doctor_line(out)
    assert out.returncode != 0 and line.split()[0] == "FAIL" and "not-connected" in line, out.stdout
    assert "docs/distributed.md" in out.stdout and TOKEN not in out.stdout + out.stderr
    plain = run_cli(root, "--mirror-dir", str(tmp_path / "mirrors"), "--recipe", "many", "doctor")
    assert "not configured" in doctor_line(plain)
