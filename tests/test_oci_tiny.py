"""The binary cache end to end on a tiny real project and a real local registry (Debian's
docker-registry on 127.0.0.1, started and stopped by the tests): publish, pull by digest into
other workspaces and prefixes, and every way a pulled build is refused or not reached."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from _registry import LocalRegistry, push_altered, snapshot, start_registry
from _support import TINY_CMAKE, bare_mirror, make_repo, project_tree, run_cli, tiny_recipe


@dataclass
class Tiny:
    root: Path
    mirrors: Path
    ws: Path  # where it was built and published from
    digest: str
    tag: str

    def cli(self, ws: Path, *args: str, root: Path | None = None, env: dict[str, str] | None = None):
        return run_cli(root or self.root, "--workspace", str(ws), "--mirror-dir", str(self.mirrors), *args, env=env)

    @property
    def hello(self) -> Path:
        return next((self.ws / "build").glob("tiny-hello-*/hello"))


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, registry) -> Tiny:
    base = tmp_path_factory.mktemp("tiny")
    commit = make_repo(base / "src", TINY_CMAKE)
    bare_mirror(base / "src", base / "mirrors", "tiny")
    root = project_tree(base / "proj", pins=f"schema: 1\nsources:\n  tiny:\n    url: https://example.invalid/t.git\n"
                                            f"    commit: {commit}\n", recipes={"tiny": tiny_recipe()})
    t = Tiny(root=root, mirrors=base / "mirrors", ws=base / "ws", digest="", tag="")
    assert t.cli(t.ws, "--recipe", "tiny", "build").returncode == 0
    reference = root / "references" / "tiny" / "here.json"
    out = t.cli(t.ws, "--recipe", "tiny", "verify", "--write-reference", str(reference))
    assert out.returncode == 0, out.stderr
    out = t.cli(t.ws, "--recipe", "tiny", "publish", registry.ref("tiny", "v1"))
    assert out.returncode == 0, out.stderr
    m = re.fullmatch(r"oci://\S+/tiny:(tiny-[0-9a-f]{64})@(sha256:[0-9a-f]{64})", out.stdout.strip())
    assert m, out.stdout
    assert "tags tiny-" in out.stderr and ", v1" in out.stderr
    t.tag, t.digest = m.group(1), m.group(2)
    return t


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_published_build_comes_back_byte_identical_without_a_compile(tiny, registry, tmp_path):
    out = tiny.cli(tmp_path / "b", "--recipe", "tiny", "build", "--binary-cache", registry.ref("tiny"))
    assert out.returncode == 0, out.stderr
    assert "binary   ok" in out.stderr and f"@{tiny.digest}; VERIFIED" in out.stderr
    pulled = Path(out.stdout.strip()).parent  # the answer of a recipe without a server: its manifest
    assert pulled.parent == tmp_path / "b" / "pulled" and sha256(pulled / "bin" / "hello") == sha256(tiny.hello)
    assert not (tmp_path / "b" / "build").exists() and not (tmp_path / "b" / "src").exists()  # no fetch, no compile
    man = json.loads((tmp_path / "b" / "manifests" / "tiny.json").read_text())
    assert man["binary_cache"]["from"].endswith(tiny.digest) and man["binary_cache"]["accepted"] == "verified"
    prefix = tmp_path / "prefix"
    out = tiny.cli(tmp_path / "c", "--recipe", "tiny", "install", "--from", registry.ref("tiny"), "--prefix",
                   str(prefix))
    assert out.returncode == 0, out.stderr
    assert sha256(prefix / "bin" / "hello") == sha256(tiny.hello) and (prefix / "bin" / "hello").stat().st_mode & 0o111
    published = json.loads((prefix / "share" / "onebit-build" / "build-manifest.json").read_text())
    assert published["components"][0]["outputs"][0]["sha256"] == sha256(tiny.hello)
    origin = json.loads((prefix / "share" / "onebit-build" / "binary-cache.json").read_text())
    assert origin["from"].endswith(f":{tiny.tag}@{tiny.digest}") and origin["accepted"] == "verified"
    assert not (tmp_path / "c" / "build").exists()


def test_the_tag_is_resolved_once_and_everything_is_read_by_digest(tiny, registry, tmp_path):
    before = len(registry.requests_seen())
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("tiny"), "--prefix",
                   str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    seen = registry.requests_seen()[before:]
    manifests = [(m, p) for m, p in seen if "/manifests/" in p]
    assert manifests == [("HEAD", f"/v2/tiny/manifests/{tiny.tag}"), ("GET", f"/v2/tiny/manifests/{tiny.digest}")]
    blobs = [p for m, p in seen if "/blobs/" in p]
    assert blobs and all(re.fullmatch(r"/v2/tiny/blobs/sha256:[0-9a-f]{64}", p) for p in blobs), blobs
    # A reference by digest is read without any tag.
    before = len(registry.requests_seen())
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", f"{registry.ref('tiny')}@{tiny.digest}",
                   "--prefix", str(tmp_path / "p2"))
    assert out.returncode == 0, out.stderr
    assert not [p for m, p in registry.requests_seen()[before:] if "/manifests/" in p and "sha256:" not in p]


def copy_of(registry: LocalRegistry, folder: Path) -> LocalRegistry:
    shutil.copytree(registry.root, folder / "store")
    return start_registry(folder)


def test_a_tampered_blob_is_refused_and_the_prefix_is_left_as_it_was(tiny, registry, tmp_path):
    prefix = tmp_path / "prefix"
    assert tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("tiny"), "--prefix",
                    str(prefix)).returncode == 0
    before = snapshot(prefix)
    bad = copy_of(registry, tmp_path / "tampered")
    try:
        blob = bad.blob_file(f"sha256:{sha256(tiny.hello)}")
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
        out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", bad.ref("tiny"), "--prefix",
                       str(prefix))
        assert out.returncode == 5, out.stderr
        assert "is not the one the manifest names" in out.stderr and "nothing was switched in" in out.stderr
        assert snapshot(prefix) == before
        assert not [p for p in (tmp_path / "w" / "pulled").iterdir() if p.name.startswith(".")]  # no staging left
        killed = tmp_path / "w" / "pulled" / ".tmp-999999999"  # what a pull that was killed leaves
        killed.mkdir()
        out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("tiny"), "--prefix",
                       str(prefix))
        assert out.returncode == 0 and not killed.exists(), out.stderr
        # The build stage refuses it with one line and builds here.
        out = tiny.cli(tmp_path / "x", "--recipe", "tiny", "build", "--binary-cache", bad.ref("tiny"))
        assert out.returncode == 0, out.stderr
        lines = [ln for ln in out.stderr.splitlines() if "binary cache" in ln]
        assert len(lines) == 1 and "refused" in lines[0] and lines[0].endswith("building here"), lines
        assert (tmp_path / "x" / "build").is_dir() and not (tmp_path / "x" / "pulled" / "tiny").exists()
    finally:
        bad.stop()


def test_a_registry_that_is_down_falls_back_to_building_with_one_line(tiny, tmp_path):
    from onebit_build.running.ports import free_port

    down = f"oci://127.0.0.1:{free_port()}/tiny"
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "build", "--binary-cache", down)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "binary" in ln]
    assert lines == [f"warning: binary cache: registry {down[6:].split('/')[0]} did not answer (connection refused); "
                     "building here"], out.stderr
    assert (tmp_path / "w" / "build").is_dir()
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", down, "--prefix", str(tmp_path / "p"))
    assert out.returncode == 0 and sha256(tmp_path / "p" / "bin" / "hello") == sha256(tiny.hello), out.stderr


def test_other_bytes_under_the_same_key_are_refused_by_the_reference_check(tiny, registry, tmp_path):
    push_altered(registry, "tiny", tiny.digest, tmp_path / "t1", to="evil", tag=tiny.tag, flip="hello")
    prefix = tmp_path / "prefix"
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("evil"), "--prefix",
                   str(prefix))
    assert out.returncode == 11, out.stderr
    assert "is NOT the committed reference's build (here.json)" in out.stderr and "hello" in out.stderr
    assert not prefix.exists() and not any((tmp_path / "w" / "pulled").iterdir())
    # A tag naming a build of another key is refused before any file is read.
    push_altered(registry, "tiny", tiny.digest, tmp_path / "t2", to="evil", tag="other", key="0" * 64)
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("evil", "other"), "--prefix",
                   str(prefix))
    assert out.returncode == 11 and "holds build tiny 0000000000000000, but this plan is tiny" in out.stderr


def test_a_toolchain_without_a_reference_needs_allow_unverified(tiny, registry, tmp_path):
    bare = tmp_path / "proj"
    shutil.copytree(tiny.root, bare, ignore=shutil.ignore_patterns("references"))
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("tiny"), "--prefix",
                   str(tmp_path / "p"), root=bare)
    assert out.returncode == 11 and "no committed reference" in out.stderr and "--allow-unverified" in out.stderr
    assert not (tmp_path / "p").exists()
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("tiny"), "--prefix",
                   str(tmp_path / "p"), "--allow-unverified", root=bare)
    assert out.returncode == 0, out.stderr
    origin = json.loads((tmp_path / "p" / "share" / "onebit-build" / "binary-cache.json").read_text())
    assert origin["accepted"] == "unverified" and "--allow-unverified" in origin["detail"]
    out = tiny.cli(tmp_path / "w2", "--recipe", "tiny", "build", "--binary-cache", registry.ref("tiny"),
                   "--allow-unverified", root=bare)
    assert out.returncode == 0 and "; UNVERIFIED" in out.stderr, out.stderr


def test_install_check_builds_here_and_compares_in_one_command(tiny, registry, tmp_path):
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", registry.ref("tiny"), "--check",
                   "--prefix", str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    assert "check    ok  1/1 pulled output(s) byte-identical to the build here" in out.stderr
    assert (tmp_path / "w" / "build").is_dir() and sha256(tmp_path / "p" / "bin" / "hello") == sha256(tiny.hello)
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--check", "--prefix", str(tmp_path / "p"))
    assert out.returncode == 2 and "it needs --from" in out.stderr


def test_credentials_come_from_the_environment_or_docker_config_and_are_never_shown(tiny, tmp_path):
    secret = "pw-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:20]
    reg = start_registry(tmp_path / "auth", users={"alice": secret})
    try:
        creds = {"ONEBIT_OCI_USERNAME": "alice", "ONEBIT_OCI_PASSWORD": secret}
        out = tiny.cli(tiny.ws, "--recipe", "tiny", "publish", reg.ref("tiny"), env=creds)
        assert out.returncode == 0, out.stderr
        home = tmp_path / "home"
        out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", reg.ref("tiny"), "--prefix",
                       str(tmp_path / "p"), env={"HOME": str(home)})
        assert out.returncode == 4 and "refused" in out.stderr and "docker login" in out.stderr, out.stderr
        (home / ".docker").mkdir(parents=True)
        auth = base64.b64encode(f"alice:{secret}".encode()).decode()
        (home / ".docker" / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": auth}}}))
        out = tiny.cli(tmp_path / "w", "-v", "--recipe", "tiny", "install", "--from", reg.ref("tiny"), "--prefix",
                       str(tmp_path / "p"), env={"HOME": str(home)})
        assert out.returncode == 0, out.stderr
        out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "doctor", "--binary-cache", reg.ref("tiny"),
                       env={"HOME": str(home)})
        assert re.search(r"ok +binary cache +oci://\S+ answers \(registry/2.0\); credentials from \S+config.json",
                         out.stdout), out.stdout
        for text in (out.stdout, out.stderr, (tmp_path / "p" / "share" / "onebit-build" / "binary-cache.json")
                     .read_text(), *(p.read_text(errors="replace") for p in (tmp_path / "w").rglob("*.log"))):
            assert secret not in text and auth not in text
    finally:
        reg.stop()


def test_doctor_says_whether_the_binary_cache_answers(tiny, registry, tmp_path):
    from onebit_build.running.ports import free_port

    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "doctor", "--binary-cache", registry.ref("tiny"))
    assert re.search(r"ok +binary cache +oci://\S+/tiny answers \(registry/2.0\); no credentials", out.stdout)
    out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "doctor", "--binary-cache",
                   f"oci://127.0.0.1:{free_port()}/tiny")
    assert out.returncode == 7 and re.search(r"FAIL +binary cache +.*did not answer \(connection refused\)", out.stdout)
    assert "builds fall back to compiling here" in out.stdout


def lying_copy(tiny: Tiny, registry: LocalRegistry, *, declare: int = 0, **how):
    """A lying registry serving the published tiny build: ``bin/hello`` declared ``declare``
    bytes in its manifest (0: its real size) and sent as ``how`` says."""
    import requests

    from _lying_registry import Blob, LyingRegistry

    body = requests.get(f"http://{registry.address}/v2/tiny/manifests/{tiny.digest}",
                        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=30).content
    doc = json.loads(body)
    hello = f"sha256:{sha256(tiny.hello)}"
    blobs = {}
    for layer in doc["layers"]:
        data = registry.blob_file(layer["digest"]).read_bytes()
        blobs[layer["digest"]] = Blob(data=data, **(how if layer["digest"] == hello else {}))
        if layer["digest"] == hello and declare:
            layer["size"] = declare
    return LyingRegistry(manifest=json.dumps(doc).encode(), blobs=blobs).start(), hello


def test_a_registry_cannot_choose_how_much_is_written(tiny, registry, tmp_path):
    real = tiny.hello.stat().st_size
    # The reference's digest declared as 200 MB: refused from the reference's size, before the blob is asked for.
    liar, hello = lying_copy(tiny, registry, declare=200_000_000, pad_to=200_000_000)
    try:
        out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", liar.ref(), "--prefix",
                       str(tmp_path / "p"))
        assert out.returncode == 5, out.stderr
        assert f"declares 200000000 bytes for bin/hello, but the committed reference names {hello[:19]}... with " \
               f"{real} bytes" in out.stderr, out.stderr
        assert liar.sent.get(hello, 0) == 0 and not (tmp_path / "p").exists()
    finally:
        liar.stop()
    # Declared honestly, but the body runs on (no length announced), or is announced longer: cut off, refused.
    for how in ({"pad_to": 200_000_000}, {"announce": 200_000_000}):
        liar, hello = lying_copy(tiny, registry, **how)
        try:
            out = tiny.cli(tmp_path / "w", "--recipe", "tiny", "install", "--from", liar.ref(), "--prefix",
                           str(tmp_path / "p"))
            assert out.returncode == 5, out.stderr
            assert f"blob {hello[:19]}... for bin/hello is longer than the {real} bytes expected" in out.stderr
            assert liar.sent.get(hello, 0) < 20_000_000, liar.sent  # what the sockets' buffers took, no more
            assert not (tmp_path / "p").exists() and not any((tmp_path / "w" / "pulled").iterdir())
        finally:
            liar.stop()


def test_a_blob_sent_one_byte_at_a_time_meets_its_deadline(tiny, registry, tmp_path):
    import time

    from onebit_build.distribution.oci import Registry, RegistryUnreachable, blob_deadline
    from onebit_build.distribution.oci_ref import parse_ref

    assert blob_deadline(0) == 60 and blob_deadline(912_256) < 64 and blob_deadline(1 << 30) == 60 + 4096
    liar, hello = lying_copy(tiny, registry, every=0.05)
    try:
        t0 = time.monotonic()
        with Registry(parse_ref(liar.ref(), "test")) as reg, pytest.raises(RegistryUnreachable) as caught:
            reg.download(hello, tiny.hello.stat().st_size, tmp_path / "hello", name="bin/hello", deadline=1.5)
        assert time.monotonic() - t0 < 5
        line = str(caught.value)
        assert "\n" not in line and f"blob {hello[:19]}... for bin/hello did not arrive within 1.5 s (" in line, line
        assert not (tmp_path / "hello").exists()
    finally:
        liar.stop()
