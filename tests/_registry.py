"""A real OCI registry on 127.0.0.1 for the binary-cache tests: Debian's ``docker-registry``
(the distribution project's registry) with a configuration of the test's own, a filesystem
store in the test's folder, an access log, and optionally htpasswd logins. Started by the
test, stopped by its pid."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from _support import end

PROGRAM = "docker-registry"


def need_registry() -> str:
    found = shutil.which(PROGRAM)
    if found is None:
        pytest.skip(f"{PROGRAM} is not installed (apt-get install docker-registry; system-packages.txt lists it)")
    return found


@dataclass
class LocalRegistry:
    port: int
    root: Path  # the store
    log: Path
    proc: subprocess.Popen

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ref(self, repo: str = "builds", tag: str | None = None) -> str:
        return f"oci://{self.address}/{repo}" + (f":{tag}" if tag else "")

    def blob_file(self, digest: str) -> Path:
        """Where the store keeps a blob (the distribution project's filesystem layout)."""
        hexd = digest.split(":", 1)[1]
        return self.root / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexd[:2] / hexd / "data"

    def requests_seen(self) -> list[tuple[str, str]]:
        """(method, path) of every request in the access log so far."""
        text = self.log.read_text(errors="replace")
        return re.findall(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (/v2/\S*) HTTP', text)

    def stop(self) -> None:
        end(self.proc, grace=10)


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash for an htpasswd file, made by the system's libcrypt (libxcrypt)."""
    lib = ctypes.CDLL("libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    setting = lib.crypt_gensalt(b"$2b$", 5, None, 0)
    return lib.crypt(password.encode(), setting).decode()


def start_registry(folder: Path, *, store: Path | None = None, users: dict[str, str] | None = None,
                   port: int | None = None) -> LocalRegistry:
    """A registry serving ``store`` (default: ``folder/store``) on a free port of 127.0.0.1."""
    from onebit_build.running.ports import free_port

    program = need_registry()
    folder.mkdir(parents=True, exist_ok=True)
    store = store or folder / "store"
    port = port or free_port()
    auth = ""
    if users:
        (folder / "htpasswd").write_text("".join(f"{u}:{bcrypt_hash(p)}\n" for u, p in users.items()))
        auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {folder / 'htpasswd'}\n"
    (folder / "config.yml").write_text(textwrap.dedent(f"""\
        version: 0.1
        log:
          level: warn
        storage:
          filesystem:
            rootdirectory: {store}
          delete:
            enabled: true
        http:
          addr: 127.0.0.1:{port}
          secret: test-only-upload-secret
        """) + auth)
    log = folder / "registry.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    with open(log, "ab") as out:
        proc = subprocess.Popen([program, "serve", str(folder / "config.yml")], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    reg = LocalRegistry(port=port, root=store, log=log, proc=proc)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{program} exited at start: {log.read_text()[-2000:]}")
        try:
            if requests.get(f"http://{reg.address}/v2/", timeout=2).status_code in (200, 401):
                return reg
        except requests.ConnectionError:
            time.sleep(0.2)
    reg.stop()
    raise AssertionError(f"{program} did not answer within 30 s: {log.read_text()[-2000:]}")


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with its sha256 (a link: its target), to see that nothing changed."""
    import hashlib

    return {str(p.relative_to(folder)): (f"-> {p.readlink()}" if p.is_symlink() else
                                         hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "/")
            for p in sorted(folder.rglob("*"))}


def push_altered(registry: LocalRegistry, repo: str, digest: str, tree: Path, *, to: str, tag: str,
                 flip: str | None = None, key: str | None = None) -> None:
    """What someone with write access to the registry could push: the build published as
    ``repo@digest`` with one byte of ``bin/<flip>`` changed and its build manifest recording
    the new bytes (every digest consistent), or with another ``key``; under ``to:tag``."""
    import hashlib
    import json

    from onebit_build.distribution.binary_cache import config_bytes, entry_of, manifest_doc, parse_manifest
    from onebit_build.distribution.oci import Registry
    from onebit_build.distribution.oci_ref import parse_ref

    body = requests.get(f"http://{registry.address}/v2/{repo}/manifests/{digest}",
                        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=30).content
    art = parse_manifest(body, "the original")
    for e in art.entries:
        (tree / e.rel).parent.mkdir(parents=True, exist_ok=True)
        data = registry.blob_file(e.digest).read_bytes()
        if e.link is not None:
            (tree / e.rel).symlink_to(data.decode())
        else:
            (tree / e.rel).write_bytes(data)
    man_path = tree / "share" / "onebit-build" / "build-manifest.json"
    if flip:
        changed = bytearray((tree / "bin" / flip).read_bytes())
        changed[len(changed) // 2] ^= 0x01
        (tree / "bin" / flip).write_bytes(bytes(changed))
        man = json.loads(man_path.read_text())
        for comp in man["components"]:
            for out in comp["outputs"]:
                if Path(out["path"]).name == flip:
                    out.update(sha256=hashlib.sha256(changed).hexdigest(), size=len(changed))
        man_path.write_text(json.dumps(man))
    entries = [entry_of(tree / e.rel, e.rel) for e in art.entries]
    key = key or art.key
    config = config_bytes(recipe=art.recipe, key=key, verified="verified")
    doc = manifest_doc(entries, recipe=art.recipe, key=key, created="now", verified="verified", config=config)
    with Registry(parse_ref(registry.ref(to), "test"), push=True) as reg:
        for e in entries:
            data = e.link.encode() if e.link is not None else (tree / e.rel).read_bytes()
            reg.upload(e.digest, e.size, lambda data=data: data)
        reg.upload(doc["config"]["digest"], len(config), lambda: config)
        reg.put_manifest(tag, json.dumps(doc).encode())
