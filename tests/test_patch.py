"""Patch stage against real git repositories and real patch series."""

from __future__ import annotations

from pathlib import Path

import pytest

from _support import git, make_patch, make_repo
from onebit_build.spec.pins import Pin
from onebit_build.core.errors import PatchError
from onebit_build.sources.fetch import FetchRequest, fetch
from onebit_build.sources.patch import (PrepareRequest, canonical_path, export_series, list_patches, patch_digest,
                                         prepare)
from onebit_build.core.workspace import Workspace


@pytest.fixture
def series(tmp_path):
    """An upstream repo at a pinned commit plus a two-patch series made against it."""
    up = tmp_path / "up"
    base = make_repo(up, {"src/a.c": "int a = 1;\n", "README": "x\n"}, "base")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(up), str(work))
    pdir = tmp_path / "patches" / "src"
    make_patch(work, base, {"src/a.c": "int a = 2;\n"}, "change a", pdir, 1)
    make_patch(work, base, {"src/b.c": "int b = 3;\n"}, "add b", pdir, 2)
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    git(up, "bundle", "create", str(mirrors / "src.bundle"), "--all")
    return base, tmp_path / "patches", mirrors


def prep(tmp_path: Path, ws_name: str, base: str, patches_root: Path, mirrors: Path):
    ws = Workspace(root=tmp_path / ws_name)
    f = fetch(FetchRequest(pin=Pin(name="src", url="https://example.invalid/src.git", commit=base), workspace=ws,
                           mirror_dirs=(mirrors,), offline=True))
    return ws, PrepareRequest(source="src", commit=f.commit, bare_repo=f.bare_repo,
                              patches=list_patches(patches_root, "src"), workspace=ws)


def test_patches_apply_in_order_deterministically(tmp_path, series):
    base, patches_root, mirrors = series
    ws1, req1 = prep(tmp_path, "ws1", base, patches_root, mirrors)
    t1 = prepare(req1)
    assert (t1.path / "src" / "a.c").read_text() == "int a = 2;\n" and (t1.path / "src" / "b.c").exists()
    assert t1.path == canonical_path(ws1, "src", base, patch_digest(base, req1.patches))
    assert git(t1.path, "log", "--format=%s", "-3").splitlines() == ["add b", "change a", "base"]
    # Another workspace, same inputs: the same patched commit.
    _, req2 = prep(tmp_path, "ws2", base, patches_root, mirrors)
    t2 = prepare(req2)
    assert t2.head == t1.head and not t2.reused
    # Same workspace again: reused, no work.
    t3 = prepare(req1)
    assert t3.reused and t3.head == t1.head


def test_dirty_tree_is_not_reused_and_changes_are_kept(tmp_path, series):
    base, patches_root, mirrors = series
    ws, req = prep(tmp_path, "ws", base, patches_root, mirrors)
    t1 = prepare(req)
    (t1.path / "src" / "a.c").write_text("int a = 99;\n")
    t2 = prepare(req)
    assert not t2.reused and (t2.path / "src" / "a.c").read_text() == "int a = 2;\n"
    kept = [p for p in t1.path.parent.iterdir() if ".changed-" in p.name]
    assert len(kept) == 1 and (kept[0] / "src" / "a.c").read_text() == "int a = 99;\n"


def test_failing_patch_names_patch_and_file_and_leaves_nothing(tmp_path, series):
    base, patches_root, mirrors = series
    bad = patches_root / "src" / "0003-broken.patch"
    text = (patches_root / "src").glob("0001-*.patch").__next__().read_text()
    bad.write_text(text.replace("change a", "broken"))  # same hunk again: no longer applies
    ws, req = prep(tmp_path, "ws", base, patches_root, mirrors)
    with pytest.raises(PatchError) as e:
        prepare(req)
    msg = str(e.value)
    assert "0003-broken.patch" in msg and "src/a.c" in msg and "regenerate" in msg
    assert not ws.src_dir.exists() or list(ws.src_dir.iterdir()) == []


def test_bad_patch_names(tmp_path):
    d = tmp_path / "patches" / "s"
    d.mkdir(parents=True)
    (d / "fix.patch").write_text("")
    with pytest.raises(PatchError, match="NNNN-name.patch"):
        list_patches(tmp_path / "patches", "s")
    (d / "fix.patch").unlink()
    (d / "0001-a.patch").write_text("")
    (d / "0001-b.patch").write_text("")
    with pytest.raises(PatchError, match="used twice"):
        list_patches(tmp_path / "patches", "s")


def test_export_round_trip(tmp_path, series):
    base, patches_root, mirrors = series
    ws, req = prep(tmp_path, "ws", base, patches_root, mirrors)
    tree = prepare(req)
    make_repo(tree.path, {"src/c.c": "int c;\n"}, "add c")
    out = tmp_path / "exported"
    written = export_series(tree, out)
    assert [p.name for p in written] == ["0001-change-a.patch", "0002-add-b.patch", "0003-add-c.patch"]
    # The exported series prepares a tree with the same content.
    req2 = PrepareRequest(source="src", commit=req.commit, bare_repo=req.bare_repo,
                          patches=list_patches(tmp_path, "exported"), workspace=ws)
    t2 = prepare(req2)
    assert (t2.path / "src" / "c.c").read_text() == "int c;\n"
