"""Build stage: pure decisions, and real CMake builds of a tiny project through the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from _support import TINY_CMAKE, bare_mirror, make_repo, project_tree, run_cli, sigint_default, tiny_recipe
from onebit_build.building.builder import BuildRequest, Toolchain, build_key, parse_progress, resolve_refs
from onebit_build.spec.recipe import Component
from onebit_build.spec.pins import Pin
from onebit_build.checking.manifest import read_manifest

TC = Toolchain(cmake="3.30.0", ninja="1.12.0", c_compiler="cc: gcc 12", cxx_compiler="c++: g++ 12")


def request(**kw) -> BuildRequest:
    base = dict(
        recipe="r", component=Component(name="c", source="s", targets=("t",)), source_dir=Path("/src"),
        source_commit="a" * 40, source_head="b" * 40, patch_digest="d" * 64, defines=(("X", "1"),),
        build_root=Path("/b"), log=Path("/log"),
    )
    base.update(kw)
    return BuildRequest(**base)


def test_build_key_covers_the_whole_configuration():
    k = build_key(request(), TC)
    assert build_key(request(), TC) == k
    assert build_key(request(defines=(("X", "2"),)), TC) != k
    assert build_key(request(patch_digest="e" * 64), TC) != k
    assert build_key(request(recipe="other"), TC) != k
    assert build_key(request(), replace(TC, c_compiler="cc: gcc 13")) != k
    assert build_key(request(), replace(TC, cmake="3.31.0")) != k
    assert build_key(request(component=Component(name="c", source="s", targets=("t", "u"))), TC) != k
    # The compiler launcher does not change what is built.
    assert build_key(request(), replace(TC, launcher="/usr/bin/ccache")) == k


def test_parse_progress():
    assert parse_progress("[12/212] Building CXX object x.o") == (12, 212)
    assert parse_progress("FAILED: x.o") is None


def test_resolve_refs():
    pins = {"s": Pin(name="s", url="u", commit="0c1e57098bba43ac29e6e3b677cdceebdd22334f", build_number="42")}
    comps = {"rt": {"prefix": "/p", "build_dir": "/b"}}
    assert resolve_refs("${pin.s.short}-${pin.s.build_number}", pins=pins, components=comps) == "0c1e570-42"
    assert resolve_refs("-Dx=${rt.prefix}/cmake", pins=pins, components=comps) == "-Dx=/p/cmake"
    with pytest.raises(Exception, match="has no 'nope'"):
        resolve_refs("${rt.nope}", pins=pins, components=comps)


@pytest.fixture
def tiny_project(tmp_path):
    src = tmp_path / "tiny-src"
    commit = make_repo(src, TINY_CMAKE)
    mirrors = tmp_path / "mirrors"
    bare_mirror(src, mirrors, "tiny")
    pins = f"""\
        schema: 1
        sources:
          tiny:
            url: https://example.invalid/tiny.git
            commit: {commit}
        """
    root = project_tree(tmp_path / "proj", pins=pins,
                        recipes={"tiny": tiny_recipe(), "shout": tiny_recipe(name="shout", greeting="HELLO")})
    return root, mirrors, tmp_path / "ws"


def cli(root, mirrors, ws, *args, **kw):
    return run_cli(root, "--workspace", str(ws), "--mirror-dir", str(mirrors), *args, **kw)


def test_tiny_build_end_to_end_and_noop_rerun(tiny_project):
    root, mirrors, ws = tiny_project
    out = cli(root, mirrors, ws, "--recipe", "tiny", "build")
    assert out.returncode == 0, out.stderr
    man = read_manifest(ws / "manifests" / "tiny.json")
    comp = man["components"][0]
    hello = Path(comp["outputs"][0]["path"])
    assert subprocess.run([hello], capture_output=True, text=True).stdout.strip() == "hello"
    assert comp["defines"]["GREETING"] == "hello"
    assert man["sources"][0]["mirror_used"].startswith("mirror-dir:")
    assert man["toolchain"]["cmake"] and man["toolchain"]["c_compiler"]
    # Second identical run: no fetch, patch or compile (what it did, not how long it took:
    # a timing assertion fails on a busy machine and proves nothing on a quiet one).
    again = cli(root, mirrors, ws, "--recipe", "tiny", "build")
    assert again.returncode == 0, again.stderr
    assert "(cache)" in again.stderr and "(reused)" in again.stderr and "up to date" in again.stderr
    recorded = read_manifest(ws / "manifests" / "tiny.json")["components"][0]["outputs"][0]["path"]
    assert hello.stat().st_mtime_ns == Path(recorded).stat().st_mtime_ns
    # Another configuration never shares the build dir.
    other = cli(root, mirrors, ws, "--recipe", "shout", "build")
    assert other.returncode == 0, other.stderr
    man2 = read_manifest(ws / "manifests" / "shout.json")
    assert man2["components"][0]["build_dir"] != comp["build_dir"]
    assert subprocess.run([man2["components"][0]["outputs"][0]["path"]],
                          capture_output=True, text=True).stdout.strip() == "HELLO"


def test_build_failure_shows_compiler_error_and_log(tmp_path):
    src = tmp_path / "broken-src"
    files = dict(TINY_CMAKE)
    files["hello.c"] = "int main(void) { return undefined_symbol_xyz; }\n"
    commit = make_repo(src, files)
    mirrors = tmp_path / "mirrors"
    bare_mirror(src, mirrors, "tiny")
    root = project_tree(tmp_path / "proj",
                        pins="schema: 1\nsources:\n  tiny:\n    url: "
                             f"https://example.invalid/t.git\n    commit: {commit}\n", recipes={"tiny": tiny_recipe()})
    out = cli(root, mirrors, tmp_path / "ws", "--recipe", "tiny", "build")
    assert out.returncode == 9
    assert "undefined_symbol_xyz" in out.stderr and "build-hello.log" in out.stderr


def test_missing_cmake_and_compiler(tiny_project):
    root, mirrors, ws = tiny_project
    out = cli(root, mirrors, ws, "--recipe", "tiny", "build", env={"CMAKE_EXECUTABLE": "/nonexistent/cmake"})
    assert out.returncode == 7 and "CMake >=3.24 not found" in out.stderr and "pip install" in out.stderr
    out = cli(root, mirrors, ws, "--recipe", "tiny", "build", env={"CC": "/nonexistent/cc"})
    assert out.returncode == 7 and "compiler /nonexistent/cc not found" in out.stderr
    assert "build-essential" in out.stderr


def path_without_compilers(folder: Path) -> str:
    """A PATH that offers git, cmake and ninja and no C or C++ compiler."""
    folder.mkdir()
    for tool in ("git", "cmake", "ninja"):
        found = shutil.which(tool)
        if found:
            (folder / tool).symlink_to(found)
    return str(folder)


def test_without_a_compiler_build_stops_at_once_and_a_finished_build_still_serves(tiny_project, tmp_path):
    root, mirrors, ws = tiny_project
    bare = {"PATH": path_without_compilers(tmp_path / "bin"), "CC": "", "CXX": ""}
    out = cli(root, mirrors, ws, "--recipe", "tiny", "build", env=bare)
    assert out.returncode == 7, out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: no C compiler found on PATH (looked for cc, gcc, clang) (install one"
        " (Debian: apt-get install build-essential) or set CC/CXX to one that exists)"]
    assert not ws.exists()  # before the lock, a run folder or a fetch
    # install needs a build, not a compiler: without any build it is exit 7 naming what is missing ...
    out = cli(root, mirrors, ws, "--recipe", "tiny", "install", "--prefix", str(tmp_path / "p"), env=bare)
    assert out.returncode == 7 and "no C compiler found on PATH" in out.stderr
    assert "hello is not built yet" in out.stderr
    # ... and once it was built (with a compiler), it is installed from that build without one
    assert cli(root, mirrors, ws, "--recipe", "tiny", "build").returncode == 0
    out = cli(root, mirrors, ws, "--recipe", "tiny", "install", "--prefix", str(tmp_path / "p"), env=bare)
    assert out.returncode == 0, out.stderr
    ran = subprocess.run([tmp_path / "p" / "bin" / "hello"], capture_output=True, text=True)
    assert "up to date" in out.stderr and ran.stdout.strip() == "hello"
    # a changed configuration cannot be built without one
    out = cli(root, mirrors, ws, "--recipe", "tiny", "-D", "GREETING=hi", "install", "--prefix", str(tmp_path / "q"),
              env=bare)
    assert out.returncode == 7 and "hello is not built yet" in out.stderr


def test_ctrl_c_during_build_cleans_up_and_next_run_works(tmp_path):
    files = dict(TINY_CMAKE)
    files["CMakeLists.txt"] += "add_custom_target(slow ALL COMMAND sleep 300)\nadd_dependencies(hello slow)\n"
    src = tmp_path / "slow-src"
    commit = make_repo(src, files)
    mirrors = tmp_path / "mirrors"
    bare_mirror(src, mirrors, "tiny")
    root = project_tree(tmp_path / "proj",
                        pins="schema: 1\nsources:\n  tiny:\n    url: "
                             f"https://example.invalid/t.git\n    commit: {commit}\n", recipes={"tiny": tiny_recipe()})
    env = {k: v for k, v in os.environ.items() if k != "ONEBIT_MIRROR_DIR"}
    env["ONEBIT_ROOT"] = str(root)
    proc = subprocess.Popen([sys.executable, "-m", "onebit_build", "--workspace", str(tmp_path / "ws"), "--mirror-dir",
                             str(mirrors), "--recipe", "tiny", "build"],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=sigint_default)
    sleeper = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sleeper is None:
            time.sleep(0.5)
            ps = subprocess.run(["pgrep", "-f", f"{tmp_path}/ws/build/.* && sleep 300"],
                                capture_output=True, text=True).stdout.split()
            sleeper = ps[0] if ps else None
        assert sleeper, "the build never reached its slow step"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:  # a failed test leaves neither the tool nor its build running
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    time.sleep(0.5)
    assert not Path(f"/proc/{sleeper}").exists(), "the build's child process was left running"
    # The workspace is usable again: the lock is free and the interrupted build dir is not marked complete.
    stamp = next((tmp_path / "ws" / "build").glob("*/onebit-build.json"))
    assert json.loads(stamp.read_text())["complete"] is False


def test_quiet_build_answers_on_stdout_and_keeps_progress_on_stderr(tiny_project):
    # $(onebit-build -q build) is what the build answers: here the recipe's only output has
    # no llama-server, so the answer is the manifest; progress never reaches stdout.
    root, mirrors, ws = tiny_project
    out = cli(root, mirrors, ws, "-q", "--recipe", "tiny", "build")
    assert out.returncode == 0, out.stderr
    answer = Path(out.stdout.strip())
    assert out.stdout.count("\n") == 1 and answer.name == "build-manifest.json" and answer.is_file()
    assert read_manifest(answer)["recipe"]["name"] == "tiny"
    loud = cli(root, mirrors, ws, "--recipe", "tiny", "build")
    assert loud.stdout == out.stdout  # the same answer, with or without -q
    assert "up to date" in loud.stderr and out.stderr.strip() == ""
