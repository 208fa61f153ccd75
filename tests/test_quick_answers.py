"""The answers that ``recipes`` and ``completion`` keep in the user's cache: the same as made
afresh, made again when something they came from changes, a broken recipe still reported as
broken, and a cache that is corrupt, stale or unwritable never printed or fatal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _support import REPO, project_tree, run_cli, tiny_recipe

PINS = "schema: 1\nsources:\n  tiny:\n    url: u\n    commit: " + "a" * 40 + "\n"


def cli(root: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, *args, env={"XDG_CACHE_HOME": str(cache)})


def project(tmp_path: Path) -> Path:
    broken = tiny_recipe(name="broken", source="nowhere")  # a source pins.yaml does not have
    return project_tree(tmp_path / "p", pins=PINS, recipes={"default": tiny_recipe(name="default"), "broken": broken})


def test_a_broken_recipe_is_listed_as_invalid_with_its_error_and_stays_so_from_the_cache(tmp_path):
    root, cache = project(tmp_path), tmp_path / "cache"
    plan = cli(root, cache, "--recipe", "broken", "plan")
    assert plan.returncode == 2 and "nowhere" in plan.stderr, plan.stderr
    error = plan.stderr.strip().splitlines()[-1].removeprefix("error: ")
    for _ in range(2):  # made afresh, then read back from the cache
        out = cli(root, cache, "recipes")
        assert out.returncode == 2, out.stderr
        rows = [" ".join(line.split()) for line in out.stdout.splitlines()[3:]]
        assert rows == ["broken invalid: run 'onebit-build --recipe broken plan' for the error",
                        "default cpu a tiny C program"]
        assert error in out.stderr
    doc = json.loads(cli(root, cache, "recipes", "--json").stdout)
    assert [(r["name"], r["error"] is None) for r in doc["recipes"]] == [("broken", False), ("default", True)]
    assert error in doc["recipes"][0]["error"]
    (root / "recipes" / "latin1.yaml").write_bytes(b"schema: 1\nname: caf\xe9\n")  # not UTF-8: an error, no traceback
    out = cli(root, cache, "recipes")
    assert out.returncode == 2 and "latin1.yaml: recipe file is not UTF-8 text (byte 19)" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "latin1  " in out.stdout


def test_the_rows_follow_the_recipes_the_pins_and_the_files_beside_them(tmp_path):
    root, cache = project(tmp_path), tmp_path / "cache"
    (root / "recipes" / "broken.yaml").unlink()
    assert cli(root, cache, "recipes").returncode == 0
    recipe = root / "recipes" / "default.yaml"
    recipe.write_text(recipe.read_text().replace("a tiny C program", "a tiny C program, edited"))
    assert "a tiny C program, edited" in cli(root, cache, "recipes").stdout
    (root / "pins.yaml").write_text(PINS.replace("tiny:", "other:"))  # the recipe's source is gone
    out = cli(root, cache, "recipes")
    assert out.returncode == 2 and "invalid: run" in out.stdout and "tiny" in out.stderr
    (root / "pins.yaml").write_text(PINS)
    assemble = "assemble:\n      configure:\n        - {template: t/hello.in, to: hello.cfg}\n"
    recipe.write_text(recipe.read_text().replace("outputs:", assemble + "    outputs:"))
    (root / "recipes" / "t").mkdir()
    (root / "recipes" / "t" / "hello.in").write_text("@X@\n")
    assert cli(root, cache, "recipes").returncode == 0
    (root / "recipes" / "t" / "hello.in").unlink()  # the template the recipe names is gone
    out = cli(root, cache, "recipes")
    assert out.returncode == 2 and "template t/hello.in not found" in out.stderr, out.stderr
    (root / "pins.lock").write_text("not: [valid")  # a pins.lock error stops the listing, as before
    out = cli(root, cache, "recipes")
    assert out.returncode == 2 and "pins.lock" in out.stderr and out.stdout == ""


@pytest.mark.parametrize("damage", ["not json", "rows of another file", "a wrong key", "junk rows"])
def test_a_corrupt_or_stale_cache_is_never_printed(tmp_path, damage):
    root, cache = project(tmp_path), tmp_path / "cache"
    good = cli(root, cache, "recipes")
    (kept,) = (cache / "onebit-build-answers").glob("recipes-*.json")
    doc = json.loads(kept.read_text())
    if damage == "not json":
        kept.write_text("{")
    elif damage == "rows of another file":
        doc["payload"]["rows"][1]["name"] = "other"
        kept.write_text(json.dumps(doc))
    elif damage == "a wrong key":
        doc["key"] = "0" * 64
        doc["payload"]["rows"][1]["description"] = "stale"
        kept.write_text(json.dumps(doc))
    else:
        doc["payload"]["rows"][1]["backends"] = [1]
        kept.write_text(json.dumps(doc))
    again = cli(root, cache, "recipes")
    assert (again.returncode, again.stdout) == (good.returncode, good.stdout)
    assert json.loads(kept.read_text())["key"] == json.loads(good_key(root, cache))


def good_key(root: Path, cache: Path) -> str:
    """The key the rows of ``root`` have now, as the tool computes it (in a fresh process)."""
    code = ("import json, os, pathlib; from onebit_build.commands.recipe_table import rows_key;"
            "from onebit_build.core.project import find_root;"
            "print(json.dumps(rows_key(find_root(given=None, env=os.environ, cwd=pathlib.Path.cwd()))))")
    env = {**os.environ, "PYTHONPATH": str(REPO), "ONEBIT_ROOT": str(root), "XDG_CACHE_HOME": str(cache)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return r.stdout


def test_an_unwritable_cache_still_answers(tmp_path):
    root = project(tmp_path)
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    out = cli(root, tmp_path / "cache", "recipes")
    assert out.returncode == 2 and "default" in out.stdout and "Traceback" not in out.stderr
    script = cli(root, tmp_path / "cache", "completion", "bash")
    assert script.returncode == 0 and "_shtab_onebit_build" in script.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_kept_completion_script_is_byte_identical_to_a_fresh_one(tmp_path, shell):
    fresh = run_script(tmp_path / "one", shell)  # an empty cache: made from the parser
    kept = run_script(tmp_path / "one", shell)
    assert kept == fresh and kept.startswith(b"#") and len(kept) > 1000
    made = subprocess.run([sys.executable, "-c", f"from onebit_build.commands.completion import completion_script as c;"
                           f" import sys; sys.stdout.write(c({shell!r}))"], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, check=True).stdout
    assert kept == made
    where = tmp_path / "one" / "onebit-build-answers" / f"completion-{shell}.json"
    doc = json.loads(where.read_text())
    doc["payload"]["script"] = "echo stale"
    doc["key"] = "0" * 64  # made by other code: not used, made again
    where.write_text(json.dumps(doc))
    assert run_script(tmp_path / "one", shell) == fresh
    assert json.loads(where.read_text())["payload"]["script"].encode() == fresh


def run_script(cache: Path, shell: str) -> bytes:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)}
    return subprocess.run([sys.executable, "-m", "onebit_build", "completion", shell], env=env, capture_output=True,
                          check=True).stdout


def test_the_code_stamp_follows_each_module_and_nothing_else(tmp_path):
    from onebit_build.core.usercache import code_stamp

    pkg = tmp_path / "pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "sub" / "b.py").write_text("B = 1\n")
    first = code_stamp(package_dir=pkg)
    (pkg / "sub" / "__pycache__" / "b.cpython.pyc").write_bytes(b"compiled")
    (pkg / "notes.txt").write_text("not code")
    assert code_stamp(package_dir=pkg) == first
    os.utime(pkg / "sub" / "b.py", ns=(1, 1))
    touched = code_stamp(package_dir=pkg)
    assert touched != first
    (pkg / "c.py").write_text("")
    assert code_stamp(package_dir=pkg) != touched
    assert code_stamp(("shtab",), package_dir=pkg) != code_stamp(package_dir=pkg)
    assert code_stamp(("no_such_library_here",), package_dir=pkg) != code_stamp(package_dir=pkg)


def test_a_forged_entry_with_its_key_kept_is_never_printed(tmp_path):
    """The key is public (made from the code and the project): an entry edited with its key
    kept, a shell line appended to the completion script or terminal escapes put in a
    description, is not printed: its seal does not hold, and the answer is made afresh."""
    root, cache = project(tmp_path), tmp_path / "cache"
    script, rows = run_script(cache, "bash"), cli(root, cache, "recipes")
    answers = cache / "onebit-build-answers"
    where = answers / "completion-bash.json"
    doc = json.loads(where.read_text())
    doc["payload"]["script"] += "\ntouch /tmp/forged-by-the-cache\n"
    where.write_text(json.dumps(doc))
    (kept,) = answers.glob("recipes-*.json")
    doc = json.loads(kept.read_text())
    doc["payload"]["rows"][1]["description"] = "\x1b]0;owned\x07\x1b[2J"
    kept.write_text(json.dumps(doc))
    assert run_script(cache, "bash") == script
    again = cli(root, cache, "recipes")
    assert (again.returncode, again.stdout) == (rows.returncode, rows.stdout) and "owned" not in again.stdout
    assert "forged" not in json.loads(where.read_text())["payload"]["script"]  # made afresh in its place


@pytest.mark.parametrize("how", ["readable by others", "a link", "another file's bytes"])
def test_an_untrusted_secret_is_replaced_and_seals_nothing(tmp_path, how):
    """The secret counts only as a private regular file of the user: a copy others may read,
    or a link to a file someone else placed, seals nothing; a new secret is made."""
    cache = tmp_path / "cache"
    script = run_script(cache, "bash")
    secret = cache / "onebit-build-answers" / "answers.secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    where = cache / "onebit-build-answers" / "completion-bash.json"
    planted = tmp_path / "planted"
    planted.write_bytes(b"k" * 32)
    if how == "readable by others":
        secret.chmod(0o644)
        forged_with = secret.read_bytes()
    elif how == "a link":
        secret.unlink()
        secret.symlink_to(planted)
        forged_with = planted.read_bytes()
    else:
        secret.write_bytes(b"k" * 31)
        forged_with = b"k" * 31
    from onebit_build.core.usercache import seal

    doc = json.loads(where.read_text())
    doc["payload"]["script"] = "echo forged"
    doc["seal"] = seal(forged_with, doc["kind"], doc["key"], doc["payload"])
    where.write_text(json.dumps(doc))
    assert run_script(cache, "bash") == script
    assert not secret.is_symlink() and secret.stat().st_mode & 0o777 == 0o600 and secret.read_bytes() != forged_with
