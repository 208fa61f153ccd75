"""A build's signed provenance on a tiny real CMake project with one patch, through the CLI:
the statement the in-toto bindings validate, verify-provenance VERIFIED on the build folder,
an install prefix and a folder holding the file and the statement; each tampering NOT
VERIFIED with its own message; in-toto-verify with a layout made here accepts the build's
link and rejects an edited one; the key never shows, nothing signed names the machine."""

from __future__ import annotations

import getpass
import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2
from in_toto_attestation.v1.statement import Statement

from _evidence import (KeyPair, TinyProject, copy_build, flip_byte, payload, read_envelope, tiny_project,
                       with_payload, write_envelope, write_key)
from onebit_build.core.fsutil import sha256_file


@pytest.fixture(scope="module")
def signed(tmp_path_factory) -> tuple[TinyProject, KeyPair, Path]:
    """The tiny project built with an ECDSA P-256 key, its reference committed to the project."""
    tmp = tmp_path_factory.mktemp("signed")
    proj, key = tiny_project(tmp), write_key(tmp / "keys", "builder")
    ref = proj.cli("--recipe", "tiny", "verify", "--write-reference", str(proj.root / "references" / "tiny" / "r.json"))
    assert ref.returncode == 0, ref.stderr
    out = proj.cli("--recipe", "tiny", "--signing-key", str(key.private), "build")
    assert out.returncode == 0, out.stderr
    assert re.search(r"provenance signed by key [0-9a-f]{16}", out.stderr), out.stderr
    return proj, key, proj.build_folder()


def verify(proj: TinyProject, *args: str):
    return proj.cli("verify-provenance", *args)


def test_the_statement_is_valid_in_toto_and_verifies(signed):
    proj, key, folder = signed
    env = read_envelope(folder / "provenance.intoto.jsonl")
    assert env["payloadType"] == "application/vnd.in-toto+json" and len(env["signatures"]) == 1
    doc = payload(env)
    subjects = [json_format.ParseDict(s, resource_descriptor_pb2.ResourceDescriptor()) for s in doc["subject"]]
    Statement(subjects, doc["predicateType"], doc["predicate"]).validate()  # the bindings' own check
    json_format.ParseDict(doc["predicate"], provenance_pb2.Provenance())  # unknown fields would raise
    assert [s["name"] for s in doc["subject"]] == ["hello"]
    assert doc["subject"][0]["digest"]["sha256"] == sha256_file(folder / "hello")
    roles = {d["annotations"]["role"] for d in doc["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert {"source", "patch", "tool"} <= roles
    meta = doc["predicate"]["runDetails"]["metadata"]
    assert meta["startedOn"].endswith("Z") and meta["finishedOn"].endswith("Z")
    out = verify(proj, str(folder), "--key", str(key.public))
    assert out.returncode == 0 and out.stdout.strip() == "VERIFIED", out.stderr
    for check in ("signature", "subjects", "byproducts", "materials", "references", "build key"):
        assert re.search(rf"^  {check} +ok ", out.stderr, re.M), out.stderr
    assert "1 source(s) and 1 patch(es)" in out.stderr and "1/1 recomputed" in out.stderr


def test_manifest_times_are_utc_and_its_tools_carry_digests(signed):
    proj, _key, folder = signed
    man = json.loads((folder / "build-manifest.json").read_text())
    assert man["created"].endswith("Z") and man["started"].endswith("Z")
    tools = {t["name"]: t for t in man["toolchain_files"]}
    assert {"cmake", "ninja", "c_compiler"} <= set(tools)
    for t in tools.values():
        assert re.fullmatch(r"[0-9a-f]{64}", t["sha256"]) and t["purl"].startswith("pkg:")
    assert tools["c_compiler"]["sha256"] == sha256_file(Path(tools["c_compiler"]["path"]).resolve())


def test_nothing_signed_names_the_machine_and_the_key_never_shows(signed):
    proj, key, folder = signed
    text = json.dumps(payload(read_envelope(folder / "provenance.intoto.jsonl")))
    link = json.dumps(payload(read_envelope(next(folder.glob("build.*.link")))))
    for signed_text in (text, link):
        assert str(Path.home()) not in signed_text and str(proj.ws) not in signed_text
        assert not re.search(rf"(?<![\w.-]){re.escape(socket.gethostname())}(?![\w-])", signed_text)
        assert f"/{getpass.getuser()}/" not in signed_text
    assert "${WORKSPACE}/src/tiny-" in text
    secret = "".join(key.private.read_text().splitlines()[1:-1])
    out = proj.cli("-v", "--recipe", "tiny", "--signing-key", str(key.private), "build")
    written = [p for p in (*folder.rglob("*"), *(proj.ws / "runs").rglob("*")) if p.is_file()]
    for blob in (out.stdout, out.stderr, *(p.read_text(errors="replace") for p in written)):
        assert secret[:40] not in blob.replace("\n", "")


def test_install_carries_the_evidence_and_a_download_folder_verifies(signed, tmp_path):
    """On the other recipe (its own build folder: the signed one stays as it is), with an
    Ed25519 key; installed again without a key, the build and the prefix stay signed."""
    proj, _key, _folder = signed
    key = write_key(tmp_path / "keys", "ed", "ed25519")
    shout_ref = proj.root / "references" / "shout" / "r.json"
    ref = proj.cli("--recipe", "shout", "verify", "--write-reference", str(shout_ref))
    assert ref.returncode == 0, ref.stderr
    prefix = tmp_path / "prefix"
    out = proj.cli("--recipe", "shout", "--signing-key", str(key.private), "install", "--prefix", str(prefix))
    assert out.returncode == 0, out.stderr
    share = prefix / "share" / "onebit-build"
    assert {"provenance.intoto.jsonl", "sbom.cdx.json", "build-manifest.json"} <= {p.name for p in share.iterdir()}
    out = verify(proj, str(prefix), "--key", str(key.public))
    assert out.returncode == 0 and "install prefix" in out.stderr and "(ed25519)" in out.stderr, out.stderr
    download = tmp_path / "download"
    download.mkdir()
    shutil.copy2(prefix / "bin" / "hello", download)
    shutil.copy2(share / "provenance.intoto.jsonl", download)
    out = verify(proj, str(download / "provenance.intoto.jsonl"), "--key", str(key.public))
    assert out.returncode == 0 and "1/1 files match" in out.stderr, out.stderr
    again = proj.cli("--recipe", "shout", "install", "--prefix", str(prefix))
    assert again.returncode == 0 and "(kept: the outputs are those it names)" in again.stderr, again.stderr
    assert (share / "provenance.intoto.jsonl").is_file() and not (share / "provenance.json").exists()
    out = verify(proj, str(prefix), "--key", str(key.public))
    assert out.returncode == 0 and out.stdout.strip() == "VERIFIED", out.stderr
    out = verify(proj, str(prefix))
    assert out.returncode == 12 and "UNVERIFIED: signed by key" in out.stderr and "give --key" in out.stderr, out.stderr


def test_a_run_without_the_key_keeps_the_signed_evidence_of_unchanged_outputs(signed, tmp_path):
    """A command that passes the build stage without the key (install, build) keeps the
    statement, its link and the manifest it names; the run folder gets copies of them."""
    proj, key, folder = signed
    before = {p.name: sha256_file(p) for p in folder.iterdir()
              if p.name.endswith((".intoto.jsonl", ".link", ".cdx.json")) or p.name == "build-manifest.json"}
    assert "provenance.intoto.jsonl" in before and any(n.endswith(".link") for n in before)
    for args in (("install", "--prefix", str(tmp_path / "p")), ("build",)):
        out = proj.cli("--recipe", "tiny", *args)
        assert out.returncode == 0 and "provenance signed by key" in out.stderr and "(kept" in out.stderr, out.stderr
        assert {n: sha256_file(folder / n) for n in before} == before and not (folder / "provenance.json").exists()
    run = sorted((proj.ws / "runs").iterdir())[-1]
    assert (run / "provenance.intoto.jsonl").read_bytes() == (folder / "provenance.intoto.jsonl").read_bytes()
    share = tmp_path / "p" / "share" / "onebit-build"
    assert (share / "provenance.intoto.jsonl").is_file() and any(share.glob("build.*.link"))
    for where in (folder, tmp_path / "p", run):
        out = verify(proj, str(where), "--key", str(key.public))
        assert out.returncode == 0 and out.stdout.strip() == "VERIFIED", (where, out.stderr)


def test_signed_evidence_of_other_outputs_is_not_kept(signed):
    """Decided on the real files of the signed build: other output bytes, another file name,
    a manifest changed beside the statement, or an unsigned statement: nothing is kept."""
    from onebit_build.evidence.emit import keep_signed

    _proj, _key, folder = signed
    outputs = {("hello", sha256_file(folder / "hello"))}
    copy = copy_build(folder, "keep")
    assert keep_signed(copy, {("hello", "0" * 64)}, ()) is None
    assert keep_signed(copy, {*outputs, ("other", "1" * 64)}, ()) is None
    kept = keep_signed(copy, outputs, ())
    assert kept is not None and kept.kept and kept.link is not None and kept.keyid
    man = copy / "build-manifest.json"
    man.write_text(man.read_text().replace('"created"', '"created" ', 1))
    assert keep_signed(copy, outputs, ()) is None
    envelope = read_envelope(folder / "provenance.intoto.jsonl")
    write_envelope(copy / "provenance.intoto.jsonl", {**envelope, "signatures": []})
    shutil.copy2(folder / "build-manifest.json", man)
    assert keep_signed(copy, outputs, ()) is None


def test_flipped_byte_in_an_output(signed):
    proj, key, folder = signed
    copy = copy_build(folder, "flipped")
    flip_byte(copy / "hello")
    out = verify(proj, str(copy), "--key", str(key.public))
    assert out.returncode == 11, out.stderr
    assert re.search(r"NOT VERIFIED: subjects: subject hello: sha256 [0-9a-f]{16} here, the statement says", out.stderr)


def test_edited_statement(signed):
    proj, key, folder = signed
    copy = copy_build(folder, "edited")
    env = read_envelope(copy / "provenance.intoto.jsonl")
    doc = payload(env)
    doc["predicate"]["buildDefinition"]["externalParameters"]["defines"] = ["GREETING=pwned"]
    write_envelope(copy / "provenance.intoto.jsonl", with_payload(env, doc))
    out = verify(proj, str(copy), "--key", str(key.public))
    assert out.returncode == 11 and "does not match the statement: it was changed after signing" in out.stderr


def test_statement_signed_by_another_key(signed, tmp_path):
    proj, key, folder = signed
    other = write_key(tmp_path, "other", "ed25519")
    copy = copy_build(folder, "other-key")
    from onebit_build.evidence.envelope import envelope_line, sign
    from onebit_build.evidence.keys import load_signing_key

    doc = payload(read_envelope(copy / "provenance.intoto.jsonl"))
    (copy / "provenance.intoto.jsonl").write_text(envelope_line(sign(doc, load_signing_key(other.private))))
    out = verify(proj, str(copy), "--key", str(key.public))
    assert out.returncode == 11 and "signed by another key" in out.stderr, out.stderr
    assert verify(proj, str(copy), "--key", str(other.public)).returncode == 0  # the content itself is intact


def test_removed_output(signed):
    proj, key, folder = signed
    copy = copy_build(folder, "removed")
    (copy / "hello").unlink()
    out = verify(proj, str(copy), "--key", str(key.public))
    assert out.returncode == 11 and "NOT VERIFIED: subjects: subject hello: missing" in out.stderr, out.stderr


def test_subject_whose_name_climbs_out_of_the_folder(signed):
    """Signed with the builder's own key (the signature holds): the name is refused, and the
    file it names, made to match, is never read."""
    proj, key, folder = signed
    copy = copy_build(folder, "climbing")
    from onebit_build.evidence.envelope import envelope_line, sign
    from onebit_build.evidence.keys import load_signing_key

    doc = payload(read_envelope(copy / "provenance.intoto.jsonl"))
    bait = copy.parent / "x"
    bait.write_bytes(b"outside")
    doc["subject"].append({"name": "../x", "digest": {"sha256": sha256_file(bait)}})
    (copy / "provenance.intoto.jsonl").write_text(envelope_line(sign(doc, load_signing_key(key.private))))
    out = verify(proj, str(copy), "--key", str(key.public))
    assert out.returncode == 11 and "subject '../x': its name '../x' leaves the folder" in out.stderr, out.stderr
    assert re.search(r"^  signature +ok ", out.stderr, re.M)


def test_hostile_statements_fail_in_one_line(signed, tmp_path):
    """A signed statement whose free-form parameters are not this tool's shape, and a file
    nested too deep to parse: NOT VERIFIED with what is wrong, never a traceback."""
    proj, key, folder = signed
    copy = copy_build(folder, "malformed")
    from onebit_build.evidence.envelope import envelope_line, sign
    from onebit_build.evidence.keys import load_signing_key

    doc = payload(read_envelope(copy / "provenance.intoto.jsonl"))
    doc["predicate"]["buildDefinition"]["internalParameters"]["components"] = ["x", 5]
    (copy / "provenance.intoto.jsonl").write_text(envelope_line(sign(doc, load_signing_key(key.private))))
    out = verify(proj, str(copy), "--key", str(key.public))
    assert out.returncode == 11 and "the statement's build key part is malformed" in out.stderr, out.stderr
    deep = tmp_path / "deep.intoto.jsonl"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    out = verify(proj, str(deep), "--key", str(key.public))
    assert out.returncode == 11 and "is not an in-toto statement: not JSON (RecursionError" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_patch_changed_in_the_checkout_is_named(signed, tmp_path):
    proj, key, folder = signed
    root = tmp_path / "proj"
    shutil.copytree(proj.root, root)
    patch = next((root / "patches" / "tiny").glob("0001-*.patch"))
    patch.write_text(patch.read_text() + "\n")
    out = TinyProject(root=root, mirrors=proj.mirrors, ws=proj.ws).cli("verify-provenance", str(folder), "--key",
                                                                        str(key.public))
    assert out.returncode == 11 and f"patches/tiny/{patch.name}: sha256" in out.stderr, out.stderr


def test_in_toto_verify_accepts_the_link_and_rejects_an_edited_one(signed, tmp_path):
    proj, key, folder = signed
    link = next(folder.glob("build.*.link"))
    owner = write_key(tmp_path / "owner", "owner", "ed25519")
    good, bad = tmp_path / "good", tmp_path / "bad"
    for d in (good, bad):
        d.mkdir()
        write_layout(d / "root.layout", functionary=key.public, owner=owner.private)
    shutil.copy2(link, good / link.name)
    env = read_envelope(link)
    doc = payload(env)
    doc["products"]["hello"]["sha256"] = "0" * 64
    write_envelope(bad / link.name, with_payload(env, doc))
    verifier = str(Path(sys.executable).parent / "in-toto-verify")
    for d, rc in ((good, 0), (bad, 1)):
        out = subprocess.run([verifier, "--layout", str(d / "root.layout"), "--verification-keys", str(owner.public),
                              "--link-dir", str(d)], capture_output=True, text=True, timeout=120)
        assert out.returncode == rc, out.stdout + out.stderr


def write_layout(path: Path, *, functionary: Path, owner: Path) -> None:
    """A layout of one step, 'build', by the builder's key, that allows the materials a build
    names and any product; signed by the project owner's key."""
    from cryptography.hazmat.primitives import serialization
    from in_toto.models.layout import Layout, Step
    from in_toto.models.metadata import Envelope
    from securesystemslib.signer import CryptoSigner, SSlibKey

    fkey = SSlibKey.from_crypto(serialization.load_pem_public_key(functionary.read_bytes()))
    layout = Layout()
    layout.keys = {fkey.keyid: {**fkey.to_dict(), "keyid": fkey.keyid}}
    step = Step(name="build")
    step.pubkeys = [fkey.keyid]
    step.expected_materials = [["ALLOW", "sources/*"], ["ALLOW", "patches/*"], ["ALLOW", "recipes/*"],
                               ["DISALLOW", "*"]]
    step.expected_products = [["ALLOW", "*"]]
    layout.steps = [step]
    layout.set_relative_expiration(days=7)
    env = Envelope.from_signable(layout)
    env.create_signature(CryptoSigner(serialization.load_pem_private_key(owner.read_bytes(), None)))
    env.dump(str(path))
