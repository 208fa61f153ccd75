"""The evidence of the real default build (the test workspace's, built once) and of a real
verification run: the build signed with a fresh key verifies against the committed reference
of its toolchain, its SBOM names the libraries llama-server loads with their Debian packages,
and verify-run's signed verdict verifies on its own, anywhere, and not once edited."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from _evidence import payload, read_envelope, with_payload, write_envelope, write_key
from _support import REPO, run_cli
from conftest import workspace_for_tests
from onebit_build.checking import manifest as manifest_mod
from onebit_build.checking.references import find_reference

pytestmark = [pytest.mark.slow, pytest.mark.shared_workspace]


def cli(*args: str, timeout: float = 3600):
    return run_cli(REPO, "--workspace", str(workspace_for_tests()), *args, timeout=timeout)


@pytest.fixture(scope="module")
def signed_default(llama_server, tmp_path_factory):
    """The default build (up to date: nothing compiles) with its evidence signed by a fresh key."""
    key = write_key(tmp_path_factory.mktemp("keys"), "builder")
    out = cli("--signing-key", str(key.private), "build")
    assert out.returncode == 0, out.stderr[-3000:]
    man = manifest_mod.load_latest(manifest_mod.Workspace(root=workspace_for_tests()), "default")
    assert man is not None
    return key, Path(man.output("llama-server").path).parent.parent, man


def test_default_build_verifies_and_its_sbom_names_the_server_libraries(signed_default):
    key, folder, man = signed_default
    out = cli("verify-provenance", str(folder), "--key", str(key.public))
    reference, _seen = find_reference(REPO / "references" / "default", man)
    if reference is not None:
        assert out.returncode == 0 and out.stdout.strip() == "VERIFIED", out.stderr
        assert f"as {reference.name}" in out.stderr
    else:  # a toolchain the project has no reference of (say so, and check the rest)
        assert out.returncode == 12 and "no committed reference of its toolchain" in out.stderr, out.stderr
    for check in ("signature", "subjects", "byproducts", "materials", "build key"):
        assert re.search(rf"^  {check} +ok ", out.stderr, re.M), out.stderr
    text = (folder / "sbom.cdx.json").read_text()
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    doc = json.loads(text)
    libs = {p["value"]: c for c in doc["components"] for p in c.get("properties", [])
            if p["name"] == "onebit-build:library"}
    for lib, package in (("libstdc++.so.6", "libstdc++6"), ("libc.so.6", "libc6"), ("libgomp.so.1", "libgomp1")):
        version = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                                 check=True).stdout
        assert libs[lib]["name"] == package and libs[lib]["version"] == version, libs.get(lib)
        assert libs[lib]["purl"].startswith("pkg:deb/") and "distro=" in libs[lib]["purl"]
    assert doc["metadata"]["component"]["name"] == "llama-server"
    source = next(c for c in doc["components"] if c["bom-ref"] == "source:llama.cpp")
    assert source["purl"] == f"pkg:github/ggml-org/llama.cpp@{man.source_commit('llama.cpp')}"
    assert len(source["pedigree"]["patches"]) == len(man.sources[0].patches)


def test_verify_run_verdict_is_signed_and_verifies_on_its_own(signed_default, gemma_model, tmp_path):
    key, folder, _man = signed_default
    prefix = tmp_path / "working"
    out = cli("--signing-key", str(key.private), "install", "--prefix", str(prefix))
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = tmp_path / "run"
    out = cli("--signing-key", str(key.private), "--model", str(gemma_model), "verify-run", "--working", str(prefix),
              "--no-speed", "--run-dir", str(run_dir))
    assert out.returncode == 0, out.stderr[-4000:]
    statement = run_dir / "verification.intoto.jsonl"
    assert f"signed:  {statement}" in out.stderr
    doc = payload(read_envelope(statement))
    assert doc["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert doc["predicate"]["result"] == "PASSED" and "speed" in doc["predicate"]["warnedTests"]
    report = doc["predicate"]["configuration"][0]
    assert report["name"] == "verification.json" and "machine" in report["annotations"]
    parts = {p["name"] for p in report["annotations"]["parts"]}
    assert parts == {"artifacts", "answers", "speed", "provenance", "numerics"}
    assert str(workspace_for_tests()) not in json.dumps(doc) and str(Path.home()) not in json.dumps(doc)
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    shutil.copy2(statement, alone)
    out = cli("verify-provenance", str(alone / statement.name), "--key", str(key.public))
    assert out.returncode == 0 and out.stdout.strip() == "VERIFIED", out.stderr
    assert "the verification run passed" in out.stderr and "the statement alone is checked" in out.stderr
    shutil.copy2(folder / "bin" / "llama-server", alone)  # with the server beside it, the server is checked too
    out = cli("verify-provenance", str(alone / statement.name), "--key", str(key.public))
    assert out.returncode == 0 and re.search(r"subjects +ok +1/\d+ files match", out.stderr), out.stderr
    env = read_envelope(statement)
    edited = payload(env)
    edited["predicate"]["result"] = "PASSED" if edited["predicate"]["result"] != "PASSED" else "FAILED"
    write_envelope(alone / statement.name, with_payload(env, edited))
    out = cli("verify-provenance", str(alone / statement.name), "--key", str(key.public))
    assert out.returncode == 11 and "it was changed after signing" in out.stderr, out.stderr
