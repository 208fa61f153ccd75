"""The test command leaves behind only what it keeps on purpose, and the tool can see that:
passed tests' temporary folders go; the shared test workspaces are listed by 'gc' and
removed by 'gc --test-workspaces'."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from _support import REPO

INNER = """
def test_passes(tmp_path):
    (tmp_path / "build-output.bin").write_bytes(b"x" * 1_000_000)

def test_fails(tmp_path):
    (tmp_path / "kept-for-a-look.txt").write_text("x")
    assert False
"""


def test_a_passed_tests_temporary_folder_is_removed_a_failed_ones_kept(tmp_path):
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    root = tmp_path / "temproot"
    root.mkdir()
    env = {**os.environ, "PYTEST_DEBUG_TEMPROOT": str(root)}
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
                        "-n", "0", "-p", "no:cacheprovider", "-q", str(tmp_path / "test_inner.py")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    left = [p.name for p in root.rglob("*") if p.is_file()]
    assert left == ["kept-for-a-look.txt"], left


def _gc(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_TEST_WORKSPACE", "ONEBIT_WORKSPACE")}
    env.update({"XDG_CACHE_HOME": str(cache), "ONEBIT_ROOT": str(REPO), "PYTHONPATH": str(REPO)})
    return subprocess.run([sys.executable, "-m", "onebit_build", "--workspace", str(cache / "onebit-build"), "gc",
                           *args], env=env, capture_output=True, text=True, timeout=120)


def test_gc_lists_the_shared_test_workspaces_and_removes_them_when_asked(tmp_path):
    cache = tmp_path / "cache"
    (cache / "onebit-build").mkdir(parents=True)
    kept = [cache / "onebit-build-test", cache / "onebit-build-test-vulkan"]
    for ws in kept:
        (ws / "build" / "x").mkdir(parents=True)
        (ws / "build" / "x" / "libbig.so").write_bytes(b"b" * 2_000_000)
    lock = cache / "onebit-build-test.workspace.lock"
    lock.write_text("")
    r = _gc(cache)
    assert r.returncode == 0, r.stderr
    assert "kept the test command's workspaces (3.8 MiB)" in r.stderr and "gc --test-workspaces" in r.stderr
    assert all(str(p) in r.stderr for p in kept) and all(p.exists() for p in kept)
    r = _gc(cache, "--test-workspaces", "--dry-run")
    assert r.returncode == 0 and all(f"would remove {p}" in r.stderr for p in (*kept, lock)) and lock.exists()
    r = _gc(cache, "--test-workspaces")
    assert r.returncode == 0, r.stderr
    assert not any(p.exists() for p in (*kept, lock)) and (cache / "onebit-build").is_dir()
    assert "freed 3.8 MiB" in r.stdout, r.stdout
