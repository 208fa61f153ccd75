"""Signing and public keys: what is refused (one line, exit 2, before anything is built, the
key's bytes never in it), --signing-key against $ONEBIT_SIGNING_KEY, and both key types
signing a DSSE envelope that verifies and fails once a byte of it changes."""

from __future__ import annotations

import base64
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from _evidence import tiny_project, write_key
from onebit_build.core.errors import ConfigError
from onebit_build.evidence.envelope import Opened, sign, signature_problem
from onebit_build.evidence.keys import ENV_SIGNING_KEY, load_public_key, load_signing_key, signing_key_from

STATEMENT = {"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": "x", "digest": {"sha256": "0" * 64}}],
             "predicateType": "https://slsa.dev/provenance/v1", "predicate": {"a": 1}}


@pytest.mark.parametrize("kind", ["ecdsa", "ed25519"])
def test_both_key_types_sign_and_a_changed_byte_fails(kind, tmp_path):
    pair = write_key(tmp_path, "k", kind)
    key, pub = load_signing_key(pair.private), load_public_key(pair.public)
    assert key.keyid == pub.keyid and key.keyid not in repr(key.signer.__class__) and "PRIVATE" not in repr(key)
    env = sign(STATEMENT, key)
    opened = Opened(path=tmp_path / "s", statement=STATEMENT, envelope=env, keyids=(key.keyid,))
    assert signature_problem(opened, pub) is None
    edited = base64.b64decode(env["payload"]).replace(b'"a":1', b'"a":2')
    changed = {**env, "payload": base64.b64encode(edited).decode()}
    bad = Opened(path=tmp_path / "s", statement=STATEMENT, envelope=changed, keyids=(key.keyid,))
    assert "it was changed after signing" in signature_problem(bad, pub)


def test_refused_keys_say_why_and_never_show_the_key(tmp_path):
    rsa_pair = write_key(tmp_path, "rsa", "rsa")
    ec_pair = write_key(tmp_path, "ec")
    encrypted = tmp_path / "enc.pem"
    private = serialization.load_pem_private_key(ec_pair.private.read_bytes(), None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    encrypted.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.BestAvailableEncryption(b"pw")))
    cases = [(lambda: load_signing_key(rsa_pair.private), "cannot sign here"),
             (lambda: load_signing_key(encrypted), "is encrypted with a passphrase"),
             (lambda: load_signing_key(tmp_path / "none.pem"), "no such file"),
             (lambda: load_signing_key(tmp_path), "is a folder"),
             (lambda: load_public_key(ec_pair.private), "give the public half, not the private key"),
             (lambda: load_public_key(rsa_pair.public), "is not supported")]
    secret = "".join(ec_pair.private.read_text().splitlines()[1:-1])
    for call, said in cases:
        with pytest.raises(ConfigError) as err:
            call()
        assert said in str(err.value) and secret[:24] not in str(err.value)


def test_signing_key_option_comes_before_the_environment(tmp_path):
    a, b = write_key(tmp_path, "a"), write_key(tmp_path, "b", "ed25519")
    assert signing_key_from(None, {}) is None
    assert signing_key_from(None, {ENV_SIGNING_KEY: str(b.private)}).scheme == "ed25519"
    assert signing_key_from(a.private, {ENV_SIGNING_KEY: str(b.private)}).origin == "--signing-key"
    with pytest.raises(ConfigError, match=r"\$ONEBIT_SIGNING_KEY .*no such file"):
        signing_key_from(None, {ENV_SIGNING_KEY: str(tmp_path / "gone.pem")})


def test_a_bad_key_stops_the_build_before_it_starts(tmp_path):
    proj = tiny_project(tmp_path)
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    os.chmod(bad, 0o600)
    out = proj.cli("--recipe", "tiny", "build", env={ENV_SIGNING_KEY: str(bad)})
    assert out.returncode == 2 and "$ONEBIT_SIGNING_KEY" in out.stderr and "not a PEM private key" in out.stderr
    assert not (proj.ws / "build").exists()
    out = proj.cli("--recipe", "tiny", "--signing-key", str(bad), "location")
    assert out.returncode == 2 and "--signing-key is not taken by 'location'" in out.stderr
