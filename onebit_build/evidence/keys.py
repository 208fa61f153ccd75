"""Signing keys and public keys: PEM files, ECDSA P-256 or Ed25519.

A signing key is named by ``--signing-key FILE`` or by ``$ONEBIT_SIGNING_KEY`` (the path of
the file, never the key itself). Its bytes stay in this module: no message, log, manifest or
statement carries them; only the key id (a sha256 over the public key) and the public key
are shown. A public key for ``verify-provenance --key`` is a PEM ``PUBLIC KEY`` file, as
``openssl pkey -pubout`` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from securesystemslib.signer import CryptoSigner, SSlibKey

from onebit_build.core.errors import ConfigError
from onebit_build.core.safepath import read_named, warn_if_shared

ENV_SIGNING_KEY = "ONEBIT_SIGNING_KEY"
MAX_KEY_BYTES = 64 * 1024  # a PEM key is a few hundred bytes; anything this large is not one
MAKE_KEY = ("make one with 'openssl genpkey -algorithm ed25519 -out key.pem' and its public half with "
            "'openssl pkey -in key.pem -pubout -out key.pub'")


@dataclass(frozen=True, kw_only=True)
class SigningKey:
    """A private key ready to sign. Its repr names only the key id and where it came from."""

    signer: CryptoSigner = field(repr=False, compare=False)
    public: SSlibKey = field(repr=False, compare=False)
    keyid: str
    scheme: str
    origin: str  # "--signing-key" or "$ONEBIT_SIGNING_KEY", for messages


def _read(path: Path, what: str, origin: str) -> bytes:
    data = read_named(path, origin, limit=MAX_KEY_BYTES, what=f"a PEM {what}",
                      hint=f"give the path of a PEM {what}; {MAKE_KEY}")
    if b"-----BEGIN" not in data:
        raise ConfigError(f"{origin} {path} is not a PEM {what}", hint=f"give a PEM file; {MAKE_KEY}")
    return data


def _supported(key: object) -> bool:
    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        return True
    return isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) and \
        isinstance(key.curve, ec.SECP256R1)


def load_signing_key(path: Path, origin: str = "--signing-key") -> SigningKey:
    """The signing key in the PEM file ``path``. ConfigError (the key's bytes never in it)
    for a missing, unreadable, encrypted or unsupported key."""
    data = _read(path, "private key", origin)
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # the key is encrypted
        raise ConfigError(f"{origin} {path} is encrypted with a passphrase",
                          hint="give an unencrypted key file readable by you alone (chmod 600), e.g. on a tmpfs: "
                               "'openssl pkey -in key.pem -out plain.pem'") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{origin} {path} is not a PEM private key ({type(exc).__name__})",
                          hint=f"give a PKCS#8 or SEC1 PEM file; {MAKE_KEY}") from None
    if not _supported(private):
        raise ConfigError(f"{origin} {path}: a {type(private).__name__.removeprefix('_')} key cannot sign here",
                          hint=f"use an ECDSA P-256 or Ed25519 key; {MAKE_KEY}")
    warn_if_shared(path, origin)
    public = SSlibKey.from_crypto(private.public_key())
    return SigningKey(signer=CryptoSigner(private, public), public=public, keyid=public.keyid, scheme=public.scheme,
                      origin=origin)


def load_public_key(path: Path, origin: str = "--key") -> SSlibKey:
    """The public key in the PEM file ``path`` (ECDSA P-256 or Ed25519)."""
    data = _read(path, "public key", origin)
    try:
        public = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        hint = "give the public half, not the private key" if b"PRIVATE KEY" in data else f"{MAKE_KEY}"
        raise ConfigError(f"{origin} {path} is not a PEM public key ({type(exc).__name__})", hint=hint) from None
    if not _supported(public):
        raise ConfigError(f"{origin} {path}: a {type(public).__name__.removeprefix('_')} key is not supported",
                          hint="use the public half of an ECDSA P-256 or Ed25519 key")
    return SSlibKey.from_crypto(public)


def signing_key_from(given: Path | str | None, environ: Mapping[str, str]) -> SigningKey | None:
    """The signing key ``--signing-key`` names, else the one ``$ONEBIT_SIGNING_KEY`` names;
    None when neither is given (the statements are then written unsigned)."""
    if given:
        return load_signing_key(Path(given).expanduser(), "--signing-key")
    from_env = environ.get(ENV_SIGNING_KEY, "")
    if from_env:
        return load_signing_key(Path(from_env).expanduser(), f"${ENV_SIGNING_KEY}")
    return None
