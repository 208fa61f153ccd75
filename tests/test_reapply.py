"""Re-applying a patch series to a new commit: each patch's outcome (applies, applies with
offset, applied three-way, now empty, conflicts with the file and hunk), on real small git
repositories made here; the series to build applies to the new commit as the patch stage
applies it."""

from __future__ import annotations

from pathlib import Path

import pytest

from _support import bare_mirror, git, make_patch, make_repo
from onebit_build.sources.patch import list_patches
from onebit_build.sources.reapply import (APPLIES, CONFLICTS, EMPTY, OFFSET, THREE_WAY, ReapplyRequest, failing_hunks,
                                           offsets, patch_hunks, reapply)


def lines(n: int, prefix: str = "line", **changed: str) -> str:
    out = [f"{prefix} {i}" for i in range(1, n + 1)]
    for k, v in changed.items():
        out[int(k.removeprefix("l")) - 1] = v
    return "\n".join(out) + "\n"


BASE = {"a.txt": lines(30), "b.txt": lines(12), "c.txt": "x\n", "d.txt": lines(5, "d"), "e.txt": lines(5, "e")}


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """An old commit, a patch series made on it, and a new upstream commit that moves one
    patch's lines, changes another's context, already holds a third and clashes with a fourth."""
    tmp = tmp_path_factory.mktemp("reapply")
    repo = tmp / "repo"
    old = make_repo(repo, BASE)
    git(repo, "checkout", "-q", "-b", "series")
    out = tmp / "patches" / "src"
    make_patch(repo, old, {"d.txt": lines(5, "d", l2="d two")}, "touch d", out, 1)
    make_patch(repo, old, {"a.txt": lines(30, l20="line 20 patched")}, "touch a 20", out, 2)
    make_patch(repo, old, {"b.txt": lines(12, l8="line 8 patched")}, "touch b 8", out, 3)
    make_patch(repo, old, {"c.txt": "y\n"}, "c becomes y", out, 4)
    make_patch(repo, old, {"a.txt": lines(30, l20="line 20 patched", l27="line 27 ours")}, "touch a 27", out, 5)
    make_patch(repo, old, {"e.txt": lines(5, "e", l3="e three")}, "touch e", out, 6)
    git(repo, "checkout", "-q", "main")
    upstream = "".join(f"new {i}\n" for i in range(1, 6)) + lines(30, l27="line 27 theirs")
    new = make_repo(repo, {"a.txt": upstream, "b.txt": lines(12, l5="line 5 upstream"), "c.txt": "y\n"}, "upstream")
    bare = bare_mirror(repo, tmp / "mirrors", "src")
    return bare, old, new, tmp


def test_each_patch_gets_its_outcome(series):
    bare, old, new, tmp = series
    got = reapply(ReapplyRequest(source="src", bare_repo=bare, old=old, new=new,
                                 patches=list_patches(tmp / "patches", "src"), work=tmp / "work1"))
    status = {o.patch[:4]: o.status for o in got.outcomes}
    assert status == {"0001": APPLIES, "0002": OFFSET, "0003": THREE_WAY, "0004": EMPTY, "0005": CONFLICTS,
                      "0006": APPLIES}
    detail = {o.patch[:4]: o.detail for o in got.outcomes}
    assert detail["0002"] == ("a.txt hunk 1: +5 lines",)
    assert detail["0003"] == ("b.txt hunk 1/1 (@@ -5,7 +5,7 @@ line 4)",)
    assert detail["0005"][0] == "a.txt hunk 1/1 (@@ -24,7 +24,7 @@ line 23)"
    assert "a.txt: in conflict after the three-way merge" in detail["0005"]
    assert not got.ok and "tried without it" in got.note
    # Only the three-way patch is written again; the empty one is left out of the series to build.
    assert set(got.changed) == {"0003-touch-b-8.patch", "0004-c-becomes-y.patch"}
    assert got.changed["0004-c-becomes-y.patch"] is None
    assert not (tmp / "work1").exists()  # the scratch checkout is gone


def test_a_user_with_no_git_identity_gets_the_same_outcomes(series, tmp_path, monkeypatch):
    """Before: 'git am --abort' after the conflicting patch wanted a committer identity, failed
    on a machine whose git has none, and left the merge in place, so 0006 'conflicted' too."""
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tuseConfigOnly = true\n")  # no name or e-mail guessed from the host
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    bare, old, new, tmp = series
    got = reapply(ReapplyRequest(source="src", bare_repo=bare, old=old, new=new,
                                 patches=list_patches(tmp / "patches", "src"), work=tmp_path / "work"))
    status = {o.patch[:4]: o.status for o in got.outcomes}
    assert status == {"0001": APPLIES, "0002": OFFSET, "0003": THREE_WAY, "0004": EMPTY, "0005": CONFLICTS,
                      "0006": APPLIES}


def test_the_series_to_build_applies_as_the_patch_stage_applies_it(series):
    """The new series (unchanged patches as they are, the three-way one written again, the
    empty and the conflicting ones out) applies to the new commit with 'git am' alone."""
    bare, old, new, tmp = series
    patches = [p for p in list_patches(tmp / "patches", "src") if not p.name.startswith("0005")]
    got = reapply(ReapplyRequest(source="src", bare_repo=bare, old=old, new=new, patches=tuple(patches),
                                 work=tmp / "work2"))
    assert got.ok and "tried without" not in got.note
    staged = tmp / "staged"
    staged.mkdir()
    for p in patches:
        data = got.changed.get(p.name, p.path.read_bytes())
        if data is not None:
            (staged / p.name).write_bytes(data)
    check = tmp / "check"
    git(tmp, "clone", "-q", str(bare), str(check))
    git(check, "checkout", "-q", "--detach", new)
    git(check, "am", "-q", "--no-3way", *sorted(str(p) for p in staged.iterdir()))
    assert (check / "b.txt").read_text() == lines(12, l5="line 5 upstream", l8="line 8 patched")
    assert (check / "a.txt").read_text().startswith("new 1\n") and "line 20 patched" in (check / "a.txt").read_text()


def test_a_conflict_names_the_hunk_even_without_a_merge_base(tmp_path):
    """A patch whose blobs are in neither commit (made elsewhere) cannot be merged: its
    failing hunk is still named."""
    repo = tmp_path / "repo"
    old = make_repo(repo, {"f.txt": lines(10)})
    new = make_repo(repo, {"f.txt": lines(10, l5="five upstream")}, "upstream")
    other = tmp_path / "other"
    make_repo(other, {"f.txt": lines(10, l5="five elsewhere")})
    patch = make_patch(other, "", {"f.txt": lines(10, l5="five patched")}, "elsewhere", tmp_path / "p" / "s", 1)
    bare = bare_mirror(repo, tmp_path / "mirrors", "s")
    got = reapply(ReapplyRequest(source="s", bare_repo=bare, old=old, new=new,
                                 patches=list_patches(tmp_path / "p", "s"), work=tmp_path / "work"))
    (o,) = got.outcomes
    assert o.status == CONFLICTS and o.patch == patch.name
    assert o.detail[0] == "f.txt hunk 1/1 (@@ -2,7 +2,7 @@ line 1)"
    assert "neither commit" in o.detail[-1] and "does not apply to the old commit" in got.note


# --------------------------------------------------------------------------- pure readers of patches and git


PATCH = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
Subject: [PATCH] x

diff --git a/src/a.c b/src/a.c
index 1..2 100644
--- a/src/a.c
+++ b/src/a.c
@@ -10,6 +10,7 @@ int f(void)
 x
@@ -40,3 +41,4 @@
 y
diff --git a/b.txt b/b.txt
--- a/b.txt
+++ b/b.txt
@@ -1 +1 @@
-a
+b
"""


def test_hunks_are_read_per_file():
    hunks = patch_hunks(PATCH)
    assert [(h.file, h.number, h.of, h.old_start) for h in hunks] == [("src/a.c", 1, 2, 10), ("src/a.c", 2, 2, 40),
                                                                     ("b.txt", 1, 1, 1)]
    assert hunks[0].label() == "src/a.c hunk 1/2 (@@ -10,6 +10,7 @@ int f(void))"


def test_git_messages_name_the_failing_hunks_and_the_offsets():
    err = ("error: patch failed: src/a.c:40\nerror: src/a.c: patch does not apply\n"
           "error: gone.c: does not exist in index\n")
    assert failing_hunks(err, patch_hunks(PATCH)) == ["src/a.c hunk 2/2 (@@ -40,3 +41,4 @@)",
                                                      "gone.c (not in the new commit)"]
    verbose = "Checking patch src/a.c...\nHunk #2 succeeded at 52 (offset 12 lines).\nChecking patch b.txt...\n"
    assert offsets(verbose) == ["src/a.c hunk 2: +12 lines"]
    assert offsets("Checking patch x...\nHunk #1 succeeded at 3 (offset -1 line).") == ["x hunk 1: -1 lines"]


def test_paths_are_absolute_for_git(series, monkeypatch):
    """The series is given relative to the current folder; git runs in the scratch one."""
    bare, old, new, tmp = series
    monkeypatch.chdir(tmp)
    got = reapply(ReapplyRequest(source="src", bare_repo=bare, old=old, new=new,
                                 patches=list_patches(Path("patches"), "src")[:1], work=tmp / "work3"))
    assert [o.status for o in got.outcomes] == [APPLIES]
