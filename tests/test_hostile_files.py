"""The project's own files when they are not what they should be: YAML whose top level or a
section is no mapping, an empty file, an alias bomb, a recipe that is a link out of its
folder, a FIFO where a file is read. Each is one line naming the file, exit 2, on the real CLI
and a real copy of the project's files; one bad recipe never hides the others from
``recipes``; nothing hangs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from _support import REPO, one_line_error, run_cli
from onebit_build.core.errors import ConfigError
from onebit_build.spec.model_lock import read_model_lock


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the project's pins.yaml and recipes (real files), with its own answers cache."""
    root = tmp_path / "proj"
    (root / "recipes").mkdir(parents=True)
    shutil.copy(REPO / "pins.yaml", root / "pins.yaml")
    for name in ("default.yaml", "vulkan.yaml"):
        shutil.copy(REPO / "recipes" / name, root / "recipes" / name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return root


def cli(root: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return run_cli(root, "--workspace", str(root.parent / "ws"), *args,
                   env={"XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"]}, timeout=timeout)


SMALL = ("schema: 1\nname: {name}\nbackends: [cpu]\ncomponents:\n  - name: llama\n    source: llama.cpp\n"
         "    targets: [llama-server]\n{extra}")

BAD_RECIPES = {
    "empty": "",
    "only-a-comment": "# nothing here\n",
    "a-list": "[1, 2]\n",
    "a-text": "hello\n",
    "smoke-5": SMALL.format(name="smoke-5", extra="smoke: 5\n"),
    "toolchain-list": SMALL.format(name="toolchain-list", extra="toolchain: [a]\n"),
    "components-item-5": SMALL.format(name="components-item-5", extra="  - 5\n"),
}


@pytest.mark.parametrize("name", sorted(BAD_RECIPES))
def test_a_recipe_that_is_no_mapping_is_one_line_and_the_others_still_list(project, name):
    """Before: AttributeError: 'Node' object has no attribute 'data' (exit 1) for plan, and
    'recipes' failed as a whole."""
    (project / "recipes" / f"{name}.yaml").write_text(BAD_RECIPES[name])
    r = cli(project, "--recipe", name, "plan")
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert f"{name}.yaml" in line and "expected a mapping, found" in line
    r = cli(project, "recipes")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    rows = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:] if ln.strip()}
    assert "invalid" in rows[name] and "invalid" not in rows["default"] and "invalid" not in rows["vulkan"]


BAD_PINS = {
    "pins.yaml": ["", "[1, 2]\n", "hello\n", "schema: 1\nsources: 5\n", "schema: 1\nsources:\n  llama.cpp: 5\n"],
    "pins.lock": ["", "[1, 2]\n", "schema: 1\nresolved: [a]\n", "schema: 1\nresolved:\n  hrx-system: 5\n"],
}


@pytest.mark.parametrize("file, text", [(f, t) for f, texts in BAD_PINS.items() for t in texts])
def test_pins_and_lock_that_are_no_mapping_are_one_line(project, file, text):
    (project / file).write_text(text)
    for args in (("plan",), ("recipes",)):
        r = cli(project, *args)
        assert r.returncode == 2, r.stderr
        line = one_line_error(r)
        assert file in line and ("expected a mapping" in line or "missing" in line), line


@pytest.mark.parametrize("text", ["", "[1]\n", "schema: 1\nmodels: [a]\n", "schema: 1\nmodels:\n  gemma: 5\n"])
def test_models_lock_that_is_no_mapping_is_a_config_error(tmp_path, text):
    lock = tmp_path / "models.lock"
    lock.write_text(text)
    with pytest.raises(ConfigError, match="expected a mapping") as err:
        read_model_lock(lock)
    assert err.value.exit_code == 2 and str(lock) in str(err.value)


def alias_bomb(levels: int) -> str:
    """A recipe whose backends are aliases of aliases: nine times more text per level."""
    lines = ["schema: 1", "name: bomb", "description: d", 'backends:', '  - &l0 ["xxxxxxxxxx", "xxxxxxxxxx"]']
    for i in range(1, levels + 1):
        lines.append(f"  - &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_quickly_in_one_short_line(project):
    """Before: the recipe's list was quoted whole through repr() (at 9 levels: 50 s, 2.5 GB and
    a MemoryError; at 5 levels here, an error line of about 900 kB)."""
    (project / "recipes" / "bomb.yaml").write_text(alias_bomb(5))
    t0 = time.monotonic()
    r = cli(project, "--recipe", "bomb", "plan")
    assert r.returncode == 2, r.stderr[:2000]
    line = one_line_error(r)
    assert len(line) < 400, f"{len(line)} characters: {line[:300]}"
    assert "aliases" in line and "bomb.yaml" in line
    assert time.monotonic() - t0 < 30


def test_an_alias_inside_its_own_anchor_is_one_line(project):
    (project / "recipes" / "self.yaml").write_text("schema: 1\nname: self\nbackends: &a [*a]\n")
    r = cli(project, "--recipe", "self", "plan")
    assert r.returncode == 2, r.stderr[:2000]
    assert "alias refers to the value that holds it" in one_line_error(r)


def test_a_long_value_is_quoted_short(project):
    """A value that is not what the key takes is quoted in at most a few dozen characters."""
    long = "x" * 5000
    (project / "recipes" / "long.yaml").write_text(f"schema: 1\nname: long\nbackends: [[{long}]]\n")
    r = cli(project, "--recipe", "long", "plan")
    assert r.returncode == 2
    line = one_line_error(r)
    assert "backends" in line and len(line) < 400


def test_the_project_recipes_with_aliases_still_load():
    """strix-halo.yaml uses anchors and merge keys: they stay allowed."""
    r = run_cli(REPO, "--recipe", "strix-halo", "plan")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("target", ["/etc/passwd", "../outside.yaml"])
def test_a_recipe_linked_out_of_its_folder_is_refused_unread(project, target):
    """Before: `ln -s /etc/shadow recipes/shadow.yaml; onebit-build recipes` printed the file's
    first line. Now the link is not followed: one line naming the link, exit 2; the other
    recipes are listed."""
    secret = "root:secret-hash-0123:20228:0:99999:7:::"
    (project / "outside.yaml").write_text(f"{secret}\n")
    link = project / "recipes" / "leak.yaml"
    link.symlink_to(target if target.startswith("/") else project / "outside.yaml")
    for args in (("--recipe", "leak", "plan"), ("recipes",), ("--recipe", "leak", "doctor")):
        r = cli(project, *args)
        assert r.returncode == 2, r.stderr
        assert "secret-hash" not in r.stdout + r.stderr and "root:" not in r.stdout + r.stderr
        assert "leads out of" in r.stderr, r.stderr
    r = cli(project, "recipes")
    assert "default" in r.stdout and "invalid" in [ln for ln in r.stdout.splitlines() if ln.startswith("leak")][0]


def test_a_link_to_a_recipe_inside_the_folder_is_fine(project):
    (project / "recipes" / "cpu.yaml").symlink_to("default.yaml")
    r = cli(project, "--recipe", "cpu", "plan")
    assert r.returncode == 0, r.stderr  # read, as the recipe it names


@pytest.mark.parametrize("lines, says", [(1, "(a key that is no name): unknown key"), (2, "malformed YAML")])
def test_a_file_not_ours_is_never_quoted_whole(tmp_path, lines, says):
    """A file given with --recipe that is no recipe (a password file's lines): the message says
    what it is and where, not what it holds."""
    other = tmp_path / "passwd.yaml"
    other.write_text("root:secret-hash-0123:20228:0:99999:7:::\nbin:x:1:1::/:/sbin/nologin\n"[: 41 * lines])
    r = run_cli(REPO, "--recipe", str(other), "plan")
    assert r.returncode == 2
    line = one_line_error(r)
    assert "secret-hash" not in r.stderr + r.stdout and says in line, line


def test_a_fifo_in_recipes_does_not_hang_the_listing(project):
    """Before: `recipes` and `--recipe fifo plan` waited forever for a writer."""
    os.mkfifo(project / "recipes" / "fifo.yaml")
    r = cli(project, "recipes", timeout=30)
    assert r.returncode == 2, r.stderr
    assert "FIFO" in r.stderr and "default" in r.stdout
    r = cli(project, "--recipe", "fifo", "plan", timeout=30)
    assert r.returncode == 2 and "is a FIFO (named pipe), not a regular file" in one_line_error(r)


@pytest.mark.parametrize("answer", ["completion-bash.json", "recipes"])
def test_a_fifo_at_the_answers_cache_does_not_hang(project, answer):
    """Before: `completion bash` (and `recipes`) opened the FIFO and waited forever."""
    from onebit_build.commands.recipe_table import cache_file
    from onebit_build.core.project import CHECKOUT, ProjectRoot
    from onebit_build.core.usercache import tool_dir

    env = {"XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"]}
    if answer == "recipes":
        where = cache_file(ProjectRoot(path=project, data_from=CHECKOUT, found_by="test"), env)
        args = ("recipes",)
    else:
        where = tool_dir(env) / answer
        args = ("completion", "bash")
    where.parent.mkdir(parents=True)
    os.mkfifo(where)
    r = cli(project, *args, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "default" in r.stdout and "Traceback" not in r.stderr


def test_pins_yaml_that_is_a_fifo_is_one_line(project):
    (project / "pins.yaml").unlink()
    os.mkfifo(project / "pins.yaml")
    r = cli(project, "plan", timeout=30)
    assert r.returncode == 2 and "pins file is a FIFO" in one_line_error(r)


# --------------------------------------------------------------------------- the doc's rows

# The doc's sections whose rows name tests of these modules (one module per topic).
ROW_SECTIONS = ("The project's files when they are not what they should be",
                "Paths that loop, and run folders that are links", "Files and folders named on the command line",
                "What the terminal shows, and what it never shows")
ROW_MODULES = ("test_hostile_files", "test_hostile_paths", "test_hostile_named", "test_hostile_output")


def test_hostile_rows_agree_with_their_tests():
    """Each row of these sections names tests that exist in ROW_MODULES, and one of them
    asserts the exit code the row gives."""
    import importlib
    import inspect
    import re

    text = (REPO / "docs" / "reliability.md").read_text()
    tests = {}
    for name in ROW_MODULES:
        module = importlib.import_module(name)
        tests.update({n: f for n, f in vars(module).items() if n.startswith("test_")})
    for title in ROW_SECTIONS:
        section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
        rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith(("| case", "| ---"))]
        assert rows, title
        for row in rows:
            case, does, named = (cell.strip() for cell in row.strip().strip("|").split(" | "))
            codes = set(re.findall(r"exit (\d+)", does))
            assert len(codes) == 1, f"row names no single exit code: {case}"
            names = re.findall(r"`(test_\w+)`", named)
            assert names and all(n in tests for n in names), f"row names a test that is not there: {case}"
            code = codes.pop()
            sources = [inspect.getsource(tests[n]) for n in names]
            assert any(f"returncode == {code}" in src or f"exit_code == {code}" in src for src in sources), \
                f"no test of the row asserts exit {code}: {case}"
