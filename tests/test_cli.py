"""The command line: one clear error line with the remedy, exit codes, the workspace lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from _support import REPO, project_tree, run_cli, tiny_recipe


def test_hrx_on_says_plainly_when_unavailable(tmp_path):
    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: " + "a" * 40 + "\n", recipes={"default": tiny_recipe(name="default")})
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "--hrx", "on", "build")
    assert out.returncode == 12
    assert "not available in this version yet" in out.stderr


def test_config_errors_are_one_line_with_remedy(tmp_path):
    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: 12345\n", recipes={"default": tiny_recipe(name="default")})
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "build")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") or "error:" in out.stderr
    assert "sources.tiny.commit" in out.stderr and "abbreviated" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_recipe_lists_known_ones(tmp_path):
    root = project_tree(tmp_path / "p", pins="schema: 1\nsources:\n  tiny:\n    url: u\n    commit: " + "a" * 40 + "\n", recipes={"default": tiny_recipe(name="default")})
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "--recipe", "nope", "build")
    assert out.returncode == 2 and "unknown recipe 'nope'" in out.stderr and "default" in out.stderr


def test_second_concurrent_run_is_refused_naming_the_holder(tmp_path):
    ws = tmp_path / "ws"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from pathlib import Path
        from onebit_build.workspace import WorkspaceLock
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
