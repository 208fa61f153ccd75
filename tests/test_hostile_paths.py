"""Paths a user gives that are loops of symbolic links, and run folders that are links: each
path input (options and environment) is one line naming where the path came from, exit 2, on
the real CLI with real links; ``gc`` removes a run folder that is a link and goes on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _support import REPO, one_line_error


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_WORKSPACE", "ONEBIT_ROOT", "ONEBIT_MIRROR_DIR")}
    return subprocess.run([sys.executable, "-m", "onebit_build", *args], capture_output=True, text=True,
                          cwd=REPO, env={**full, **(env or {})}, timeout=120)


@pytest.fixture
def loop(tmp_path) -> Path:
    """A real loop of symbolic links: ``a`` leads to ``b``, ``b`` back to ``a``."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


# (the option as the message names it, the arguments with LOOP where the path goes)
OPTIONS = [
    ("--workspace", ("--workspace", "LOOP", "plan")),
    ("--workspace", ("--workspace", "LOOP/below", "plan")),
    ("--root", ("--root", "LOOP", "plan")),
    ("--model", ("--model", "LOOP", "smoke")),
    ("--prefix", ("install", "--prefix", "LOOP")),
    ("--recipe", ("--recipe", "LOOP/r.yaml", "plan")),
    ("--out", ("bench", "--out", "LOOP")),
    ("--expect", ("bench", "--expect", "LOOP")),
    ("--prompts", ("bench", "--prompts", "LOOP")),
    ("--lock", ("bench", "--lock", "LOOP")),
    ("--junit", ("verify-run", "--working", "WS", "--junit", "LOOP")),
    ("--run-dir", ("smoke", "--run-dir", "LOOP")),
    ("--server", ("smoke", "--server", "LOOP")),
    ("--reference", ("verify", "--reference", "LOOP")),
    ("--write-reference", ("verify", "--write-reference", "LOOP")),
]


@pytest.mark.parametrize("flag, args", OPTIONS, ids=[" ".join(a) for _, a in OPTIONS])
def test_a_path_option_that_is_a_symlink_loop_is_one_line(tmp_path, loop, flag, args):
    """Before: RuntimeError: Symlink loop from Path.resolve() (exit 1, a traceback)."""
    ws = tmp_path / "ws"
    argv = [a.replace("LOOP", str(loop)).replace("WS", str(ws)) for a in args]
    if "--workspace" not in argv:
        argv = ["--workspace", str(ws), *argv]
    r = cli(*argv)
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert line.startswith(f"error: {flag} {loop}") and "a loop of symbolic links" in line, line
    assert not ws.exists()


@pytest.mark.parametrize("variable, says", [("ONEBIT_WORKSPACE", "$ONEBIT_WORKSPACE"),
                                            ("ONEBIT_ROOT", "$ONEBIT_ROOT"),
                                            ("XDG_CACHE_HOME", "the default workspace")])
def test_a_path_from_the_environment_that_is_a_symlink_loop_is_one_line(loop, variable, says):
    r = cli("plan", env={variable: str(loop)})
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert says in line and "a loop of symbolic links" in line, line


@pytest.mark.parametrize("args", [("--mirror-dir", "LOOP", "plan"), ("verify-run", "--working", "LOOP")])
def test_a_folder_option_that_is_a_symlink_loop_is_no_such_folder(tmp_path, loop, args):
    """Options checked for an existing folder first say it is not one (a loop is none)."""
    r = cli("--workspace", str(tmp_path / "ws"), *[a.replace("LOOP", str(loop)) for a in args])
    assert r.returncode == 2, r.stderr
    assert "no such" in one_line_error(r)



def test_gc_removes_a_run_folder_that_is_a_link_keeps_its_target_and_goes_on(tmp_path):
    """Before: "Cannot call rmtree on a symbolic link" at the first such run folder (exit 1);
    nothing after it was freed."""
    ws = tmp_path / "ws"
    runs = ws / "runs"
    runs.mkdir(parents=True)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("not the workspace's")
    (runs / "20240101-000000-a").symlink_to(target)
    for i in range(1, 9):
        (runs / f"20240101-00000{i}-b").mkdir()
        (runs / f"20240101-00000{i}-b" / "log.txt").write_text("x" * 1000)
    r = cli("--workspace", str(ws), "gc")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert not (runs / "20240101-000000-a").is_symlink() and (target / "keep.txt").read_text() == "not the workspace's"
    assert sorted(p.name for p in runs.iterdir()) == [f"20240101-00000{i}-b" for i in range(4, 9)]
    assert "in 4 folder(s)" in r.stdout, r.stdout
