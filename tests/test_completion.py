"""Completion scripts made from the parser, checked by the real shells: bash runs its
completion function, fish its 'complete -C', zsh parses the script."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _support import REPO

BIN = str(Path(sys.executable).parent)  # onebit-build itself: the completion calls it for recipe names
RECIPES = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))


def env() -> dict[str, str]:
    return {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "ONEBIT_ROOT": str(REPO)}


def script(shell: str) -> str:
    out = subprocess.run([sys.executable, "-m", "onebit_build", "completion", shell], capture_output=True, text=True,
                         env=env(), timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def bash_complete(words: list[str]) -> list[str]:
    """What bash offers for the last of ``words`` (COMP_WORDS as a terminal would give them)."""
    quoted = " ".join(f"'{w}'" for w in words)
    prog = (f"source /dev/stdin; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
            f"_shtab_onebit_build onebit-build '{words[-1]}' '{words[-2]}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run(["bash", "-c", prog], input=script("bash"), capture_output=True, text=True, env=env(),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_bash_completes_recipe_names_commands_and_sub_actions():
    assert bash_complete(["onebit-build", "--recipe", ""]) == RECIPES
    assert bash_complete(["onebit-build", "build", "--recipe", "v"]) == ["vulkan"]
    assert set(bash_complete(["onebit-build", "bu"])) == {"build", "builds"}
    assert bash_complete(["onebit-build", "pins", ""]) == ["lock"]
    assert bash_complete(["onebit-build", "patches", ""]) == ["export"]
    assert "--prefix" in bash_complete(["onebit-build", "install", "--"])
    assert "--prefix" not in bash_complete(["onebit-build", "serve", "--"])


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (system-packages.txt has it)")
def test_fish_completes_recipe_names():
    prog = "source; complete -C 'onebit-build --recipe '"
    out = subprocess.run(["fish", "-c", prog], input=script("fish"), capture_output=True, text=True, env=env(),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(line.split("\t")[0] for line in out.stdout.splitlines()) == RECIPES


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (system-packages.txt has it)")
def test_zsh_script_parses_and_names_every_command():
    text = script("zsh")
    check = subprocess.run(["zsh", "-n"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    from onebit_build.commands import commands

    assert [c.name for c in commands() if f"    {c.name}:'" not in text] == []
