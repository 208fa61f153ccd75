"""``--fresh``: the real default build configured again from an empty build folder (as
``cmake --fresh``), giving the same bytes."""

from __future__ import annotations

import hashlib

import pytest

from _support import REPO, run_cli, shared_from_user
from conftest import workspace_for_tests

# Empties and rebuilds the default build folder that other tests run llama-server from.
pytestmark = [pytest.mark.slow, pytest.mark.shared_workspace(rebuilds_default=True)]


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fresh_build_reconfigures_from_an_empty_folder_and_gives_the_same_bytes(llama_server):
    ws = workspace_for_tests()
    bdir = llama_server.parent.parent
    cache = bdir / "CMakeCache.txt"
    before_cache = cache.stat()
    before_sha = _sha256(llama_server)
    leftover = bdir / "left-by-an-earlier-run.txt"
    leftover.write_text("a file no build writes\n")
    out = run_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "--fresh", "build", timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"--fresh: emptying {bdir}" in out.stderr and "configuring llama" in out.stderr
    assert "(up to date)" not in out.stderr
    assert not leftover.exists()  # the folder was emptied, not only the cache removed
    after_cache = cache.stat()
    assert (after_cache.st_ino, after_cache.st_mtime_ns) != (before_cache.st_ino, before_cache.st_mtime_ns)
    assert out.stdout.strip() == str(llama_server)
    assert _sha256(llama_server) == before_sha
    # The same bytes: the output line is not repeated, the manifest is named once.
    assert "8 output(s) up to date, see " in out.stderr
    again = run_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "build", timeout=600)
    assert again.returncode == 0 and "(up to date)" in again.stderr  # the next plain run reuses it
