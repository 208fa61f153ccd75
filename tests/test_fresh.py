"""``--fresh``: a real build of the default recipe's ggml part (its own compile commands, see
``ggml_only_project``) configured again from an empty build folder (as ``cmake --fresh``),
giving the same bytes. In a workspace of its own: it empties no folder another test runs a
server from."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from _support import ggml_only_project, run_cli, sources_from_workspaces
from onebit_build.checking import manifest as manifest_mod

pytestmark = pytest.mark.slow


def _digests(man: manifest_mod.Manifest) -> dict[str, str]:
    """Each output's sha256, read from the file itself (not from the manifest)."""
    return {o.name: hashlib.sha256(open(o.path, "rb").read()).hexdigest() for o in man.components[0].outputs}


def test_fresh_build_reconfigures_from_an_empty_folder_and_gives_the_same_bytes(tmp_path):
    root = ggml_only_project(tmp_path / "project")
    ws = tmp_path / "ws"
    args = ("--workspace", str(ws), *sources_from_workspaces(ws))
    first = run_cli(root, *args, "build", timeout=1800)
    assert first.returncode == 0, first.stderr[-3000:]
    man = manifest_mod.load_latest(manifest_mod.Workspace(root=ws), "default")
    assert man is not None
    bdir = Path(man.components[0].build_dir)
    cache = bdir / "CMakeCache.txt"
    before_cache, before = cache.stat(), _digests(man)
    assert len(before) == 3
    leftover = bdir / "left-by-an-earlier-run.txt"
    leftover.write_text("a file no build writes\n")
    out = run_cli(root, *args, "--fresh", "build", timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"--fresh: emptying {bdir}" in out.stderr and "configuring llama" in out.stderr
    assert "(up to date)" not in out.stderr
    assert not leftover.exists()  # the folder was emptied, not only the cache removed
    after_cache = cache.stat()
    assert (after_cache.st_ino, after_cache.st_mtime_ns) != (before_cache.st_ino, before_cache.st_mtime_ns)
    again = manifest_mod.load_latest(manifest_mod.Workspace(root=ws), "default")
    assert again is not None and _digests(again) == before
    # The same bytes: the outputs are not listed again, the manifest is named once.
    assert "3 output(s) up to date, see " in out.stderr
    plain = run_cli(root, *args, "build", timeout=600)
    assert plain.returncode == 0 and "(up to date)" in plain.stderr  # the next plain run reuses it
