"""The binary cache on the real default build: the test suite's shared build published to a
real local registry (Debian's docker-registry on 127.0.0.1, started and stopped here), then
taken into new workspaces and prefixes without a compile, and refused when its bytes are not
the committed reference's."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from _registry import push_altered, snapshot, start_registry
from _support import REPO, run_cli, shared_from_user
from conftest import workspace_for_tests

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def published(llama_server, registry) -> tuple[str, str]:
    """(tag, digest) of the shared default build, published (it is up to date: nothing is built)."""
    ws = workspace_for_tests()
    out = run_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "publish", registry.ref("llama", "test"))
    assert out.returncode == 0, out.stderr
    assert "verify   ok" in out.stderr and "build    ok" in out.stderr and "up to date" in out.stderr
    m = re.fullmatch(r"oci://\S+/llama:(default-[0-9a-f]{64})@(sha256:[0-9a-f]{64})", out.stdout.strip())
    assert m, out.stdout
    return m.group(1), m.group(2)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reference_of(llama_server: Path) -> str:
    """The committed reference's name for the toolchain the shared default build was made with."""
    from onebit_build.checking.manifest import load_manifest
    from onebit_build.checking.references import fingerprint, reference_name

    return reference_name(fingerprint(load_manifest(llama_server.parent.parent / "build-manifest.json")))


def test_the_default_build_installs_byte_identically_with_no_compile(published, registry, llama_server, tmp_path):
    tag, digest = published
    before = len(registry.requests_seen())
    ws, prefix = tmp_path / "ws", tmp_path / "prefix"
    out = run_cli(REPO, "--workspace", str(ws), "install", "--from", registry.ref("llama"), "--prefix", str(prefix))
    assert out.returncode == 0, out.stderr
    assert not (ws / "build").exists() and not (ws / "src").exists() and not (ws / "git").exists()
    built = llama_server.parent
    files = sorted(p.name for p in (prefix / "bin").iterdir())
    assert "llama-server" in files and len(files) > 8
    for name in files:
        got, want = prefix / "bin" / name, built / name
        assert (got.readlink() == want.readlink()) if got.is_symlink() else sha256(got) == sha256(want), name
    origin = json.loads((prefix / "share" / "onebit-build" / "binary-cache.json").read_text())
    assert origin["from"].endswith(f":{tag}@{digest}") and origin["accepted"] == "verified"
    assert origin["detail"].startswith(f"against {reference_of(llama_server)}")
    version = subprocess.run([prefix / "bin" / "llama-server", "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and "version" in version.stderr + version.stdout
    # The tag was resolved once; the manifest and every blob were read by digest.
    seen = registry.requests_seen()[before:]
    assert [(m, p) for m, p in seen if "/manifests/" in p] == [("HEAD", f"/v2/llama/manifests/{tag}"),
                                                              ("GET", f"/v2/llama/manifests/{digest}")]
    assert all(re.fullmatch(r"/v2/llama/blobs/sha256:[0-9a-f]{64}", p) for m, p in seen if "/blobs/" in p)


def test_the_whole_default_job_takes_the_build_from_the_registry(published, registry, gemma_model, llama_server,
                                                                  tmp_path):
    ws = tmp_path / "ws"
    t0 = time.monotonic()
    out = run_cli(REPO, "--workspace", str(ws), "--model", str(gemma_model), "all", "--binary-cache",
                  registry.ref("llama"), "--run-dir", str(tmp_path / "run"))
    seconds = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    assert "binary   ok" in out.stderr and "verify   ok" in out.stderr and "(verify VERIFIED)" in out.stderr
    assert not (ws / "build").exists() and not (ws / "src").exists()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["result"] == "pass" and report["extra"]["verify"]["status"] == "verified"
    assert report["manifest"]["binary_cache"].startswith(f"verified (against {reference_of(llama_server)}")
    assert "binary_cache `verified" in (tmp_path / "run" / "report.md").read_text()
    print(f"the whole default job from the binary cache: {seconds:.1f} s")


def test_a_tampered_blob_of_the_default_build_is_refused(published, registry, tmp_path):
    tag, digest = published
    prefix = tmp_path / "prefix"
    assert run_cli(REPO, "--workspace", str(tmp_path / "ws"), "install", "--from", registry.ref("llama"), "--prefix",
                   str(prefix)).returncode == 0
    before = snapshot(prefix)
    shutil.copytree(registry.root, tmp_path / "copy" / "store")
    bad = start_registry(tmp_path / "copy")
    try:
        blob = bad.blob_file(f"sha256:{sha256(prefix / 'bin' / 'llama-server')}")
        data = bytearray(blob.read_bytes())
        data[100] ^= 0xFF
        blob.write_bytes(bytes(data))
        out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "install", "--from", bad.ref("llama"), "--prefix",
                      str(prefix))
        assert out.returncode == 5 and "is not the one the manifest names" in out.stderr, out.stderr
        assert snapshot(prefix) == before
    finally:
        bad.stop()


def test_other_bytes_under_the_same_key_are_refused_by_the_reference_check(published, registry, llama_server,
                                                                           tmp_path):
    tag, digest = published
    push_altered(registry, "llama", digest, tmp_path / "tree", to="altered", tag=tag, flip="llama-server")
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "install", "--from", registry.ref("altered"), "--prefix",
                  str(tmp_path / "prefix"))
    assert out.returncode == 11, out.stderr
    assert f"is NOT the committed reference's build ({reference_of(llama_server)}" in out.stderr
    assert "llama-server" in out.stderr
    assert not (tmp_path / "prefix").exists()


def test_a_registry_that_is_down_falls_back_to_building_with_one_line(llama_server, tmp_path):
    from onebit_build.running.ports import free_port

    ws = workspace_for_tests()
    port = free_port()
    out = run_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "build", "--binary-cache",
                  f"oci://127.0.0.1:{port}/llama")
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "binary" in ln]
    assert lines == [f"warning: binary cache: registry 127.0.0.1:{port} did not answer (connection refused); "
                     "building here"], out.stderr
    assert "up to date" in out.stderr and Path(out.stdout.strip()) == llama_server
