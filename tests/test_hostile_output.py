"""What the tool prints when what it prints comes from a recipe, a path or a name: terminal
escapes and newlines are escaped where output is written (core/ui.py), credentials in a
download URL are never shown, and messages that other libraries write on several lines are
one line. Each through the real CLI on a real copy of the project's files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from _support import REPO, one_line_error, run_cli
from onebit_build.building.cache.kept import TOOLS_DIR
from onebit_build.core import ui


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "proj"
    (root / "recipes").mkdir(parents=True)
    shutil.copy(REPO / "pins.yaml", root / "pins.yaml")
    shutil.copy(REPO / "recipes" / "default.yaml", root / "recipes" / "default.yaml")
    shutil.copytree(REPO / "smoke" / "prompts", root / "smoke" / "prompts")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return root


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(root, *args, env={"XDG_CACHE_HOME": os.environ["XDG_CACHE_HOME"]}, timeout=120)


def small_recipe(name: str, *, description: str = "d", extra: str = "") -> str:
    return (f"schema: 1\nname: {name}\ndescription: {description}\nbackends: [cpu]\ncomponents:\n"
            f"  - name: llama\n    source: llama.cpp\n    targets: [llama-server]\n{extra}")


# --------------------------------------------------------------------------- terminal escapes and newlines

ESCAPES = '"\\e]0;owned\\a\\e[2J\\r\\u202eevil\\x9b"'


def test_escapes_in_a_recipe_description_are_shown_escaped(project):
    """Before: `recipes` and `plan` wrote the description raw: the window title set to 'owned'
    and the screen cleared."""
    (project / "recipes" / "esc.yaml").write_text(small_recipe("esc", description=ESCAPES))
    for args in (("recipes",), ("--recipe", "esc", "plan")):
        r = cli(project, "--workspace", str(project.parent / "ws"), *args)
        assert r.returncode == 0, r.stderr
        out = r.stdout + r.stderr
        assert not any(ch in out for ch in "\x1b\x07\r\u202e\x9b"), repr(out)
        assert "\\x1b]0;owned\\x07\\x1b[2J\\r\\u202eevil\\x9b" in out


def test_a_newline_in_a_path_cannot_forge_an_error_line(project, tmp_path):
    """Before: a newline in --workspace printed a second line starting with 'error:'."""
    ws = tmp_path / "ws\nerror: forged line"
    r = cli(project, "--workspace", str(ws), "--recipe", "nosuch", "plan")
    assert r.returncode == 2, r.stderr
    assert one_line_error(r).startswith("error: unknown recipe")
    r = cli(project, "--workspace", str(ws), "gc")
    assert r.returncode == 0, r.stderr
    assert "\nerror: forged" not in r.stdout + r.stderr and "ws\\nerror: forged line" in r.stdout


def forged(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("error: forged")]


def test_a_newline_in_a_value_of_a_block_stays_on_its_line(project, tmp_path):
    """Before: `--workspace "$(printf 'x\\nerror: forged line')" plan` printed a line
    `error: forged line` (the plan and the other tables were written as one text, its newlines
    kept); so did a recipe file whose name holds a newline in `recipes --names`. Now every
    block is written as lines, each escaped."""
    ws = tmp_path / "ws\nerror: forged line"
    r = cli(project, "--workspace", str(ws), "plan")
    assert r.returncode == 0, r.stderr
    assert not forged(r) and f"workspace  {tmp_path}/ws\\nerror: forged line" in r.stdout
    shutil.copy(project / "recipes" / "default.yaml", project / "recipes" / "x\nerror: forged.yaml")
    r = cli(project, "--workspace", str(tmp_path / "ws"), "recipes", "--names")
    assert r.returncode == 0, r.stderr
    assert not forged(r) and "x\\nerror: forged" in r.stdout.splitlines()


def test_a_newline_in_a_message_stays_on_its_line(project, tmp_path):
    """An error whose text holds the path: the one error line, the newline written as \\n."""
    out = tmp_path / "out\nerror: forged"
    out.write_text("a file")
    r = cli(project, "--workspace", str(tmp_path / "ws"), "bench", "--out", str(out))
    assert r.returncode == 14, r.stderr
    assert "out\\nerror: forged" in one_line_error(r)


def test_printable_escapes_controls_and_keeps_text():
    assert ui.printable("plain text, tabs\tand ünïcödé") == "plain text, tabs\tand ünïcödé"
    assert ui.printable("a\nb\x1b[2J\x00\x7f\x85") == "a\\nb\\x1b[2J\\x00\\x7f\\x85"
    assert ui.printable("a\nb\rc") == "a\\nb\\rc"


# --------------------------------------------------------------------------- credentials in a download URL

SECRET_URL = "https://user:s3cret-pw@example.invalid/files/headers-1.0.tar.gz"


def download_recipe(name: str, url: str) -> str:
    return small_recipe(name, extra=f"    downloads:\n      - name: headers\n        url: {url}\n"
                                    f"        sha256: {'a' * 64}\n")


@pytest.mark.parametrize("args", [("plan",), ("plan", "--json"), ("--offline", "fetch"), ("--offline", "build")])
def test_credentials_in_a_download_url_are_never_shown(project, tmp_path, args):
    """Before: `plan` printed https://user:s3cret-pw@... whole."""
    (project / "recipes" / "dl.yaml").write_text(download_recipe("dl", SECRET_URL))
    r = cli(project, "--workspace", str(tmp_path / "ws"), "--recipe", "dl", *args)
    # All but the recipe, and the bundled sccache put in the user's cache under its digest (a program, not a record).
    tools = tmp_path / "cache" / TOOLS_DIR
    written = [p for p in tmp_path.rglob("*") if p.is_file() and project not in p.parents and tools not in p.parents]
    everything = r.stdout + r.stderr + "".join(p.read_text(errors="replace") for p in written)
    assert "s3cret" not in everything and "user:" not in everything
    if args[0] == "plan":
        assert r.returncode == 0, r.stderr
        assert "https://***@example.invalid/files/headers-1.0.tar.gz" in r.stdout
        if "--json" in args:
            json.loads(r.stdout)
    else:
        assert r.returncode in (4, 7), r.stderr  # offline: not cached (4), or no compiler here (7)


def test_credentials_in_a_refused_download_url_are_not_shown(project):
    (project / "recipes" / "dl.yaml").write_text(download_recipe("dl", SECRET_URL + "?x=1"))
    r = cli(project, "--recipe", "dl", "plan")
    assert r.returncode == 2
    line = one_line_error(r)
    assert "s3cret" not in r.stderr and "not a plain https URL" in line


# --------------------------------------------------------------------------- messages of several lines


def test_a_bad_requirement_is_one_line(project):
    """Before: packaging's message with the requirement again and a caret line (3 lines)."""
    model = ("model:\n  name: m\n  file: m.gguf\n  sha256: " + "a" * 64 + "\n  parts: [m.gguf.part00]\n"
             "  pypi: {'evilpkg==1.0 --hash=sha256:00': '" + "0" * 64 + "'}\n")
    (project / "recipes" / "req.yaml").write_text(small_recipe("req", extra=model))
    r = cli(project, "--recipe", "req", "plan")
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert "is not a requirement" in line
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [line], r.stderr


def test_bench_expect_that_is_not_json_is_one_line(project, tmp_path):
    """Before: PyYAML's error with its context, 8 lines."""
    expect = tmp_path / "expect.json"
    expect.write_text('{"short": "a",\n  "long": [\n  }\n')
    r = cli(project, "--workspace", str(tmp_path / "ws"), "bench", "--expect", str(expect))
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert "--expect" in line and "not YAML/JSON (line " in line
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [line], r.stderr
