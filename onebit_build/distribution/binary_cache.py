"""A finished build as one OCI artifact, and back.

The artifact is an OCI image manifest whose layers are the files of the build's install tree
(``bin/``: the outputs and the links beside them; ``share/onebit-build/``: the build manifest
and the provenance and SBOM files beside it), one blob per file, each layer's digest the
sha256 of the file and its title the file's path in the tree. A symbolic link is a small
blob holding its target. The manifest's annotations name the recipe and the build key; a
config blob says the same for tools that show it.

Reading one back is strict: every path must be a plain relative path under ``bin/`` or
``share/onebit-build/``, a link must name a file in its own folder, nothing may appear twice,
and each file is written (by :func:`pull_into`) only from a blob whose bytes hash to the
digest the manifest names. What the files mean (the key, the reference hashes) is checked
above this floor, in ``job/pull.py``.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

from onebit_build import __version__
from onebit_build.checking.manifest import MANIFEST_NAME
from onebit_build.distribution.oci import MANIFEST_MEDIA, Registry, sha256_digest
from onebit_build.distribution.oci_ref import DIGEST, tag_part
from onebit_build.core.errors import FetchError, IntegrityError
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.names import is_file_name

ARTIFACT_TYPE = "application/vnd.onebit-build.build.v1"
CONFIG_MEDIA = "application/vnd.onebit-build.build.config.v1+json"
FILE_MEDIA = "application/vnd.onebit-build.file.v1"
LINK_MEDIA = "application/vnd.onebit-build.link.v1"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
MODE = "dev.onebit-build.mode"
RECIPE = "dev.onebit-build.recipe"
KEY = "dev.onebit-build.key"
VERDICT = "dev.onebit-build.verified"
FOLDERS = ("bin", "share/onebit-build")
CARRIED = ("*.intoto.jsonl", "*.cdx.json", "provenance.json", "build.*.link")  # evidence beside a build manifest
MAX_FILES = 4096
MAX_LINK = 255
MAX_FILE = 1 << 31  # 2 GiB for a file under bin/: no output of a recipe comes near it
MAX_EVIDENCE = 64 << 20  # a file under share/onebit-build/: a manifest, provenance, an SBOM


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One file of the tree: its path, the digest and size of its blob, its mode, and for a
    link its target (the blob then holds the target's text)."""

    rel: str
    digest: str
    size: int
    mode: int = 0o644
    link: str | None = None


@dataclass(frozen=True, kw_only=True)
class BinaryArtifact:
    recipe: str
    key: str
    entries: tuple[Entry, ...]
    created: str = ""
    verified: str = ""  # what the publisher's verify stage concluded

    def entry(self, rel: str) -> Entry | None:
        return next((e for e in self.entries if e.rel == rel), None)


def tag_of(recipe: str, key: str) -> str:
    """The tag a build is published under: its recipe and its whole build key. Pure."""
    return f"{tag_part(recipe)[:60]}-{key}"


def entry_of(source: Path, rel: str) -> Entry:
    """The entry of the file (or link) ``source``, to be published as ``rel``."""
    if source.is_symlink():
        target = os.readlink(source)
        data = target.encode()
        return Entry(rel=rel, digest=sha256_digest(data), size=len(data), link=target)
    mode = 0o755 if source.stat().st_mode & stat.S_IXUSR else 0o644
    return Entry(rel=rel, digest=f"sha256:{sha256_file(source)}", size=source.stat().st_size, mode=mode)


def manifest_doc(entries: Sequence[Entry], *, recipe: str, key: str, created: str, verified: str,
                 config: bytes) -> dict:
    """The OCI manifest of the artifact (``config``: the config blob's bytes). Pure."""
    layers = [{"mediaType": LINK_MEDIA if e.link is not None else FILE_MEDIA, "digest": e.digest, "size": e.size,
               "annotations": {TITLE: e.rel, MODE: f"{e.mode:04o}"}} for e in sorted(entries, key=lambda e: e.rel)]
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_MEDIA, "digest": sha256_digest(config), "size": len(config)},
        "layers": layers,
        "annotations": {RECIPE: recipe, KEY: key, CREATED: created, VERDICT: verified},
    }


def config_bytes(*, recipe: str, key: str, verified: str) -> bytes:
    doc = {"kind": "onebit-build/binary-cache-build", "schema": 1, "recipe": recipe, "key": key,
           "tool": {"name": "onebit-build", "version": __version__}, "verified": verified}
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


# --------------------------------------------------------------------------- reading it back


def parse_manifest(body: bytes, where: str) -> BinaryArtifact:
    """The artifact a manifest describes, every field checked; FetchError naming the first
    thing that is not a build published by onebit-build."""
    def bad(why: str) -> FetchError:
        return FetchError(f"{where} is not a build published by onebit-build: {why}",
                          hint="give the reference of a build published with 'onebit-build publish'")

    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise bad("its manifest is not JSON") from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2 or doc.get("artifactType") != ARTIFACT_TYPE:
        raise bad(f"artifactType is not {ARTIFACT_TYPE}")
    notes = doc.get("annotations")
    layers = doc.get("layers")
    if not isinstance(notes, dict) or not isinstance(layers, list) or not 0 < len(layers) <= MAX_FILES:
        raise bad("no annotations or no list of files")
    recipe, key = notes.get(RECIPE), notes.get(KEY)
    if not (isinstance(recipe, str) and is_file_name(recipe, max_len=128)):
        raise bad("no recipe name")
    if not (isinstance(key, str) and len(key) == 64 and all(c in "0123456789abcdef" for c in key)):
        raise bad("no build key")
    entries = tuple(_entry(layer, bad) for layer in layers)
    rels = [e.rel for e in entries]
    if len(set(rels)) != len(rels):
        raise bad("a path appears twice")
    return BinaryArtifact(recipe=recipe, key=key, entries=entries, created=str(notes.get(CREATED, ""))[:64],
                    verified=str(notes.get(VERDICT, ""))[:64])


def _entry(layer: object, bad: Callable[[str], FetchError]) -> Entry:
    if not isinstance(layer, dict) or not isinstance(layer.get("annotations"), dict):
        raise bad("a layer without annotations")
    notes = layer["annotations"]
    rel, digest, size = notes.get(TITLE), layer.get("digest"), layer.get("size")
    if not isinstance(rel, str) or not path_ok(rel):
        raise bad(f"the path {str(rel)[:80]!r} is not a file under {' or '.join(FOLDERS)}")
    if not (isinstance(digest, str) and DIGEST.fullmatch(digest)):
        raise bad(f"{rel}: the digest is not sha256:<64 hex>")
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise bad(f"{rel}: the size is not a number of bytes")
    cap = MAX_FILE if rel.startswith("bin/") else MAX_EVIDENCE
    if size > cap:
        raise bad(f"{rel}: {size} bytes is more than a file there may hold ({cap} bytes)")
    mode = {"0755": 0o755, "0644": 0o644}.get(str(notes.get(MODE)))
    media = layer.get("mediaType")
    if media not in (FILE_MEDIA, LINK_MEDIA) or mode is None:
        raise bad(f"{rel}: media type {str(media)[:60]!r} or mode {str(notes.get(MODE))[:8]!r} is not one it writes")
    if media == LINK_MEDIA and not 0 < size <= MAX_LINK:
        raise bad(f"{rel}: a link's target is 1 to {MAX_LINK} bytes")
    return Entry(rel=rel, digest=digest, size=size, mode=mode, link="" if media == LINK_MEDIA else None)


def path_ok(rel: str) -> bool:
    """A path the artifact may hold: a plain file name under ``bin/``, or the build manifest
    or a provenance or SBOM file under ``share/onebit-build/``. Pure."""
    path = PurePosixPath(rel)
    if str(path) != rel or not is_file_name(path.name, max_len=255):
        return False
    if str(path.parent) == "bin":
        return True
    return str(path.parent) == FOLDERS[1] and (path.name == MANIFEST_NAME
                                               or any(fnmatch.fnmatchcase(path.name, p) for p in CARRIED))


def pull_into(registry: Registry, artifact: BinaryArtifact, dest: Path, progress: Callable[[int], None] | None = None
              ) -> None:
    """Write every file of ``artifact`` under the new folder ``dest``, each from its blob,
    checked against its digest (IntegrityError otherwise); a link gets the target its blob
    holds, which must name a file of its own folder. ``dest`` is left to the caller on error."""
    dest.mkdir(parents=True)
    for folder in FOLDERS:
        (dest / folder).mkdir(parents=True, exist_ok=True)
    for e in sorted(artifact.entries, key=lambda e: e.link is not None):  # files first, then links
        target = dest / e.rel
        if e.link is None:
            registry.download(e.digest, e.size, target, progress, name=e.rel)
            os.chmod(target, e.mode)
            continue
        holder = dest / f".link-{PurePosixPath(e.rel).name}"
        registry.download(e.digest, e.size, holder, name=e.rel)
        text = holder.read_bytes().decode("utf-8", errors="replace")
        holder.unlink()
        if not is_file_name(text, max_len=255) or artifact.entry(f"{PurePosixPath(e.rel).parent}/{text}") is None:
            raise IntegrityError(f"{e.rel}: a link to {text[:80]!r}, which is not a file of the artifact's "
                                 f"{PurePosixPath(e.rel).parent}/", hint="publish the build again")
        target.symlink_to(text)


def replace_folder(new: Path, dest: Path) -> None:
    """Put the complete folder ``new`` at ``dest`` (the old one, if any, removed after)."""
    old = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")  # named as core.workspace.sweep_stale knows
    if dest.exists():
        os.replace(dest, old)
    os.replace(new, dest)
    shutil.rmtree(old, ignore_errors=True)
