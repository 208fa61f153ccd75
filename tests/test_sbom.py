"""The build's CycloneDX SBOM, checked against the 1.6 schema with cyclonedx-python-lib's own
strict validator: the pinned source with its purl and its patch as pedigree, the toolchain,
and the system libraries the program loads with the Debian packages (and versions) dpkg says
own them. The pure parts (dpkg's and ldconfig's output, purls, the scrubbing) without I/O."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from _evidence import tiny_project
from onebit_build.checking.manifest import SourceRecord
from onebit_build.core.fsutil import sha256_file
from onebit_build.evidence import debian
from onebit_build.evidence.runtime import parse_ldconfig
from onebit_build.evidence.sbom import source_purl
from onebit_build.evidence.scrub import restore, scrubber
from onebit_build.evidence.statement import fetched_from
from onebit_build.evidence.tools import cache_programs


def library_packages(doc: dict) -> dict[str, tuple[str, str, str]]:
    """{library: (package, version, purl)} from an SBOM document."""
    return {p["value"]: (c["name"], c.get("version", ""), c.get("purl", "")) for c in doc.get("components", [])
            for p in c.get("properties", []) if p["name"] == "onebit-build:library"}


def dpkg_version(package: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                          check=True).stdout


def test_schema_validator_can_fail():
    """The validator this file relies on refuses a document that is not CycloneDX 1.6."""
    bad = json.dumps({"bomFormat": "CycloneDX", "specVersion": "1.6", "version": "one"})
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(bad) is not None


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="no dpkg here: the packages cannot be named")
def test_tiny_build_sbom_validates_and_names_sources_patches_tools_and_runtime(tmp_path):
    proj = tiny_project(tmp_path)
    out = proj.cli("--recipe", "tiny", "build")
    assert out.returncode == 0, out.stderr
    assert "provenance unsigned (no --signing-key or $ONEBIT_SIGNING_KEY)" in out.stderr
    folder = proj.build_folder()
    text = (folder / "sbom.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    assert doc["specVersion"] == "1.6" and doc["metadata"]["component"]["name"] == "hello"
    source = next(c for c in doc["components"] if c["bom-ref"] == "source:tiny")
    (patch,) = source["pedigree"]["patches"]
    shipped = next((proj.root / "patches" / "tiny").glob("0001-*.patch"))
    assert patch["diff"]["url"] == f"patches/tiny/{shipped.name}"
    assert base64.b64decode(patch["diff"]["text"]["content"]) == shipped.read_bytes()
    assert source["purl"].startswith("pkg:generic/tiny@")
    tools = {t["name"]: t for t in doc["metadata"]["tools"]["components"]}
    assert tools["c_compiler"]["purl"].startswith("pkg:deb/") and tools["cmake"]["purl"].startswith("pkg:pypi/cmake@")
    libs = library_packages(doc)
    assert libs["libc.so.6"][0] == "libc6" and libs["libc.so.6"][1] == dpkg_version("libc6")
    assert "libc6@" in libs["libc.so.6"][2] and "distro=" in libs["libc.so.6"][2]
    # The (unsigned) statement names the SBOM by its digest.
    statement = json.loads((folder / "provenance.json").read_text())
    byproducts = {b["name"]: b["digest"]["sha256"] for b in statement["predicate"]["runDetails"]["byproducts"]}
    assert byproducts["sbom.cdx.json"] == sha256_file(folder / "sbom.cdx.json")


def test_dpkg_output_is_read():
    found = debian.parse_search("libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6\n"
                                "diversion by foo from: /usr/bin/x\n"
                                "libstdc++6:amd64, libstdc++6:i386: /usr/share/doc/libstdc++6\n")
    assert found == {"/lib/x86_64-linux-gnu/libc.so.6": "libc6:amd64", "/usr/share/doc/libstdc++6": "libstdc++6:amd64"}
    shown = debian.parse_show("libc6\tamd64\t2.36-9+deb12u14\nbroken line\n")
    assert shown["libc6:amd64"].version == "2.36-9+deb12u14"
    pkg = debian.DebPackage(name="libstdc++6", version="12.2.0-14+deb12u1", arch="amd64")
    assert pkg.purl(debian.Distro(id="debian", version_id="12")) == \
        "pkg:deb/debian/libstdc%2B%2B6@12.2.0-14%2Bdeb12u1?arch=amd64&distro=debian-12"


def test_names_of_a_path_cover_merged_usr_and_refuse_patterns(tmp_path):
    names = debian.names_of(Path("/lib/x86_64-linux-gnu/libc.so.6"))
    assert "/lib/x86_64-linux-gnu/libc.so.6" in names and "/usr/lib/x86_64-linux-gnu/libc.so.6" in names
    assert debian.names_of(tmp_path / "lib*.so") == []  # dpkg-query -S reads a pattern: never asked


def test_ldconfig_cache_is_read_for_one_machine():
    text = ("2 libs found in cache\n\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n"
            "\tlibz.so.1 (libc6) => /lib/i386-linux-gnu/libz.so.1\n")
    assert parse_ldconfig(text, "EM_X86_64") == {"libz.so.1": Path("/lib/x86_64-linux-gnu/libz.so.1")}


def test_cmake_cache_programs_and_purls_of_sources():
    text = ("CMAKE_C_COMPILER:FILEPATH=/usr/bin/cc\nCMAKE_MAKE_PROGRAM:UNINITIALIZED=/v/bin/ninja\n"
            "CMAKE_AR:FILEPATH=ar\nOTHER:STRING=/x\n")
    assert cache_programs(text) == {"CMAKE_C_COMPILER": "/usr/bin/cc", "CMAKE_MAKE_PROGRAM": "/v/bin/ninja"}
    gh = SourceRecord(name="llama.cpp", commit="a" * 40, url="https://github.com/ggml-org/llama.cpp.git")
    assert source_purl(gh).to_string() == f"pkg:github/ggml-org/llama.cpp@{'a' * 40}"
    other = SourceRecord(name="x", commit="b" * 40, url="https://user:pw@example.invalid/x.git")
    assert "pw" not in source_purl(other).to_string() and "vcs_url=" in source_purl(other).to_string()


def test_scrubbing_replaces_roots_only_where_a_path_continues():
    s = scrubber(workspace=Path("/home/u/.cache/ws"), project=Path("/home/u/proj"), home=Path("/home/u"))
    doc = {"a": "/home/u/.cache/ws/src/x", "b": ["-fmacro-prefix-map=/home/u/.cache/ws/build/y=."],
           "c": "/home/u/.cache/ws2/z", "d": "/home/u/proj/recipes/r.yaml", "e": "/home/user2/q"}
    out = s.value(doc)
    assert out == {"a": "${WORKSPACE}/src/x", "b": ["-fmacro-prefix-map=${WORKSPACE}/build/y=."],
                   "c": "${HOME}/.cache/ws2/z", "d": "${PROJECT}/recipes/r.yaml", "e": "/home/user2/q"}
    assert restore(out, {"${WORKSPACE}": "/home/u/.cache/ws"})["a"] == doc["a"]
    assert fetched_from("mirror-dir:/home/u/mirrors/tiny.git") == "mirror-dir:tiny.git"
    assert fetched_from("pypi-sdist:llama-cpp-python==0.3.36") == "pypi-sdist:llama-cpp-python==0.3.36"
