"""DSSE envelopes of in-toto statements: signed with :class:`keys.SigningKey`, opened and
checked against a public key.

A signed statement is written as ``NAME.intoto.jsonl``: one DSSE envelope on one line (the
form GitHub's and SLSA's tools write and ``cosign verify-blob-attestation`` reads). An
unsigned one is the bare statement, ``NAME.json``. Both are read by :func:`read_statement`.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import Key

from onebit_build.core.errors import VerifyError
from onebit_build.core.safepath import read_named
from onebit_build.evidence.keys import SigningKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SIGNED_SUFFIX = ".intoto.jsonl"
MAX_STATEMENT_BYTES = 32 << 20


def payload_bytes(doc: dict[str, Any]) -> bytes:
    """The bytes a statement is signed as: JSON with sorted keys, no spaces. Pure."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sign(doc: dict[str, Any], key: SigningKey, payload_type: str = PAYLOAD_TYPE) -> dict[str, Any]:
    """The DSSE envelope of ``doc`` signed with ``key``, as a JSON-ready dict."""
    env = Envelope(payload=payload_bytes(doc), payload_type=payload_type, signatures={})
    env.sign(key.signer)
    return env.to_dict()


def envelope_line(envelope: dict[str, Any]) -> str:
    """One envelope as one line of a ``.intoto.jsonl`` file. Pure."""
    return json.dumps(envelope, separators=(",", ":")) + "\n"


@dataclass(frozen=True, kw_only=True)
class Opened:
    """A statement file read: the statement, and its envelope when it was signed."""

    path: Path
    statement: dict[str, Any]
    envelope: dict[str, Any] | None = None  # None: the file is a bare, unsigned statement
    keyids: tuple[str, ...] = field(default=())

    @property
    def signed(self) -> bool:
        return self.envelope is not None and bool(self.keyids)


def _bad(path: Path, why: str) -> VerifyError:
    return VerifyError(f"{path} is not an in-toto statement: {why}",
                       hint="give a statement onebit-build wrote (provenance.intoto.jsonl or provenance.json)")


def read_statement(path: Path) -> Opened:
    """The statement in ``path``: a DSSE envelope (one line) or a bare statement. VerifyError
    naming what is wrong with a file that is neither; nothing in it is trusted yet."""
    data = read_named(path, "statement", limit=MAX_STATEMENT_BYTES, what="a statement", error=VerifyError,
                      hint="give a statement onebit-build wrote: provenance.intoto.jsonl or provenance.json")
    lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    try:
        docs = [json.loads(ln) for ln in lines] if path.name.endswith(SIGNED_SUFFIX) else [json.loads(data)]
    except (ValueError, RecursionError) as exc:
        raise _bad(path, f"not JSON ({type(exc).__name__}: {exc})") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise _bad(path, f"{len(docs)} JSON documents; one envelope or statement expected")
    doc = docs[0]
    if "payload" not in doc:
        return Opened(path=path, statement=_statement(path, doc))
    if doc.get("payloadType") != PAYLOAD_TYPE:
        raise _bad(path, f"payload type {doc.get('payloadType')!r}, not {PAYLOAD_TYPE}")
    try:
        payload = base64.b64decode(str(doc["payload"]), validate=True)
        statement = json.loads(payload)
        keyids = tuple(str(s.get("keyid", "")) for s in doc.get("signatures") or [])
    except (binascii.Error, ValueError, AttributeError, TypeError, RecursionError) as exc:
        raise _bad(path, f"the envelope's payload is not base64 JSON ({type(exc).__name__})") from None
    return Opened(path=path, statement=_statement(path, statement), envelope=doc, keyids=keyids)


def _statement(path: Path, doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
        raise _bad(path, f"its _type is not {STATEMENT_TYPE}")
    return doc


def signature_problem(opened: Opened, key: Key) -> str | None:
    """Why the envelope does not carry a valid signature by ``key``; None when it does."""
    if opened.envelope is None:
        return "the statement is not signed (no DSSE envelope)"
    if not opened.keyids:
        return "the envelope carries no signature"
    try:
        Envelope.from_dict(copy.deepcopy(opened.envelope)).verify([key], 1)  # from_dict empties what it reads
    except VerificationError:
        if key.keyid not in opened.keyids:
            ids = ", ".join(k[:16] for k in opened.keyids)
            return f"signed by another key ({ids}), not by the key given ({key.keyid[:16]})"
        return f"the signature by key {key.keyid[:16]} does not match the statement: it was changed after signing"
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        return f"the envelope is malformed ({type(exc).__name__})"
    return None
