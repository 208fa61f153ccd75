"""Fetch stage against real local git repositories, bundles and archives."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from _support import bare_mirror, git, make_repo
from onebit_build.spec.pins import Pin, SdistMirror
from onebit_build.core.errors import FetchError, IntegrityError
from onebit_build.sources.fetch import FetchRequest, fetch, safe_extract, sdist_git_store
from onebit_build.core.names import member_problem
from onebit_build.core.workspace import Workspace


def pin_for(name: str, commit: str, **kw) -> Pin:
    return Pin(name=name, url=f"https://example.invalid/{name}.git", commit=commit, **kw)


@pytest.fixture
def upstream(tmp_path):
    repo = tmp_path / "upstream"
    first = make_repo(repo, {"a.txt": "one\n"}, "first")
    second = make_repo(repo, {"a.txt": "two\n"}, "second")
    return repo, first, second


def test_fetch_from_mirror_dir_then_cache(tmp_path, upstream):
    repo, first, _ = upstream
    mirrors = tmp_path / "mirrors"
    bare_mirror(repo, mirrors, "src")
    ws = Workspace(root=tmp_path / "ws")
    res = fetch(FetchRequest(pin=pin_for("src", first), workspace=ws, mirror_dirs=(mirrors,), offline=True))
    assert res.commit == first and res.mirror_used.startswith("mirror-dir:")
    assert git(res.bare_repo, "cat-file", "-t", first) == "commit"
    again = fetch(FetchRequest(pin=pin_for("src", first), workspace=ws, offline=True))
    assert again.mirror_used == "cache" and again.commit == first


def test_fetch_from_bundle(tmp_path, upstream):
    repo, _, second = upstream
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    git(repo, "bundle", "create", str(mirrors / "src.bundle"), "--all")
    res = fetch(FetchRequest(pin=pin_for("src", second), workspace=Workspace(root=tmp_path / "ws"),
                             mirror_dirs=(mirrors,), offline=True))
    assert res.commit == second and res.mirror_used.endswith("src.bundle")


def test_a_shallow_mirror_without_the_pin_leaves_the_store_whole(tmp_path, upstream):
    """A shallow mirror (as an sdist's git store is) that lacks the pin gives all its refs;
    they must come with their shallow roots, or a later pin of one of them finds its commit
    "cached" without its boundary and the store reads as damaged."""
    from onebit_build.sources.fetch import store_damage
    from onebit_build.core.gitops import Git

    repo, first, second = upstream
    shallow = tmp_path / "m1" / "src.git"
    git(tmp_path, "clone", "-q", "--bare", "--depth=1", f"file://{repo}", str(shallow))
    other = tmp_path / "other"
    third = make_repo(other, {"b.txt": "three\n"}, "elsewhere")
    bare_mirror(other, tmp_path / "m2", "src")
    ws = Workspace(root=tmp_path / "ws")
    res = fetch(FetchRequest(pin=pin_for("src", third), workspace=ws, mirror_dirs=(tmp_path / "m1", tmp_path / "m2"),
                             offline=True))
    assert res.mirror_used.endswith("m2/src.git")
    again = fetch(FetchRequest(pin=pin_for("src", second), workspace=ws, offline=True))
    assert again.mirror_used == "cache"
    assert store_damage(Git(res.bare_repo, bare=True)) is None


def test_bundle_of_a_shallow_clone_is_explained(tmp_path, upstream):
    repo, _, second = upstream
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth=1", f"file://{repo}", str(shallow))
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    # git writes such a bundle without complaint; fetching from it fails for want of the parent
    subprocess.run(["git", "-C", str(shallow), "bundle", "create", str(mirrors / "src.bundle"), "--all"],
                   capture_output=True)
    assert (mirrors / "src.bundle").exists()
    with pytest.raises(FetchError) as e:
        fetch(FetchRequest(pin=pin_for("src", second), workspace=Workspace(root=tmp_path / "ws"),
                           mirror_dirs=(mirrors,), offline=True))
    msg = str(e.value)
    assert "src.bundle (" in msg and "shallow clone" in msg and "src.git" in msg


def test_commit_not_in_repository(tmp_path, upstream):
    repo, _, _ = upstream
    mirrors = tmp_path / "mirrors"
    bare_mirror(repo, mirrors, "src")
    missing = "1" * 40
    with pytest.raises(FetchError) as e:
        fetch(FetchRequest(pin=pin_for("src", missing), workspace=Workspace(root=tmp_path / "ws"),
                           mirror_dirs=(mirrors,), offline=True))
    assert "src" in str(e.value) and missing in str(e.value)


def test_offline_fails_fast_naming_what_is_missing(tmp_path):
    with pytest.raises(FetchError) as e:
        fetch(FetchRequest(pin=pin_for("nothing", "2" * 40), workspace=Workspace(root=tmp_path / "ws"), offline=True))
    msg = str(e.value)
    assert msg.startswith("offline: source nothing") and "--mirror-dir" in msg


def test_abbreviated_pin_is_resolved(tmp_path, upstream):
    repo, first, _ = upstream
    mirrors = tmp_path / "mirrors"
    bare_mirror(repo, mirrors, "src")
    res = fetch(FetchRequest(pin=pin_for("src", first[:9], abbreviated=True), workspace=Workspace(root=tmp_path / "ws"),
                             mirror_dirs=(mirrors,), offline=True))
    assert res.commit == first and res.resolved_from == first[:9]


def test_ambiguous_prefix_is_refused(tmp_path):
    # Make commits until two share a 4-hex prefix (a birthday collision in 16 bits).
    repo = tmp_path / "many"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    stream = io.StringIO()
    for i in range(1, 1500):
        msg = f"c{i}\n"
        stream.write(f"commit refs/heads/main\nmark :{i}\ncommitter T <t@example.invalid> 1700000000 +0000\n"
                     f"data {len(msg)}\n{msg}\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=stream.getvalue(), text=True, check=True)
    shas = git(repo, "rev-list", "main").split()
    seen: dict[str, str] = {}
    prefix = None
    for s in shas:
        if s[:4] in seen:
            prefix = s[:4]
            break
        seen[s[:4]] = s
    assert prefix, "no 4-hex collision among 1500 commits"
    mirrors = tmp_path / "mirrors"
    bare_mirror(repo, mirrors, "many")
    with pytest.raises(FetchError, match="ambiguous"):
        fetch(FetchRequest(pin=pin_for("many", prefix, abbreviated=True), workspace=Workspace(root=tmp_path / "ws"),
                           mirror_dirs=(mirrors,), offline=True))


@pytest.mark.parametrize("name,link,sym,hard,why", [
    ("/etc/passwd", None, False, False, "absolute path"),
    ("pkg/../../x", None, False, False, "'..'"),
    ("pkg/link", "../../outside", True, False, "escaping"),
    ("pkg/link", "/etc/shadow", True, False, "absolute"),
    ("pkg/ok", "sibling", True, False, None),
    ("pkg/dir/ok", "../sibling", True, False, None),
])
def test_check_member(name, link, sym, hard, why):
    got = member_problem(name, link=link, symlink=sym, hardlink=hard)
    if why is None:
        assert got is None
    else:
        assert got is not None and why in got


def _tar_with(tmp_path: Path, members: list[tarfile.TarInfo]) -> Path:
    p = tmp_path / "evil.tar.gz"
    with tarfile.open(p, "w:gz") as tar:
        for m in members:
            data = b"x" * m.size if m.isfile() else None
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
    return p


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_unsafe_archives_are_refused(tmp_path, kind):
    if kind == "absolute":
        m = tarfile.TarInfo(str(tmp_path / "escaped.txt"))
        m.size = 1
    elif kind == "dotdot":
        m = tarfile.TarInfo("top/../../escaped.txt")
        m.size = 1
    else:
        m = tarfile.TarInfo("top/link")
        m.type = tarfile.SYMTYPE
        m.linkname = "../../escaped.txt"
    ok = tarfile.TarInfo("top/fine.txt")
    ok.size = 1
    archive = _tar_with(tmp_path, [ok, m])
    dest = tmp_path / "out" / "deep"
    dest.mkdir(parents=True)
    with pytest.raises(IntegrityError, match="unsafe member"):
        safe_extract(archive, dest)
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "out" / "escaped.txt").exists()
    assert not any(dest.iterdir()), "nothing is extracted from a refused archive"


def test_sdist_sha256_mismatch_removes_the_file(tmp_path):
    # A real, small sdist from the package registry with a deliberately wrong pin.
    mirror = SdistMirror(package="six", version="1.16.0", sha256="0" * 64, git_dir=".git")
    ws = Workspace(root=tmp_path / "ws")
    with pytest.raises(IntegrityError) as e:
        sdist_git_store(mirror, ws=ws, offline=False, log=tmp_path / "log")
    # The index lists the file's hash; a mismatch is refused before any byte is downloaded.
    assert "not the pinned" in str(e.value) and "nothing was downloaded" in str(e.value)
    leftovers = [p for p in (ws.downloads).rglob("*") if p.is_file() and p.suffix in (".gz", ".tar", ".zip")]
    assert leftovers == []
