"""'verify --rebuild' on the real sources: every output compiled again without any cache, from
sources moved to another path, byte-identical to the build it checks.

Its own workspace (not the shared test workspace), so it runs beside the tests that take
that one in turn; the sources come from the user's and the test suite's workspaces where
they hold them."""

from __future__ import annotations

import pytest

from _support import cache_programs, ggml_only_project, run_cli, sources_from_workspaces
from onebit_build.checking import manifest as manifest_mod


@pytest.mark.slow
def test_uncached_rebuild_of_the_kernels_is_byte_identical(tmp_path):
    """Run on the default recipe's ggml part (the same compile commands; see ggml_only_project):
    the CPU kernels, libggml-base, whose version string once differed because the moved tree's
    git index called it dirty, and libggml, whose run path links the two. A tenth of the
    compile time of the whole recipe, whose other outputs need the same path maps and nothing
    else. Built by this run every time: a rebuild left by an earlier version of the tool says
    nothing about this one."""
    root = ggml_only_project(tmp_path / "project")
    ws = tmp_path / "ws"
    args = ("--workspace", str(ws), *sources_from_workspaces(ws))
    out = run_cli(root, *args, "build", timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    out = run_cli(root, *args, "verify", "--rebuild", timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sources moved to " + str(ws / "src-rebuild") in out.stderr and "no compiler cache" in out.stderr
    found = list((ws / "build-rebuild").glob("*/build-manifest.json"))
    assert len(found) == 1, found
    # built without any cache: ggml finds ccache or sccache on PATH by itself unless told not to
    assert cache_programs(found[0].parent) == set(), "the rebuild compiled through a compiler cache"
    n = len(manifest_mod.load_manifest(found[0]).components[0].outputs)
    assert n == 3 and f"{n}/{n} byte-identical" in out.stderr and "DIFFERENT" not in out.stderr, out.stderr[-3000:]
