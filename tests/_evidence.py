"""Test support for the build's evidence: real keys (ECDSA P-256, Ed25519) as PEM files, a
tiny real project with one patch built and signed through the CLI, and ways to edit a DSSE
envelope the way an attacker would."""

from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from _support import TINY_CMAKE, bare_mirror, make_patch, make_repo, project_tree, run_cli, tiny_recipe


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public: Path


def write_key(folder: Path, name: str, kind: str = "ecdsa") -> KeyPair:
    """A fresh key pair as PEM files (the private one mode 600)."""
    key = {"ecdsa": lambda: ec.generate_private_key(ec.SECP256R1()), "ed25519": ed25519.Ed25519PrivateKey.generate,
           "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)}[kind]()
    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return KeyPair(private=private, public=public)


@dataclass(frozen=True)
class TinyProject:
    root: Path
    mirrors: Path
    ws: Path

    def cli(self, *args: str, env: dict[str, str] | None = None):
        return run_cli(self.root, "--workspace", str(self.ws), "--mirror-dir", str(self.mirrors), *args, env=env)

    def build_folder(self, recipe: str = "tiny") -> Path:
        man = json.loads((self.ws / "manifests" / f"{recipe}.json").read_text())
        return Path(man["components"][-1]["build_dir"])


def tiny_project(tmp: Path) -> TinyProject:
    """The tiny C project pinned in a project of its own, with one patch in patches/tiny/."""
    src = tmp / "tiny-src"
    commit = make_repo(src, TINY_CMAKE)
    louder = '#include <stdio.h>\nint main(void) { puts(GREETING "!"); return 0; }\n'
    patch = make_patch(src, commit, {"hello.c": louder}, "say it louder", tmp / "patch-out", 1)
    mirrors = tmp / "mirrors"
    bare_mirror(src, mirrors, "tiny")
    pins = f"schema: 1\nsources:\n  tiny:\n    url: https://example.invalid/tiny.git\n    commit: {commit}\n"
    root = project_tree(tmp / "proj", pins=pins, recipes={"tiny": tiny_recipe(), "shout": tiny_recipe(
        name="shout", greeting="HELLO")}, patches={"tiny": {patch.name: patch.read_bytes()}})
    return TinyProject(root=root, mirrors=mirrors, ws=tmp / "ws")


def copy_build(folder: Path, name: str) -> Path:
    """A copy of a build folder beside it (same workspace), to tamper with."""
    dest = folder.with_name(f"{folder.name}-{name}")
    shutil.copytree(folder, dest, symlinks=True)
    return dest


def read_envelope(path: Path) -> dict:
    return json.loads(path.read_text())


def payload(envelope: dict) -> dict:
    return json.loads(base64.b64decode(envelope["payload"]))


def with_payload(envelope: dict, doc: dict) -> dict:
    """The envelope with another payload and the old signatures: an edit after signing."""
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return {**envelope, "payload": base64.b64encode(data).decode()}


def write_envelope(path: Path, envelope: dict) -> None:
    path.write_text(json.dumps(envelope, separators=(",", ":")) + "\n")


def flip_byte(path: Path, at: int = 200) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    mode = path.stat().st_mode
    path.write_bytes(bytes(data))
    os.chmod(path, mode)
