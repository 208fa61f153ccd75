"""End to end on the real thing: the default recipe builds upstream llama.cpp at its pin
(through the sdist mirror), and a second run does no work."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from _support import REPO, git, run_cli, shared_from_user
from conftest import workspace_for_tests
from onebit_build.checking.manifest import read_manifest
from onebit_build.checking.manifest import latest_path as manifest_path
from onebit_build.building.builder import STAMP_KIND, STAMP_SCHEMA
from onebit_build.core.fsutil import read_state, write_state
from onebit_build.core.workspace import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.shared_workspace]


def test_real_llama_server_names_the_pin(llama_server):
    out = subprocess.run([str(llama_server), "--version"], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr
    assert "commit 0c1e570" in text, text
    assert "build 20261001" in text, text


def fetch_routes(ws: Path) -> set[str]:
    """Where the tests' default build may honestly say its source came from: the test workspace's
    own cache, the pinned sdist, or (when the tests share it, as after the README's
    ``onebit-build``) the user's workspace's bare repository given as a mirror, by its path."""
    routes = {"cache", "pypi-sdist:llama-cpp-python==0.3.36"}
    shared = shared_from_user(ws)
    if shared:
        routes.add(f"mirror-dir:{(Path(shared[1]) / 'llama.cpp.git').resolve()}")
    return routes


def test_real_manifest_is_complete(llama_server):
    doc = read_manifest(manifest_path(Workspace(root=workspace_for_tests()), "default"))
    src = doc["sources"][0]
    assert src["commit"] == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert src["mirror_used"] in fetch_routes(workspace_for_tests()), src["mirror_used"]
    if src["mirror_used"].startswith("mirror-dir:"):
        mirror = Path(src["mirror_used"].removeprefix("mirror-dir:"))
        assert git(mirror, "cat-file", "-t", f"{src['commit']}^{{commit}}") == "commit"
    assert all(len(p["sha256"]) == 64 for p in src["patches"]) and src["patches"]
    comp = doc["components"][0]
    assert comp["defines"]["LLAMA_BUILD_COMMIT"] == "0c1e570" and comp["defines"]["GGML_NATIVE"] == "OFF"
    names = {o["name"] for o in comp["outputs"]}
    assert "llama-server" in names and any(n.startswith("libllama") for n in names)
    assert doc["toolchain"]["cmake"] and doc["toolchain"]["ninja"] and "c++" in doc["toolchain"]["cxx_compiler"]
    assert doc["host"]["machine"]


def test_second_run_does_no_work(llama_server):
    # What the run did, not how long it took (a timing assertion fails on a busy machine).
    before = llama_server.stat().st_mtime_ns
    out = run_cli(REPO, "--workspace", str(workspace_for_tests()), "build", timeout=600)
    assert out.returncode == 0, out.stderr
    assert "llama.cpp@0c1e57098bba (cache)" in out.stderr
    assert "(reused)" in out.stderr and "up to date" in out.stderr
    assert llama_server.stat().st_mtime_ns == before  # not linked again


def test_plan_is_what_the_build_did(llama_server):
    """``plan --json`` printed before a build names the build key, the folder, the defines and
    the CMakeInit.txt that the build then used: read back from its manifest and its folder."""
    import json

    ws = workspace_for_tests()
    out = run_cli(REPO, "--workspace", str(ws), "plan", "--json", timeout=300)
    assert out.returncode == 0, out.stderr
    planned = json.loads(out.stdout)["components"]
    # The folder as an interrupted build leaves it (its stamp not complete), so that this build
    # configures it: a finished folder is reused as it is, written by whichever earlier run made
    # it (the compiler launcher, no part of the key, may have been another program then).
    for comp in planned:
        stamp = Path(comp["build_dir"]) / "onebit-build.json"
        doc = read_state(stamp, STAMP_KIND, STAMP_SCHEMA)
        write_state(stamp, STAMP_KIND, STAMP_SCHEMA, {k: v for k, v in doc.items()
                                                      if k not in ("schema", "kind")} | {"complete": False})
    built = run_cli(REPO, "--workspace", str(ws), "build", timeout=1800)
    assert built.returncode == 0, built.stderr
    assert "configuring llama (" in built.stderr and "llama built in" in built.stderr, built.stderr
    doc = read_manifest(manifest_path(Workspace(root=ws), "default"))
    assert [c["name"] for c in planned] == [c["name"] for c in doc["components"]]
    for plan, comp in zip(planned, doc["components"]):
        assert plan["key"] == comp["key"] and plan["build_dir"] == comp["build_dir"]
        assert {name: value for name, value in plan["defines"]} == comp["defines"]
        assert (Path(comp["build_dir"]) / "CMakeInit.txt").read_text() == plan["init_cache"]
