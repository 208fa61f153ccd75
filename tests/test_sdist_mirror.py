"""The sdist mirror: pinned bytes fetched from the package index that pip is configured
with, hashed before anything is unpacked or run, and a store that heals.

The packages are real sdists served from a local find-links folder (pip's own setting,
read through ``pip config list``), so the whole path runs as it does for a user."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from _support import git, make_repo, only_find_links
from onebit_build.spec.pins import Pin, SdistMirror
from onebit_build.core.errors import FetchError, IntegrityError
from onebit_build.sources.fetch import FetchRequest, fetch
from onebit_build.core.fsutil import sha256_file
from onebit_build.sources.pkgindex import (
    candidates_from_html,
    index_config_from,
    parse_pip_config,
    sdist_matches,
    wheel_matches,
)
from onebit_build.core.workspace import Workspace

PKG, VER = "demo-store", "1.0.0"
GIT_DIR = ".git/modules/vendor/demo"


@pytest.fixture
def index_dir(tmp_path, monkeypatch):
    """A find-links folder that is pip's only source for this test."""
    return only_find_links(monkeypatch, tmp_path / "index")


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **kw) -> None:
    info = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(info, k, v)
    if info.type == tarfile.REGTYPE:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def sdist_with_store(tmp_path: Path, out: Path) -> str:
    """A real sdist whose submodule git store holds a one-commit repository; returns the commit."""
    work = tmp_path / "demo-src"
    sha = make_repo(work, {"hello.txt": "hello\n"})
    bare = tmp_path / "demo-bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    top = f"{PKG.replace('-', '_')}-{VER}"
    with tarfile.open(out, "w:gz") as tar:
        _add(tar, f"{top}/PKG-INFO", b"Metadata-Version: 2.1\nName: demo-store\nVersion: 1.0.0\n")
        tar.add(bare, arcname=f"{top}/{GIT_DIR}")
    return sha


def hostile_sdist(out: Path, outside: Path, marker: Path, *, with_links: bool) -> None:
    """A tampered sdist: an in-tree build backend that leaves a marker the moment it is
    imported and, ``with_links``, an absolute symlink with a file written through it."""
    top = f"{PKG.replace('-', '_')}-{VER}"
    backend = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    backend += "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
    pyproject = b'[build-system]\nrequires = []\nbuild-backend = "evil"\nbackend-path = ["."]\n'
    with tarfile.open(out, "w:gz") as tar:
        _add(tar, f"{top}/PKG-INFO", b"Metadata-Version: 2.1\nName: demo-store\nVersion: 1.0.0\n")
        _add(tar, f"{top}/pyproject.toml", pyproject)
        _add(tar, f"{top}/evil.py", backend.encode())
        if with_links:
            _add(tar, f"{top}/escape", type=tarfile.SYMTYPE, linkname=str(outside))
            _add(tar, f"{top}/escape/planted.txt", b"planted\n")


def mirror_pin(sha: str, sha256: str) -> Pin:
    return Pin(name="demo", url="https://example.invalid/demo.git", commit=sha,
               mirrors=(SdistMirror(package=PKG, version=VER, sha256=sha256, git_dir=GIT_DIR),))


@pytest.mark.parametrize("with_links", [False, True], ids=["backend", "backend+links"])
def test_hostile_sdist_is_refused_before_anything_runs(tmp_path, index_dir, with_links):
    good = tmp_path / "good.tar.gz"
    sha = sdist_with_store(tmp_path, good)
    pinned = sha256_file(good)
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = tmp_path / "backend-ran"
    hostile_sdist(index_dir / f"{PKG.replace('-', '_')}-{VER}.tar.gz", outside, marker, with_links=with_links)

    if not with_links:
        # The sample is really hostile: pip, asked to download it the way the tool once
        # did, runs its build backend. (Recent pips refuse the absolute link of the other
        # sample while unpacking, so only this one can show it on every pip.)
        probe = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-index",
             "--find-links", str(index_dir), "-d", str(tmp_path / "pip-dl"), f"{PKG}=={VER}"],
            capture_output=True, text=True,
        )
        assert marker.exists(), f"the hostile sample did not run under pip: {probe.stderr[-500:]}"
        marker.unlink()

    ws = Workspace(root=tmp_path / "ws")
    with pytest.raises(IntegrityError) as e:
        fetch(FetchRequest(pin=mirror_pin(sha, pinned), workspace=ws))
    assert e.value.exit_code == 5
    assert "not the pinned" in str(e.value) and "nothing was unpacked or run" in str(e.value)
    assert not marker.exists(), "code from the tampered sdist ran"
    assert list(outside.iterdir()) == [], "a file was written outside the workspace"
    left = [p for p in ws.downloads.rglob("*") if p.is_file()]
    assert left == [], f"tampered bytes were kept: {left}"


def test_sdist_store_is_cached_under_the_pinned_hash(tmp_path, index_dir):
    archive = index_dir / f"{PKG.replace('-', '_')}-{VER}.tar.gz"
    sha = sdist_with_store(tmp_path, archive)
    pinned = sha256_file(archive)
    ws = Workspace(root=tmp_path / "ws")
    first = fetch(FetchRequest(pin=mirror_pin(sha, pinned), workspace=ws))
    assert first.mirror_used == f"pypi-sdist:{PKG}=={VER}" and first.archive_sha256 == pinned
    # Another pinned hash never reuses the store unpacked from these bytes.
    other = mirror_pin(sha, "1" * 64)
    ws2 = Workspace(root=tmp_path / "ws2")
    fetch(FetchRequest(pin=mirror_pin(sha, pinned), workspace=ws2))
    for bare in ws2.git_dir.iterdir():
        subprocess.run(["rm", "-rf", str(bare)], check=True)
    with pytest.raises(FetchError) as e:
        fetch(FetchRequest(pin=other, workspace=ws2, offline=True))
    assert e.value.exit_code == 4 and "not cached; offline" in str(e.value)
    # nothing is left for the pin that was never fetched: only the first pin's folder is there
    assert [d.name for d in ws2.downloads.iterdir()] == [f"{PKG}-{VER}-{pinned[:16]}"]


def _truncate_pack(store: Path) -> Path:
    packs = sorted(store.glob("objects/pack/*.pack"))
    if not packs:  # a loose-object store: pack it first so there is a pack to damage
        subprocess.run(["git", "--git-dir", str(store), "repack", "-adq"], check=True)
        packs = sorted(store.glob("objects/pack/*.pack"))
    pack = packs[0]
    with open(pack, "r+b") as f:
        f.truncate(pack.stat().st_size // 2)
    return pack


def test_damaged_workspace_git_store_heals(tmp_path, index_dir):
    archive = index_dir / f"{PKG.replace('-', '_')}-{VER}.tar.gz"
    sha = sdist_with_store(tmp_path, archive)
    pin = mirror_pin(sha, sha256_file(archive))
    ws = Workspace(root=tmp_path / "ws")
    fetch(FetchRequest(pin=pin, workspace=ws))
    _truncate_pack(ws.bare_repo("demo"))
    healed = fetch(FetchRequest(pin=pin, workspace=ws, offline=True))
    assert healed.commit == sha and healed.mirror_used.startswith("pypi-sdist:")
    assert git(ws.bare_repo("demo"), "fsck", "--no-dangling") == ""


def test_damaged_sdist_store_heals_from_the_kept_archive(tmp_path, index_dir, capsys):
    archive = index_dir / f"{PKG.replace('-', '_')}-{VER}.tar.gz"
    sha = sdist_with_store(tmp_path, archive)
    pin = mirror_pin(sha, sha256_file(archive))
    ws = Workspace(root=tmp_path / "ws")
    fetch(FetchRequest(pin=pin, workspace=ws))
    subprocess.run(["rm", "-rf", str(ws.bare_repo("demo"))], check=True)
    store = next(ws.downloads.glob(f"*/store/{GIT_DIR}"))
    _truncate_pack(store)
    archive.unlink()  # the index is gone too: healing must use the verified copy kept
    healed = fetch(FetchRequest(pin=pin, workspace=ws, offline=True))
    assert healed.commit == sha
    assert "is damaged" in capsys.readouterr().err


def test_damaged_mirror_dir_is_named_once_when_the_sdist_rescues_the_fetch(tmp_path, index_dir, capsys):
    archive = index_dir / f"{PKG.replace('-', '_')}-{VER}.tar.gz"
    sha = sdist_with_store(tmp_path, archive)
    other = tmp_path / "other"
    make_repo(other, {"README": "another history\n"})
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(other), str(mirrors / "demo.git")], check=True)
    _truncate_pack(mirrors / "demo.git")
    got = fetch(FetchRequest(pin=mirror_pin(sha, sha256_file(archive)), workspace=Workspace(root=tmp_path / "ws"),
                             mirror_dirs=(mirrors,)))
    assert got.commit == sha and got.mirror_used.startswith("pypi-sdist:")
    warned = [ln for ln in capsys.readouterr().err.splitlines() if str(mirrors / "demo.git") in ln]
    assert len(warned) == 1 and "is damaged" in warned[0] and "repair it (git fsck) or remove it" in warned[0], warned


def test_pip_config_scopes_and_environment():
    text = (
        "global.index-url='https://idx.example.invalid/simple'\n"
        "global.extra-index-url='file:///a/simple file:///b/simple'\n"
        "download.index-url='https://dl.example.invalid/simple'\n"
        ":env:.find-links='/opt/links'\n"
        "global.cert='/etc/ssl/ca.pem'\n"
    )
    settings = parse_pip_config(text)
    assert settings["index-url"] == "https://dl.example.invalid/simple"
    cfg = index_config_from(settings, {"PIP_PROXY": "http://proxy.example.invalid:3128"})
    assert cfg.extra_index_urls == ("file:///a/simple", "file:///b/simple")
    assert cfg.find_links == ("/opt/links",) and cfg.cert == "/etc/ssl/ca.pem"
    assert cfg.proxy == "http://proxy.example.invalid:3128"
    assert cfg.locations()[0] == "/opt/links"
    assert index_config_from(settings, {"PIP_INDEX_URL": "https://env.example.invalid/simple/"}).index_url == "https://env.example.invalid/simple"
    assert index_config_from({}, {"PIP_NO_INDEX": "yes", "PIP_FIND_LINKS": "/x"}).locations() == ("/x",)


def test_file_matching_and_index_pages():
    assert sdist_matches("llama_cpp_python-0.3.36.tar.gz", "llama-cpp-python", "0.3.36")
    assert not sdist_matches("llama_cpp_python-0.3.35.tar.gz", "llama-cpp-python", "0.3.36")
    assert not sdist_matches("llama_cpp_python_extra-0.3.36.tar.gz", "llama-cpp-python", "0.3.36")
    assert wheel_matches("gemma3_part1-1.0.0-py3-none-any.whl", "gemma3-part1", "1.0.0")
    assert not wheel_matches("gemma3_part1-1.0.0-cp311-cp311-linux_x86_64.whl", "gemma3-part1", "1.0.0")
    page = '<a href="../../files/demo_store-1.0.0.tar.gz#sha256=' + "ab" * 32 + '">demo_store-1.0.0.tar.gz</a>'
    (c,) = candidates_from_html(page, "https://idx.example.invalid/simple/demo-store/")
    assert c.url == "https://idx.example.invalid/files/demo_store-1.0.0.tar.gz" and c.sha256 == "ab" * 32
