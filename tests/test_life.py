"""A build's whole life: builds, location, gc, on real CMake builds of a tiny project."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from _support import TINY_CMAKE, bare_mirror, make_repo, project_tree, run_cli
from onebit_build.housekeeping.inventory import Current, staleness
from onebit_build.checking.manifest import Manifest, SourceRecord

# The tiny program stands in for llama-server: its output carries that name.
SERVERISH = """\
    schema: 1
    name: tiny
    description: a tiny C program
    backends: [cpu]
    components:
      - name: hello
        source: tiny
        defines:
          GREETING: "GREETING_VALUE"
        targets: [hello]
        outputs:
          llama-server: hello
    """


@pytest.fixture
def project(tmp_path):
    commit = make_repo(tmp_path / "tiny-src", TINY_CMAKE)
    bare_mirror(tmp_path / "tiny-src", tmp_path / "mirrors", "tiny")
    pins = f"schema: 1\nsources:\n  tiny:\n    url: https://example.invalid/tiny.git\n    commit: {commit}\n"
    root = project_tree(tmp_path / "proj", pins=pins, recipes={"tiny": SERVERISH.replace("GREETING_VALUE", "hello")})
    return root, tmp_path


def cli(project, *args):
    root, tmp = project
    return run_cli(root, "--workspace", str(tmp / "ws"), "--mirror-dir", str(tmp / "mirrors"),
                   "--recipe", "tiny", *args)


def builds(project) -> list[dict]:
    out = cli(project, "builds", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["builds"]


def test_staleness_names_what_changed():
    man = Manifest(recipe="r", recipe_sha256="a", sources=(SourceRecord(name="s", commit="c1", patch_digest="d1"),))
    assert staleness(man, Current(recipe_sha256="a", sources={"s": ("c1", "d1")})) == ()
    changed = Current(recipe_sha256="b", sources={"s": ("c2", "d1")})
    assert staleness(man, changed) == ("recipe changed", "pin of s changed")
    assert staleness(man, Current(recipe_sha256="a", sources={"s": ("c1", "d2")})) == ("patches of s changed",)
    assert staleness(man, Current(recipe_sha256=None, sources={})) == ("recipe r is not in the project",)


def test_builds_location_and_gc_through_a_recipe_change(project):
    root, tmp = project
    assert cli(project, "location").returncode == 12  # nothing built yet: exit 12, one line
    assert "built      not built yet in this workspace" in cli(project, "plan").stdout
    assert cli(project, "build").returncode == 0
    assert "built      up to date: " in cli(project, "plan").stdout
    first = builds(project)
    assert [b["up_to_date"] for b in first] == [True] and first[0]["bytes"] > 0
    # A rerun with nothing to do leaves when the build was made as it was; the table has a header.
    time.sleep(1.1)
    assert cli(project, "build").returncode == 0
    assert builds(project)[0]["built"] == first[0]["built"] and first[0]["built"].endswith("Z")
    table = cli(project, "builds").stdout.splitlines()
    assert table[0].split() == ["recipe", "key", "built", "(UTC)", "size", "state", "folder"]
    assert table[1].split()[:3] == ["tiny", first[0]["key"], first[0]["built"]]
    where = cli(project, "location")
    assert where.returncode == 0
    assert subprocess.run([where.stdout.strip()], capture_output=True, text=True).stdout == "hello\n"

    # The recipe changes: the old build is stale (and says why), the new one up to date.
    (root / "recipes" / "tiny.yaml").write_text(textwrap.dedent(SERVERISH.replace("GREETING_VALUE", "bonjour")))
    assert "built      would rebuild: recipe changed" in cli(project, "plan").stdout
    assert cli(project, "build").returncode == 0
    now = {b["folder"]: b for b in builds(project)}
    assert sorted(b["up_to_date"] for b in now.values()) == [False, True]
    stale = next(b for b in now.values() if not b["up_to_date"])
    assert stale["stale"] == ["recipe changed"]
    plan = json.loads(cli(project, "plan", "--json").stdout)["built"]
    assert plan["stale"] == [{"folder": stale["folder"], "why": ["recipe changed"]}] and len(plan["up_to_date"]) == 1
    assert subprocess.run([cli(project, "location").stdout.strip()],
                          capture_output=True, text=True).stdout == "bonjour\n"

    # A program running from the stale build keeps it; --dry-run removes nothing.
    sleeper = shutil.copy("/bin/sleep", f"{stale['folder']}/sleep-in-build")
    proc = subprocess.Popen([sleeper, "300"])
    try:
        time.sleep(0.2)
        dry = cli(project, "gc", "--dry-run")
        assert dry.returncode == 0 and "would free" in dry.stdout and f"kept {stale['folder']}" in dry.stderr
        assert (tmp / "ws" / "build").exists() and len(builds(project)) == 2
    finally:
        proc.kill()
        proc.wait()
    dry = cli(project, "gc", "--dry-run")
    assert f"would remove {stale['folder']}" in dry.stderr and "recipe changed" in dry.stderr
    done = cli(project, "gc")
    assert done.returncode == 0 and done.stdout.startswith("freed ")
    assert [b["up_to_date"] for b in builds(project)] == [True]
    assert cli(project, "location").returncode == 0  # the up-to-date build was never touched


def test_gc_refuses_while_a_run_holds_the_workspace(project):
    _, tmp = project
    assert cli(project, "build").returncode == 0
    from onebit_build.core.workspace import WorkspaceLock

    with WorkspaceLock(tmp / "ws" / "onebit-build.lock", "onebit-build build"):
        held = cli(project, "gc")
    assert held.returncode == 3 and "in use" in held.stderr
    assert len(builds(project)) == 1


@pytest.mark.slow
@pytest.mark.shared_workspace
def test_model_pull_fetches_and_verifies_the_recipes_model(gemma_model):
    from conftest import workspace_for_tests
    from onebit_build.core.fsutil import sha256_file

    from _support import REPO

    out = run_cli(REPO, "--workspace", str(workspace_for_tests()), "model", "pull")
    assert out.returncode == 0, out.stderr
    # Pulled into the workspace given, whether or not the user's own workspace holds the model
    # (after the README's first run, gemma_model is the user's copy).
    pulled = Path(out.stdout.strip())
    assert pulled == workspace_for_tests() / "models" / gemma_model.name and "sha256 a5fd3b62" in out.stderr
    assert sha256_file(pulled).startswith("a5fd3b62")
