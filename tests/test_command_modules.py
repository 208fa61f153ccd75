"""A command is one module: placed in the command package, it is in --help, in the parser and
in shell completion with no other file touched, and the honest-flags test refuses to pass
until it declares the new command. Checked on a copy of the package, with a real new module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from _support import REPO

HELLO = '''"""``hello``: say hello (a command made by a test)."""

from __future__ import annotations

import argparse

from onebit_build.commands import Command

COMMAND = Command(name="hello", help="say hello to the tester")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="world", help="who to greet")


def run(opts, project, cmd) -> int:
    print(f"hello {opts.args['name']}")
    return 0
'''


def copy_with_hello(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(REPO / "onebit_build", root / "onebit_build", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pins.yaml", "pins.lock", "models.lock", "pyproject.toml"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, root / name)
    for folder in ("recipes", "patches", "smoke", "references", "tests"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    (root / "onebit_build" / "commands" / "hello.py").write_text(HELLO)
    return root


def tool(root: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root), "XDG_CACHE_HOME": str(cache), "ONEBIT_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "onebit_build", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_new_command_module_is_a_command_everywhere(tmp_path):
    root = copy_with_hello(tmp_path)
    cache = tmp_path / "cache"
    top = tool(root, "--help", cache=cache)
    assert top.returncode == 0 and "say hello to the tester" in top.stdout, top.stdout + top.stderr
    said = tool(root, "hello", "--name", "tests", cache=cache)
    assert said.returncode == 0 and said.stdout.strip() == "hello tests", said.stdout + said.stderr
    for shell in ("bash", "zsh", "fish"):
        script = tool(root, "completion", shell, cache=cache)
        assert script.returncode == 0 and "hello" in script.stdout and "--name" in script.stdout, shell
    # The same checks of the real package: the command is not there.
    assert "say hello" not in tool(REPO, "--help", cache=tmp_path / "cache2").stdout


def test_the_honest_flags_test_fails_for_an_undeclared_command(tmp_path):
    root = copy_with_hello(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'tests'}", "XDG_CACHE_HOME": str(tmp_path / "c")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n0", "-q",
                        "tests/test_honest_flags.py::test_every_command_is_in_the_test"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert "declare ['hello'] in REQUIRED or NO_ARGUMENTS" in r.stdout, r.stdout[-3000:]
