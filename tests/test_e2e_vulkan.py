"""End to end on the real thing: the vulkan recipe builds upstream llama.cpp with its
SPIR-V shaders, and verify proves them byte-identical to the committed reference made
with the same glslc (or says plainly that none matches)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from _support import REPO, ggml_only_project, run_cli, shared_from_user, stream_cli
from conftest import progress, vulkan_workspace_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.shared_workspace(workspace="vulkan")]


@pytest.fixture(scope="module")
def vulkan_build(pytestconfig):
    if shutil.which("glslc") is None:
        pytest.skip("glslc is not installed (apt-get install glslc libvulkan-dev spirv-headers)")
    ws = vulkan_workspace_for_tests()
    say = progress(pytestconfig)
    say(f"building the vulkan recipe in {ws} (reused when up to date)")
    rc, out = stream_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "--recipe", "vulkan", "build", say=say,
                         timeout=5400)
    assert rc == 0, out[-3000:]
    manifest = json.loads((ws / "manifests" / "vulkan.json").read_text())
    return ws, manifest


def _cli(ws, *args):
    return run_cli(REPO, "--workspace", str(ws), "--recipe", "vulkan", *args, timeout=600)


def test_vulkan_verify_against_committed_reference(vulkan_build):
    ws, manifest = vulkan_build
    aset = manifest["components"][0]["artifacts"][0]
    assert aset["kind"] == "spirv" and aset["count"] > 1000
    out = _cli(ws, "verify")
    if "no committed reference" in out.stderr:
        assert out.returncode == 0 and "verify   UNVERIFIED" in out.stderr  # as the default job's verify says it
        pytest.skip(f"no committed reference for this toolchain ({aset['facts'].get('glslc')}): "
                    f"{out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stderr
    n = aset["count"]
    assert f"Vulkan SPIR-V: {n}/{n} byte-identical" in out.stderr


def test_vulkan_flipped_shader_byte_is_caught(vulkan_build):
    ws, manifest = vulkan_build
    aset = manifest["components"][0]["artifacts"][0]
    ref = ws / "vulkan-self-reference.json"
    out = _cli(ws, "verify", "--write-reference", str(ref))
    assert out.returncode == 0, out.stderr
    victim = Path(aset["root"]) / sorted(i["name"] for i in aset["items"])[0]
    original = victim.read_bytes()
    try:
        data = bytearray(original)
        data[len(data) // 2] ^= 0x40
        victim.write_bytes(bytes(data))
        out = _cli(ws, "verify", "--reference", str(ref))
        assert out.returncode == 11
        assert f"differs  {victim.name}" in out.stderr
        assert f"{aset['count'] - 1}/{aset['count']} byte-identical" in out.stderr
    finally:
        victim.write_bytes(original)


def shader_stats(manifest: dict) -> dict | None:
    """What the shader cache did in the build a manifest records (None when it was off or the
    build folder was reused)."""
    doc = (manifest["components"][0].get("compiler_cache") or {}).get("shader_cache") or {}
    return doc.get("stats")


def test_second_workspace_compiles_no_shader_and_verifies(vulkan_build, tmp_path, pytestconfig):
    """A Vulkan build in another workspace at another path, after the first filled the shader
    cache: every shader a hit, every .spv byte-identical to the first build's, and N/N against
    the committed reference. The first build must have compiled its shaders through the cache.
    The second builds the vulkan recipe's ggml-vulkan target alone (ggml_only_project: the same
    defines, so the same shader compiles and the same artifacts); the llama part it leaves out
    compiles no shader, and test_library_and_server_compile_as_in_the_default_build shows
    it comes from the compiler cache."""
    ws, manifest = vulkan_build
    aset = manifest["components"][0]["artifacts"][0]
    stats_file = Path(manifest["components"][0]["build_dir"]) / "onebit-glslc" / "stats.log"
    if not stats_file.is_file():
        pytest.skip(f"the test workspace's vulkan build was made without the shader cache (no {stats_file}); "
                    f"remove {manifest['components'][0]['build_dir']} once to rebuild it through the cache")
    root = ggml_only_project(tmp_path / "project", target="ggml-vulkan", recipe="vulkan")
    ws2 = tmp_path / "a" / "second" / "workspace"
    say = progress(pytestconfig)
    say(f"building the vulkan recipe's ggml-vulkan again in {ws2} (shaders from the shader cache)")
    rc, out = stream_cli(root, "--workspace", str(ws2), "--mirror-dir", str(ws / "git"), "--recipe", "vulkan", "build",
                         say=say, timeout=3600)
    assert rc == 0, out[-3000:]
    second = json.loads((ws2 / "manifests" / "vulkan.json").read_text())
    assert {o["name"].split(".so")[0] for o in second["components"][0]["outputs"]} == {"libggml-base", "libggml-vulkan"}
    stats = shader_stats(second)
    assert stats is not None and stats["misses"] == 0 and stats["errors"] == 0, stats
    assert stats["hits"] >= aset["count"], stats
    aset2 = second["components"][0]["artifacts"][0]
    assert Path(aset2["root"]) != Path(aset["root"]) and aset2["count"] == aset["count"]
    first_bytes = {i["name"]: i["sha256"] for i in aset["items"]}
    assert {i["name"]: i["sha256"] for i in aset2["items"]} == first_bytes
    out = run_cli(root, "--workspace", str(ws2), "--recipe", "vulkan", "verify", timeout=600)
    if "no committed reference" not in out.stderr:
        n = aset2["count"]
        assert out.returncode == 0 and f"Vulkan SPIR-V: {n}/{n} byte-identical" in out.stderr, out.stderr


def compile_lines(manifest: dict) -> dict[str, str]:
    """Each object's compile command in a build a manifest records, keyed by the object, with
    the build folder and the source tree written as placeholders (the paths the tool maps)."""
    build_dir, tree = manifest["components"][0]["build_dir"], manifest["sources"][0]["tree"]
    doc = json.loads((Path(build_dir) / "compile_commands.json").read_text())
    return {os.path.relpath(Path(e["directory"], e["output"]), build_dir):
            e["command"].replace(build_dir, "@BUILD@").replace(tree, "@SRC@") for e in doc}


def test_library_and_server_compile_as_in_the_default_build(vulkan_build, llama_server):
    """The Vulkan backend's define stays inside ggml (patches/llama.cpp/0003): every object of
    libllama, llama-common, mtmd and the server has the default recipe's own compile command,
    so what a default build put in the compiler cache serves the Vulkan build, and those
    libraries come out byte-identical in both recipes."""
    _, vulkan = vulkan_build
    default = json.loads((llama_server.parent.parent / "build-manifest.json").read_text())
    vk_lines, cpu_lines = compile_lines(vulkan), compile_lines(default)
    # ggml itself, and the in-tree tool that tests for a backend (configured, never built
    # for llama-server), keep the definitions
    readers = ("ggml/", "tools/cvector-generator/", "tests/")
    shared = sorted(o for o in cpu_lines if not o.startswith(readers))
    assert len(shared) > 100 and set(shared) <= set(vk_lines), shared
    differ = [o for o in shared if vk_lines[o] != cpu_lines[o]]
    assert not differ, f"{len(differ)} compile command(s) differ, first {differ[0]}:\n{vk_lines[differ[0]]}"
    assert all("GGML_USE_" not in cpu_lines[o] + vk_lines[o] for o in shared)
    tool = next(o for o in vk_lines if o.startswith("tools/cvector-generator/"))
    assert "-DGGML_USE_VULKAN" in vk_lines[tool] and "-DGGML_USE_VULKAN" not in cpu_lines[tool]

    def libraries(doc: dict) -> dict[str, str]:
        return {o["name"]: o["sha256"] for o in doc["components"][0]["outputs"]
                if o["name"].startswith(("libllama", "libmtmd")) or o["name"] == "llama-server"}

    assert libraries(vulkan) == libraries(default) and len(libraries(default)) >= 5, libraries(vulkan)
