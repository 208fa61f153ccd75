"""Configure-time downloads: declared in the recipe, fetched by the tool, checked, handed to CMake.

A real tar.gz made here stands for the HSA headers archive; a real CMake project makes the
same kind of download as ROCm/hrx's headers.cmake (FetchContent URL + URL_HASH, populated
with the single-argument form) and fails unless the tool's override is given."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from onebit_build.sources.downloads import (
    DISCONNECTED,
    check_against_lock,
    cmake_defines,
    locked_dependency,
    provide,
    provide_all,
)
from onebit_build.spec.recipe import Component, Recipe
from onebit_build.spec.downloads_spec import DownloadSpec, load_downloads
from onebit_build.core.errors import ConfigError, FetchError, IntegrityError
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.workspace import Workspace
from onebit_build.spec.yamlnode import Node

URL = "https://example.invalid/iree-org/hsa-runtime-headers/archive/4285513114a70f7cf4830c89279c8cfa57b901bb.tar.gz"


def archive(dest: Path, text: bytes = b"int hsa_init(void);\n") -> tuple[Path, str]:
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / URL.rsplit("/", 1)[1]
    with tarfile.open(out, "w:gz") as tar:
        info = tarfile.TarInfo("hsa-runtime-headers-4285513/include/hsa/hsa.h")
        info.size, info.mtime = len(text), 0
        tar.addfile(info, io.BytesIO(text))
    return out, sha256_file(out)


def spec(sha: str, **kw) -> DownloadSpec:
    return DownloadSpec(name="hsa_runtime_headers", url=URL, sha256=sha, **kw)


def recipe_with(*specs: DownloadSpec) -> Recipe:
    comps = (
        Component(name="rt", source="hrx", targets=("t",), downloads=specs),
        Component(name="ll", source="hrx", targets=("t",), downloads=specs),
    )
    return Recipe(path=Path("/r/strix-halo.yaml"), name="strix-halo", description="", backends=(), components=comps)


def test_from_a_mirror_dir_checked_unpacked_and_cached(tmp_path):
    mirror = tmp_path / "mirror"
    _, sha = archive(mirror)
    ws = Workspace(root=tmp_path / "ws")
    tree = provide(spec(sha), ws, (mirror,), offline=True)
    # FetchContent strips the one top folder: the tree holds include/ directly.
    assert tree is not None and (tree / "include" / "hsa" / "hsa.h").read_bytes() == b"int hsa_init(void);\n"
    shutil.rmtree(mirror)
    assert provide(spec(sha), ws, (), offline=True) == tree  # from the cache, no mirror needed
    comp = Component(name="rt", source="hrx", targets=("t",), downloads=(spec(sha),))
    assert cmake_defines(comp, {"hsa_runtime_headers": tree}) == (
        ("FETCHCONTENT_SOURCE_DIR_HSA_RUNTIME_HEADERS", str(tree)),
        DISCONNECTED,
    )


def test_a_mirror_file_with_other_bytes_is_refused(tmp_path):
    mirror = tmp_path / "mirror"
    _, sha = archive(mirror)
    archive(mirror, b"int hsa_init(int);\n")  # same name, other bytes
    with pytest.raises(IntegrityError) as exc:
        provide(spec(sha), Workspace(root=tmp_path / "ws"), (mirror,), offline=True)
    assert exc.value.exit_code == 5 and f"not the pinned {sha}" in str(exc.value)
    assert not list((tmp_path / "ws").rglob("hsa.h"))


def test_offline_names_every_missing_download_at_once(tmp_path):
    _, sha = archive(tmp_path / "elsewhere")
    other = DownloadSpec(name="zstd", url="https://example.invalid/zstd-1.5.7.tar.gz", sha256="e" * 64)
    with pytest.raises(FetchError) as exc:
        provide_all(recipe_with(spec(sha), other), Workspace(root=tmp_path / "ws"), (), offline=True)
    text = str(exc.value)
    assert exc.value.exit_code == 4 and "\n" not in text
    assert (
        f"hsa_runtime_headers ({URL}, sha256 {sha})" in text
        and "zstd (https://example.invalid/zstd-1.5.7.tar.gz" in text
    )
    assert "4285513114a70f7cf4830c89279c8cfa57b901bb.tar.gz, zstd-1.5.7.tar.gz in a --mirror-dir" in exc.value.hint


LOCK = (
    f'set(IREE_DEP_HSA_RUNTIME_HEADERS_URLS\n  "{URL}"\n)\n'
    'set(IREE_DEP_HSA_RUNTIME_HEADERS_SHA256 "a906b35e77b9cee074995d144cf7718a0069eba08ba7bc741ee7576950fde923")\n'
)


def test_the_pinned_trees_lock_is_compared(tmp_path):
    assert locked_dependency(LOCK, "hsa_runtime_headers") == (
        (URL,),
        "a906b35e77b9cee074995d144cf7718a0069eba08ba7bc741ee7576950fde923",
    )
    assert locked_dependency(LOCK, "zstd") is None
    (tmp_path / "MODULE.cmake.lock").write_text(LOCK)
    good = Component(
        name="rt",
        source="hrx",
        targets=("t",),
        downloads=(spec("a906b35e77b9cee074995d144cf7718a0069eba08ba7bc741ee7576950fde923", lock="MODULE.cmake.lock"),),
    )
    check_against_lock(good, tmp_path)
    bad = Component(name="rt", source="hrx", targets=("t",), downloads=(spec("b" * 64, lock="MODULE.cmake.lock"),))
    with pytest.raises(ConfigError) as exc:
        check_against_lock(bad, tmp_path)
    assert "the pinned tree's MODULE.cmake.lock asks for hsa_runtime_headers" in str(exc.value) and "b" * 64 in str(
        exc.value
    )


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"name": "hsa headers", "url": URL, "sha256": "a" * 64}, "is not a FetchContent name"),
        ({"name": "h", "url": "http://example.invalid/h.tar.gz", "sha256": "a" * 64}, "is not a plain https URL"),
        ({"name": "h", "url": URL + "?x=$(id)", "sha256": "a" * 64}, "is not a plain https URL"),
        ({"name": "h", "url": "https://example.invalid/", "sha256": "a" * 64}, "does not end in a file name"),
        ({"name": "h", "url": URL}, "sha256"),
        ({"name": "h", "url": URL, "sha256": "A" * 64}, "is not 64 lower-case hex digits"),
        ({"name": "h", "url": URL, "sha256": "a" * 64, "lock": "../x"}, "must be a relative path"),
    ],
)
def test_a_hostile_or_incomplete_entry_is_refused_at_load(tmp_path, entry, problem):
    with pytest.raises(ConfigError) as exc:
        load_downloads(Node(tmp_path / "r.yaml", "components[0]", {"downloads": [entry]}))
    assert problem in str(exc.value) and "components[0].downloads[0]" in str(exc.value)


# A CMake project that downloads at configure time the way ROCm/hrx's headers.cmake does.
STANDIN = """\
cmake_minimum_required(VERSION 3.26...4.2)
project(download_standin NONE)
include(FetchContent)
FetchContent_Declare(hsa_runtime_headers URL "@URL@" URL_HASH SHA256=@SHA@ DOWNLOAD_EXTRACT_TIMESTAMP FALSE)
FetchContent_GetProperties(hsa_runtime_headers)
if(NOT hsa_runtime_headers_POPULATED)
  cmake_policy(PUSH)
  cmake_policy(SET CMP0169 OLD)
  FetchContent_Populate(hsa_runtime_headers)
  cmake_policy(POP)
endif()
file(READ "${hsa_runtime_headers_SOURCE_DIR}/include/hsa/hsa.h" _h)
message(STATUS "hsa.h: ${_h}")
"""


def test_cmake_downloads_nothing_once_given_the_tree(tmp_path):
    from onebit_build.building.cmake import find_tools

    mirror = tmp_path / "mirror"
    _, sha = archive(mirror)
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(STANDIN.replace("@URL@", URL).replace("@SHA@", sha))
    cmake = str(find_tools().cmake)
    # Disconnected without the tree, configure stops and names the download (reaching the
    # unreachable URL instead takes CMake's retries, ~85 s: tests/test_hrx_standins.py does that).
    plain = subprocess.run(
        [cmake, "-S", src, "-B", tmp_path / "b1", "-D" + "=".join(DISCONNECTED)], capture_output=True, text=True
    )
    assert plain.returncode != 0 and "dependency hsa_runtime_headers to already be populated" in " ".join(
        plain.stderr.split()
    )
    tree = provide(spec(sha), Workspace(root=tmp_path / "ws"), (mirror,), offline=True)
    comp = Component(name="rt", source="hrx", targets=("t",), downloads=(spec(sha),))
    given = [f"-D{k}={v}" for k, v in cmake_defines(comp, {"hsa_runtime_headers": tree})]
    done = subprocess.run([cmake, "-S", src, "-B", tmp_path / "b2", *given], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "hsa.h: int hsa_init(void);" in done.stdout


def test_plan_json_lists_each_download_of_the_strix_halo_recipe(tmp_path):
    import json

    from _support import REPO, run_cli

    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--hrx", "on", "plan", "--json", timeout=120)
    assert out.returncode == 0, out.stderr
    comps = {c["name"]: c for c in json.loads(out.stdout)["components"]}
    for name in ("hrx-runtime", "loom-link"):
        (d,) = comps[name]["downloads"]
        assert d["name"] == "hsa_runtime_headers" and d["lock"] == "MODULE.cmake.lock"
        assert d["url"].endswith("/hsa-runtime-headers/archive/4285513114a70f7cf4830c89279c8cfa57b901bb.tar.gz")
        assert d["sha256"] == "a906b35e77b9cee074995d144cf7718a0069eba08ba7bc741ee7576950fde923"
        assert d["places"][0].startswith(f"cache {tmp_path / 'ws'}/downloads/configure/")
        assert ["FETCHCONTENT_FULLY_DISCONNECTED", "ON"] in comps[name]["defines"]  # set in CMakeInit.txt
    assert comps["llama"]["downloads"] == []


def test_a_download_from_its_url_is_checked_and_a_dead_url_names_the_mirror_folder(tmp_path):
    """A real HTTP server on this machine serves the archive: fetched, checked, unpacked;
    other bytes at the URL are refused and leave nothing; a URL nobody answers is exit 4
    with the mirror folder as the way round."""
    import functools
    import http.server
    import threading

    def at(url: str, sha: str) -> DownloadSpec:
        return DownloadSpec(name="hsa_runtime_headers", url=url, sha256=sha)

    served = tmp_path / "served"
    _, sha = archive(served)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/{URL.rsplit('/', 1)[1]}"
        tree = provide(at(url, sha), Workspace(root=tmp_path / "ws"), (), offline=False)
        assert tree is not None and (tree / "include" / "hsa" / "hsa.h").is_file()
        with pytest.raises(IntegrityError) as exc:
            provide(at(url, "d" * 64), Workspace(root=tmp_path / "ws2"), (), offline=False)
        assert exc.value.exit_code == 5 and "is not the pinned " + "d" * 64 in str(exc.value)
        assert not [p for p in (tmp_path / "ws2").rglob("*") if p.is_file()]
    finally:
        httpd.shutdown()
        httpd.server_close()
    with pytest.raises(FetchError) as exc:
        provide(at(url, sha), Workspace(root=tmp_path / "ws3"), (), offline=False)
    assert exc.value.exit_code == 4 and "in a --mirror-dir" in exc.value.hint
