"""The command line: one clear error line with the remedy, exit codes, the workspace lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from _support import REPO, project_tree, run_cli, tiny_recipe


def test_hrx_on_in_a_project_without_the_recipe_names_the_recipes_there(tmp_path):
    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: " + "a" * 40 + "\n",
                        recipes={"default": tiny_recipe(name="default")})
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "--hrx", "on", "build")
    assert out.returncode == 2
    assert out.stderr.strip() == "error: unknown recipe 'strix-halo' (use one of: default)"


def test_config_errors_are_one_line_with_remedy(tmp_path):
    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: 12345\n",
                        recipes={"default": tiny_recipe(name="default")})
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "build")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") or "error:" in out.stderr
    assert "sources.tiny.commit" in out.stderr and "abbreviated" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_recipe_lists_known_ones(tmp_path):
    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: " + "a" * 40 + "\n",
                        recipes={"default": tiny_recipe(name="default")})
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "--recipe", "nope", "build")
    assert out.returncode == 2 and "unknown recipe 'nope'" in out.stderr and "default" in out.stderr


def test_second_concurrent_run_is_refused_naming_the_holder(tmp_path):
    ws = tmp_path / "ws"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from onebit_build.core.workspace import WorkspaceLock
        with WorkspaceLock(Path({str(ws / 'onebit-build.lock')!r}), 'onebit-build build'):
            print('locked', flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        out = run_cli(REPO, "--workspace", str(ws), "fetch", "--offline")
        assert out.returncode == 3
        assert f"pid {holder.pid}" in out.stderr and "in use" in out.stderr and "another --workspace" in out.stderr
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.1)
    # Once the holder is gone the lock is free again (the run then fails only for being offline).
    out = run_cli(REPO, "--workspace", str(ws), "fetch", "--offline")
    assert out.returncode == 4 and "offline" in out.stderr


def test_without_git_every_git_command_is_one_line_and_exit_7(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with python and nothing else
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "python3").symlink_to(sys.executable)
    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: " + "a" * 40 + "\n",
                        recipes={"default": tiny_recipe(name="default")})
    ws = tmp_path / "ws"
    env = {"PATH": str(bin_dir)}
    for cmd in (["fetch"], ["patch"], ["build"], ["smoke"], ["verify"], [], ["pins", "lock"],
                ["patches", "export", "tiny"]):
        out = run_cli(root, "--workspace", str(ws), *cmd, env=env)
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert (out.returncode, lines) == (7, ["error: git not found (install git: apt-get install git)"]), \
            (cmd, out.stderr)
    assert not (ws / "runs").exists() or list((ws / "runs").iterdir()) == []
    plan = run_cli(root, "--workspace", str(ws), "--dry-run", env=env)  # a dry run needs no git
    assert plan.returncode == 0 and "Traceback" not in plan.stderr


def test_find_root_order(tmp_path):
    from onebit_build.core.errors import ConfigError
    from onebit_build.core.project import find_root

    def project(p):
        (p / "recipes").mkdir(parents=True)
        (p / "pins.yaml").write_text("schema: 1\nsources: {}\n")
        return p.resolve()

    checkout, other, pkg_parent = project(tmp_path / "co"), project(tmp_path / "other"), tmp_path / "site"
    data = project(pkg_parent / "onebit_build" / "data")
    pkg = pkg_parent / "onebit_build"
    (checkout / "docs").mkdir()
    nowhere = tmp_path / "empty"
    nowhere.mkdir()
    r = find_root(given=str(other), env={"ONEBIT_ROOT": str(checkout)}, cwd=checkout, package_dir=pkg)
    assert (r.path, r.data_from, r.found_by) == (other, "checkout", "--root")
    r = find_root(given=None, env={"ONEBIT_ROOT": str(other)}, cwd=checkout, package_dir=pkg)
    assert (r.path, r.found_by) == (other, "$ONEBIT_ROOT")
    r = find_root(given=None, env={}, cwd=checkout / "docs", package_dir=pkg)
    assert (r.path, r.data_from, r.found_by) == (checkout, "checkout", "current folder")
    r = find_root(given=None, env={}, cwd=nowhere, package_dir=pkg)
    assert (r.path, r.data_from, r.found_by) == (data, "package", "installed package")
    r = find_root(given=None, env={}, cwd=nowhere, package_dir=checkout / "onebit_build")  # an editable install
    assert (r.path, r.data_from, r.found_by) == (checkout, "checkout", "package location")
    r = find_root(given=str(data), env={}, cwd=nowhere, package_dir=pkg)
    assert r.data_from == "package"
    with pytest.raises(ConfigError, match="no project data"):
        find_root(given=None, env={}, cwd=nowhere, package_dir=nowhere / "onebit_build")
    with pytest.raises(ConfigError, match="--root .*no such folder"):
        find_root(given=str(nowhere / "typo"), env={}, cwd=nowhere, package_dir=pkg)


def test_version_names_pins_digest_and_root(tmp_path):
    import hashlib

    out = run_cli(REPO, "--version")
    digest = hashlib.sha256((REPO / "pins.yaml").read_bytes()).hexdigest()[:12]
    assert out.returncode == 0
    assert out.stdout.splitlines() == ["onebit-build 0.1.0", f"pins.yaml sha256 {digest}",
                                       f"recipes from {REPO} (checkout, found by $ONEBIT_ROOT)"]
    other = run_cli(REPO, "--root", str(tmp_path), "--version")
    assert other.returncode == 0 and f"pins.yaml: not readable in {tmp_path}" in other.stdout


def test_recipes_lists_name_backends_description(tmp_path):
    import json

    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: " + "a" * 40 + "\n",
                        recipes={"default": tiny_recipe(name="default"), "other": tiny_recipe(name="other")})
    out = run_cli(root, "recipes")
    assert out.returncode == 0, out.stderr
    rows = [line.split(None, 2) for line in out.stdout.splitlines()[2:]]
    assert rows == [["recipe", "backends", "description"], ["default", "cpu", "a tiny C program"],
                    ["other", "cpu", "a tiny C program"]]
    doc = json.loads(run_cli(root, "recipes", "--json").stdout)
    assert (doc["project_root"], doc["data_from"]) == (str(root.resolve()), "checkout")
    assert [(r["name"], r["backends"], r["description"]) for r in doc["recipes"]] == [
        ("default", ["cpu"], "a tiny C program"), ("other", ["cpu"], "a tiny C program")]
    real = json.loads(run_cli(REPO, "recipes", "--json").stdout)
    assert {r["name"]: r["backends"] for r in real["recipes"]}["strix-halo"] == ["hrx", "vulkan"]


def test_manifest_names_the_project_data_and_old_manifests_still_read(tmp_path):
    from onebit_build.spec.recipe import load_recipe
    from onebit_build.spec.pins import load_pins
    from onebit_build.checking.manifest import make_manifest, read_manifest, write_manifest

    recipe = load_recipe(REPO / "recipes" / "default.yaml", load_pins(REPO / "pins.yaml"))
    doc = make_manifest(recipe, {}, {}, [], project={"project_root": "/somewhere", "data_from": "package"})
    write_manifest(tmp_path / "m.json", doc)
    back = read_manifest(tmp_path / "m.json")
    assert (back["project_root"], back["data_from"]) == ("/somewhere", "package")
    old = make_manifest(recipe, {}, {}, [])
    write_manifest(tmp_path / "old.json", old)
    assert "data_from" not in read_manifest(tmp_path / "old.json")


def test_an_unknown_command_is_one_line_with_the_closest_ones():
    import subprocess
    import sys

    from onebit_build.commands.parser import unknown_command

    assert unknown_command("list", ["recipes", "builds"]).startswith("'list' is not a command; did you mean 'recipes'?")
    assert "did you mean 'build' or 'builds'?" in unknown_command("biuld", ["build", "builds", "plan"])
    assert "did you mean" not in unknown_command("zzz", ["build"])
    assert unknown_command("\x1b[2J", ["build"]).startswith("'\\x1b[2J' is not a command")
    for word, guess in (("clean", "gc"), ("run", "all"), ("smok", "smoke")):
        out = subprocess.run([sys.executable, "-m", "onebit_build", word], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert out.stderr.startswith(f"error: '{word}' is not a command; did you mean '{guess}'"), out.stderr


@pytest.mark.parametrize("recipe", ["default", "vulkan", "cuda"])
def test_locked_asks_only_for_the_pins_a_recipe_uses(tmp_path, recipe):
    """--locked with the committed pins.lock: the recipes on llama.cpp alone plan (the
    abbreviated hrx-system pin is not theirs); the recipe that uses it names it, exit 2."""
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", recipe, "--locked", "plan")
    assert out.returncode == 0, out.stderr
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", "strix-halo", "--locked", "plan")
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1 and "unresolved pins with --locked: hrx-system" in errors[0]
    assert (REPO / "pins.lock").is_file()  # committed: the lock that CI's --locked reads
