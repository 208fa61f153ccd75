"""A global flag is honoured by every command or refused with exit 2, never ignored; the hint
of a malformed -D is made from the recipe and works. The real CLI on the project's recipes."""

from __future__ import annotations

import re
import shlex

import pytest

from _support import REPO, run_cli
from onebit_build.commands.parser import make_parser
from onebit_build.commands import commands

DRY_RUN_USERS = [c.name for c in commands() if c.dry_run]

# The arguments each command needs to get past its own parser (none of them is run for real:
# the refused ones stop before anything starts).
REQUIRED = {
    "install": ["--prefix", "PREFIX"],
    "verify-run": ["--working", "WORKING"],
    "verify-provenance": ["PATH"],
    "patches": ["export", "llama"],
    "pins": ["lock"],
    "completion": ["bash"],
    "model": ["pull"],
    "publish": ["oci://127.0.0.1:9/builds"],
}


def every_command() -> list[str]:
    parser = make_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(subs.choices)


# The commands that get past their own parser with no argument of their own.
NO_ARGUMENTS = {"fetch", "patch", "build", "smoke", "all", "verify", "plan", "recipes", "doctor", "serve", "bench",
                "builds", "location", "gc"}


def test_every_command_is_in_the_test():
    """Every command the parser has is declared here, with the arguments it cannot go without
    (REQUIRED) or none (NO_ARGUMENTS), and the declaration holds for the real parser: a new
    command makes this test fail until it is declared, and so gets every test below."""
    commands = set(every_command())
    undeclared = commands - set(REQUIRED) - NO_ARGUMENTS
    assert not undeclared, f"declare {sorted(undeclared)} in REQUIRED or NO_ARGUMENTS of this test"
    assert not (set(REQUIRED) | NO_ARGUMENTS) - commands, "a declared command is gone from the parser"
    for command in sorted(commands):
        make_parser([command]).parse_args([command, *REQUIRED.get(command, [])])
        if command in REQUIRED:
            with pytest.raises(SystemExit):
                make_parser([command]).parse_args([command])


@pytest.mark.parametrize("command", every_command())
def test_dry_run_is_honoured_or_refused(command, tmp_path):
    ws = tmp_path / "ws"
    args = [a.replace("PREFIX", str(tmp_path / "prefix")).replace("WORKING", str(tmp_path))
            for a in REQUIRED.get(command, [])]
    out = run_cli(REPO, "--workspace", str(ws), "--dry-run", command, *args, timeout=120)
    if command in DRY_RUN_USERS or command == "plan":
        assert out.returncode == 0, out.stderr
        assert "plan" in (out.stdout + out.stderr).lower()
        assert not (ws / "build").exists() and not (tmp_path / "prefix").exists()
    else:
        assert out.returncode == 2, (out.returncode, out.stderr)
        assert out.stderr.strip().splitlines()[-1] == (
            f"error: --dry-run is not taken by '{command}' (drop it; it applies to: {', '.join(DRY_RUN_USERS)})")
        assert not (tmp_path / "prefix").exists() and not (ws / "runs").exists()


def test_model_is_refused_where_no_model_is_used(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--model", str(gguf), "build", "--dry-run")
    assert out.returncode == 2 and "--model is not taken by 'build'" in out.stderr


@pytest.mark.parametrize("recipe", ["default", "vulkan", "cuda", "strix-halo"])
def test_the_hint_of_a_malformed_define_works(recipe, tmp_path):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", recipe, "-D", "NO_EQUALS_SIGN", "plan")
    assert out.returncode == 2 and "expected NAME=VALUE" in out.stderr
    hint = re.search(r"\(e\.g\. (.*)\)\s*$", out.stderr.strip())
    assert hint, out.stderr
    examples = hint.group(1).split(" or ")
    assert examples and all(e.startswith("-D ") for e in examples)
    for example in examples:
        ran = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", recipe, *shlex.split(example), "plan")
        assert ran.returncode == 0, (example, ran.stderr)


BUILDERS = [c.name for c in commands() if c.builds]


@pytest.mark.parametrize("command", every_command())
def test_fresh_is_taken_by_the_commands_that_build_and_refused_elsewhere(command, tmp_path):
    ws = tmp_path / "ws"
    args = [a.replace("PREFIX", str(tmp_path / "prefix")).replace("WORKING", str(tmp_path))
            for a in REQUIRED.get(command, [])]
    # A recipe that is not there: a command that takes --fresh goes on and stops at the recipe.
    out = run_cli(REPO, "--workspace", str(ws), "--recipe", "no-such-recipe", "--fresh", command, *args, timeout=120)
    refusal = f"error: --fresh is not taken by '{command}' (drop it; it applies to: {', '.join(BUILDERS)})"
    if command in BUILDERS:
        assert refusal not in out.stderr and "no-such-recipe" in out.stderr, out.stderr
    else:
        assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == refusal, out.stderr
    assert not (ws / "build").exists()


def test_fresh_is_refused_where_nothing_is_built(tmp_path):
    (tmp_path / "llama-server").write_bytes(b"")  # a file, so that --server itself is taken
    for extra in (["--dry-run"], ["--server", str(tmp_path / "llama-server")]):
        out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--fresh", "smoke", *extra)
        assert out.returncode == 2 and f"--fresh is not taken with {extra[0]}: nothing is built" in out.stderr
