"""Verify stage: real builds of a tiny project that emits shader-like artifacts, compared
with references through the CLI; and the pure comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _support import bare_mirror, make_repo, project_tree, run_cli
from onebit_build.checking.artifacts import Artifact, ArtifactSet
from onebit_build.checking.manifest import Manifest, latest_path, load_latest, write_manifest
from onebit_build.checking.references import reference_doc
from onebit_build.checking.compare import compare_sets
from onebit_build.core.fsutil import StateError
from onebit_build.core.workspace import Workspace

SHADER_PROJECT = {
    "CMakeLists.txt": """\
        cmake_minimum_required(VERSION 3.20)
        project(shaders NONE)
        set(SPV_DIR ${CMAKE_BINARY_DIR}/ggml/src/ggml-vulkan/vulkan-shaders.spv)
        set(OUTS)
        foreach(name add mul softmax)
          add_custom_command(OUTPUT ${SPV_DIR}/${name}.spv
            COMMAND ${CMAKE_COMMAND} -E make_directory ${SPV_DIR}
            COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/shaders/${name}.comp ${SPV_DIR}/${name}.spv
            DEPENDS ${CMAKE_SOURCE_DIR}/shaders/${name}.comp)
          list(APPEND OUTS ${SPV_DIR}/${name}.spv)
        endforeach()
        add_custom_target(shaders ALL DEPENDS ${OUTS})
        """,
    "shaders/add.comp": "shader add: a + b\n",
    "shaders/mul.comp": "shader mul: a * b\n",
    "shaders/softmax.comp": "shader softmax: exp(a) / sum(exp(a))\n",
}

RECIPE = """\
schema: 1
name: shaders
backends: [vulkan]
components:
  - name: llama
    source: shaders
    targets: [shaders]
    artifacts: [spirv]
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("verify")
    src = tmp / "src"
    commit = make_repo(src, SHADER_PROJECT)
    mirrors = tmp / "mirrors"
    bare_mirror(src, mirrors, "shaders")
    root = project_tree(tmp / "proj", pins="schema: 1\nsources:\n  shaders:\n    url: https://example.invalid/s.git\n "
                                           f"   commit: {commit}\n", recipes={"shaders": RECIPE})
    ws = tmp / "ws"

    def cli(*args):
        return run_cli(root, "--workspace", str(ws), "--mirror-dir", str(mirrors), "--recipe", "shaders", *args)

    out = cli("build")
    assert out.returncode == 0, out.stderr
    manifest = json.loads((ws / "manifests" / "shaders.json").read_text())
    ref = tmp / "reference.json"
    out = cli("verify", "--write-reference", str(ref))
    assert out.returncode == 0, out.stderr
    return cli, manifest, ref, root, tmp


def spv_dir(manifest) -> Path:
    return Path(manifest["components"][0]["artifacts"][0]["root"])


def test_manifest_records_artifacts_and_facts(built):
    _, manifest, _, _, _ = built
    aset = manifest["components"][0]["artifacts"][0]
    assert aset["kind"] == "spirv" and aset["count"] == 3
    assert sorted(i["name"] for i in aset["items"]) == ["add.spv", "mul.spv", "softmax.spv"]
    assert "glslc" in aset["facts"]


def test_identical_then_flipped_byte_is_named(built):
    cli, manifest, ref, _, _ = built
    out = cli("verify", "--reference", str(ref))
    assert out.returncode == 0, out.stderr
    assert "Vulkan SPIR-V: 3/3 byte-identical" in out.stderr
    target = spv_dir(manifest) / "mul.spv"
    original = target.read_bytes()
    try:
        data = bytearray(original)
        data[3] ^= 0x01
        target.write_bytes(bytes(data))
        out = cli("verify", "--reference", str(ref))
        assert out.returncode == 11
        assert "2/3 byte-identical" in out.stderr and "differs  mul.spv" in out.stderr
    finally:
        target.write_bytes(original)


def test_missing_and_extra(built):
    cli, manifest, ref, _, _ = built
    d = spv_dir(manifest)
    extra = d / "new.spv"
    gone = d / "add.spv"
    saved = gone.read_bytes()
    try:
        extra.write_bytes(b"new shader\n")
        gone.unlink()
        out = cli("verify", "--reference", str(ref))
        assert out.returncode == 11
        assert "missing  add.spv" in out.stderr and "extra    new.spv" in out.stderr
    finally:
        extra.unlink(missing_ok=True)
        gone.write_bytes(saved)


def test_reference_from_another_glslc_is_explained(built):
    cli, manifest, ref, _, tmp = built
    doc = json.loads(ref.read_text())
    doc["components"][0]["artifacts"][0]["facts"]["glslc"] = "shaderc v1999.1 (other)"
    doc["components"][0]["artifacts"][0]["items"][0]["sha256"] = "0" * 64
    other = tmp / "other-glslc.json"
    other.write_text(json.dumps(doc))
    out = cli("verify", "--reference", str(other))
    assert out.returncode == 11
    assert "explained by glslc" in out.stderr and "shaderc v1999.1 (other)" in out.stderr
    assert manifest["components"][0]["artifacts"][0]["facts"]["glslc"] in out.stderr


@pytest.mark.parametrize("content,expect", [
    ("{not json", "not valid JSON"),
    ('{"kind": "onebit-build/artifact-reference", "schema": 99, "components": []}', "schema 99"),
    ('{"kind": "something-else", "schema": 1}', "neither an artifact reference"),
    ('[1, 2]', "not a JSON object"),
])
def test_malformed_or_foreign_references(built, content, expect):
    cli, _, _, _, tmp = built
    bad = tmp / "bad.json"
    bad.write_text(content)
    out = cli("verify", "--reference", str(bad))
    assert out.returncode == 11 and expect in out.stderr


def test_build_dir_as_reference_and_rebuild(built):
    cli, manifest, _, _, _ = built
    out = cli("verify", "--reference", manifest["components"][0]["build_dir"])
    assert out.returncode == 0 and "3/3 byte-identical" in out.stderr
    out = cli("verify", "--rebuild")
    assert out.returncode == 0, out.stderr
    assert "3/3 byte-identical" in out.stderr and "DIFFERENT" not in out.stderr


def test_no_committed_reference_is_unverified_with_the_command_that_records_one(built):
    """With no reference for this toolchain, verify says UNVERIFIED (exit 0, as the default
    job's verify stage does) and names the command that records one; once that file is in
    references/<recipe>/ under the suggested name, the same command says VERIFIED."""
    cli, _, _, root, _ = built
    out = cli("verify")
    assert out.returncode == 0, out.stderr
    assert "verify   UNVERIFIED" in out.stderr and "no committed reference" in out.stderr
    hint = next(ln for ln in out.stderr.splitlines() if "--write-reference" in ln)
    target = Path(hint.split("--write-reference ", 1)[1].split(";", 1)[0])
    assert target.parent == root / "references" / "shaders" and target.suffix == ".json"
    try:
        assert cli("verify", "--write-reference", str(target)).returncode == 0
        out = cli("verify")
        assert out.returncode == 0, out.stderr
        assert "verify   ok" in out.stderr
        assert f"against {target.name}: Vulkan SPIR-V: 3/3 byte-identical" in out.stderr
    finally:
        target.unlink(missing_ok=True)


def test_compare_sets_pure():
    a = ArtifactSet(kind="loombc", root="/r", items=(Artifact(name="k.loombc", size=4, sha256="a"),),
                    facts={"source_dir": "/x", "loom_link": "L"})
    b = ArtifactSet(kind="loombc", root="/r", items=(Artifact(name="k.loombc", size=4, sha256="a"),),
                    facts={"source_dir": "/y", "loom_link": "L"})
    res = compare_sets("llama", b, a)
    assert res.ok and res.summary() == "HRX2 Loom bytecode: 1/1 byte-identical"
    assert res.warnings and "another path" in res.warnings[0]


def manifest_doc() -> dict:
    spv = ArtifactSet(kind="spirv", root="/b/spv", items=(Artifact(name="add.spv", size=3, sha256="a" * 64),),
                      facts={"glslc": "shaderc 1"})
    return {
        "tool": {"name": "onebit-build", "version": "0"}, "project_root": "/p", "data_from": "checkout",
            "created": "2025-01-01T00:00:00+0000",
        "recipe": {"name": "tiny", "path": "/p/recipes/tiny.yaml", "sha256": "r" * 64, "backends": ["vulkan"]},
        "host": {"hostname": "box", "system": "Linux"}, "toolchain": {"cmake": "3.31", "glslc": "shaderc 1"},
        "sources": [{"name": "src", "url": "https://example.org/src.git", "commit": "c" * 40, "resolved_from": None,
                     "mirror_used": "cache",
                     "archive_sha256": None, "tree": "/w/src", "patched_head": "d" * 40, "patch_digest": "p" * 64,
                     "patches": [{"name": "0001-x.patch", "sha256": "e" * 64}]}],
        "components": [{"name": "llama", "source": "src", "build_dir": "/b", "key": "k" * 64, "build_type": "Release",
                        "targets": ["llama-server"],
                        "defines": {"GGML_VULKAN": "ON"}, "configure_argv": ["cmake"], "build_argv": ["ninja"],
                        "toolchain": {"cmake": "3.31"},
                        "outputs": [{"name": "llama-server", "path": "/b/bin/llama-server",
                                     "sha256": "f" * 64, "size": 9}],
                        "artifacts": [spv.to_dict()]}],
    }


def test_manifest_round_trip_and_lookups(tmp_path):
    doc = manifest_doc()
    man = Manifest.from_doc(doc)
    assert man.to_doc() == doc
    assert man.output("llama-server").path == "/b/bin/llama-server" and man.output("nothing") is None
    assert man.source_commit("src") == "c" * 40
    with pytest.raises(KeyError):
        man.source_commit("other")
    assert list(man.artifact_sets()) == [("llama", "spirv")]
    ref = reference_doc(man)
    assert ref == reference_doc(doc) and "hostname" not in ref["host"]
    assert ref["components"][0]["artifacts"][0]["root"] == "" and "path" not in ref["components"][0]["outputs"][0]
    with pytest.raises(StateError):
        Manifest.from_doc({"components": [{"outputs": []}]})  # a component without a name


def test_latest_manifest_of_a_recipe(tmp_path):
    ws = Workspace(root=tmp_path / "ws")
    assert load_latest(ws, "tiny") is None
    write_manifest(latest_path(ws, "tiny"), Manifest.from_doc(manifest_doc()))
    assert load_latest(ws, "tiny") == Manifest.from_doc(manifest_doc())
    latest_path(ws, "tiny").write_text("{}")
    with pytest.raises(StateError):
        load_latest(ws, "tiny")


def test_the_artifact_kinds_have_one_table():
    """Every collector a recipe may name is a kind of building.artifacts.KINDS, and the facts
    verify treats as tools and as paths come from that table."""
    from onebit_build.checking.artifacts import KINDS, PATH_FACTS, TOOL_FACTS
    from onebit_build.spec.recipe import KNOWN_COLLECTORS

    assert set(KINDS) == KNOWN_COLLECTORS
    assert TOOL_FACTS == ("glslc", "loom_link", "nvcc")
    assert PATH_FACTS == {"source_dir", "loom_link"}  # loom-link records its input's absolute path
    assert [k for k, v in KINDS.items() if v.path_matters] == ["loombc"]
