"""Committed references: what a build of a recipe must give, byte for byte, on one toolchain.

A reference records the sha256 of every output and every compiled object of each component,
the kernel artifacts with their facts, and the toolchain fingerprint it was made with
(:func:`fingerprint`). ``references/<recipe>/`` holds one file per toolchain the project
supports; :func:`find_reference` picks the one whose fingerprint is this build's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from onebit_build.checking import manifest as manifest_mod
from onebit_build.checking.artifacts import PATH_FACTS, TOOL_FACTS, ArtifactSet
from onebit_build.checking.manifest import Manifest
from onebit_build.core.errors import VerifyError
from onebit_build.core.fsutil import StateError, write_state
from onebit_build.core.safepath import read_named

REF_KIND = "onebit-build/artifact-reference"
REF_SCHEMA = 1
MAX_REFERENCE_BYTES = 64 << 20  # a manifest with every object's digest is a few MiB
SPEED_FILE = "smoke-speed.json"  # the smoke's adopted speeds, beside the recipe's references
NUMERICS_FOLDER = "numerics"  # the numerical references, one per toolchain


# Every path of a committed reference is made here: the recipe's folder, the artifact
# reference of a toolchain, the smoke's speed file and the numerical reference.

def recipe_folder(references: Path, recipe: str) -> Path:
    """The committed references of ``recipe``: ``references/<recipe>/``. Pure."""
    return references / recipe


def reference_file(folder: Path, manifest: Manifest) -> Path:
    """The artifact reference of the toolchain that made ``manifest``'s build, in a recipe's folder."""
    return folder / f"{reference_name(fingerprint(manifest))}.json"


def recipe_folder_files(references: Path) -> list[Path]:
    """Every committed JSON file in a recipe's folder under the project's ``references/`` (the
    artifact references and the smoke's speed file), of every recipe, in order."""
    return sorted(references.glob("*/*.json"))


def speed_file(folder: Path) -> Path:
    """The smoke speeds adopted for a recipe (``verify-run --adopt``). Pure."""
    return folder / SPEED_FILE


def numerics_file(folder: Path, toolchain: str) -> Path:
    """The numerical reference of a recipe's build by ``toolchain`` (a :func:`reference_name`). Pure."""
    return folder / NUMERICS_FOLDER / f"{toolchain}.json"


def _version_of(entry: object) -> str:
    """``/usr/bin/cc: cc (Debian 12.2.0-14+deb12u1) 12.2.0`` -> the version line alone. Pure."""
    text = str(entry or "")
    return text.split(": ", 1)[1] if ": " in text else text


def fingerprint(manifest: Manifest) -> dict[str, str]:
    """What decides a build's bytes beyond its inputs: the system, its C library and linker,
    the compilers' versions, and the non-path facts of each kernel artifact set. CMake and
    Ninja are left out: they shape the build, not the bytes. Pure."""
    fp = {
        "os": str(manifest.host.get("os", "")),
        "machine": str(manifest.host.get("machine", "")),
        "libc": str(manifest.host.get("libc", "")),
        "linker": str(manifest.host.get("linker", "")),
        "c_compiler": _version_of(manifest.toolchain.get("c_compiler")),
        "cxx_compiler": _version_of(manifest.toolchain.get("cxx_compiler")),
    }
    for (_comp, kind), aset in sorted(manifest.artifact_sets().items()):
        for key, value in sorted(aset.facts.items()):
            if key not in PATH_FACTS:
                fp[f"{kind}.{key}"] = str(value)
    return fp


def fingerprint_text(fp: Mapping[str, str], keys: tuple[str, ...] = ("os", "c_compiler")) -> str:
    """A short form of a fingerprint for a message. Pure."""
    return "; ".join(f"{k}={fp.get(k) or '?'}" for k in keys) + "".join(
        f"; {k}={v}" for k, v in fp.items() if k.endswith(TOOL_FACTS))


def reference_name(fp: Mapping[str, str]) -> str:
    """The file name (without .json) a reference of this fingerprint is committed under,
    e.g. ``debian-gnu-linux-12-gcc-12.2.0`` or ``debian-gnu-linux-12-gcc-12.2.0_glslc-shaderc-2023.2-1``. Pure."""
    def slug(text: str) -> str:
        return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"

    system = re.sub(r"\s*\(.*\)", "", fp.get("os", "")) or "unknown-os"
    compiler = fp.get("cxx_compiler", "")
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)\s*$", compiler)  # the version the line ends with
    cc = f"{'clang' if 'clang' in compiler else 'gcc'}-{m.group(1)}" if m else slug(compiler)[:40]
    parts = [f"{slug(system)}-{cc}"]
    for key, value in sorted(fp.items()):
        if key.endswith(TOOL_FACTS):
            parts.append(f"{key.rsplit('.', 1)[1].replace('_', '-')}-{slug(value)}")
    return "_".join(dict.fromkeys(parts))


def reference_doc(manifest: Manifest | Mapping[str, Any]) -> dict[str, Any]:
    """What a reference keeps: the artifacts, their facts and the outputs' hashes; no paths
    of the machine that made it (except facts that are paths, which verify warns about)."""
    man = Manifest.of(manifest)
    return {
        "recipe": man.recipe,
        "created": man.created,
        "host": {k: v for k, v in man.host.items() if k != "hostname"},
        "toolchain": {k: v for k, v in man.toolchain.items() if k in ("cmake", "ninja", "glslc", "nvcc")},
        "fingerprint": fingerprint(man),
        "sources": [{"name": s.name, "commit": s.commit, "patch_digest": s.patch_digest,
                     "patches": [{"name": n, "sha256": h} for n, h in s.patches]} for s in man.sources],
        "components": [
            {"name": c.name,
             "artifacts": [{**a.to_dict(), "root": ""} for a in c.artifacts],
             "outputs": [{"name": o.name, "sha256": o.sha256, "size": o.size} for o in c.outputs],
             "objects": dict(c.objects)}
            for c in man.components
        ],
    }


def write_reference(path: Path, manifest: Manifest | Mapping[str, Any]) -> Path:
    doc = reference_doc(manifest)
    if not any(c["artifacts"] or c["outputs"] for c in doc["components"]):
        raise VerifyError(f"recipe {doc['recipe']} recorded no outputs and no kernel artifacts",
                          hint="declare the component's 'outputs:' in the recipe")
    write_state(path, REF_KIND, REF_SCHEMA, doc)
    return path


@dataclass(frozen=True, kw_only=True)
class Reference:
    path: Path
    recipe: str
    sets: dict[tuple[str, str], ArtifactSet]
    outputs: dict[str, list[dict[str, Any]]]
    build_dirs: dict[str, Path]  # only when the reference is a build folder
    fingerprint: dict[str, str] = field(default_factory=dict)  # the toolchain it was made with
    objects: dict[str, dict[str, str]] = field(default_factory=dict)  # per component: object -> sha256


def load_reference(path: Path) -> Reference:
    """A reference file (artifact reference or build manifest) or a build folder."""
    path = Path(path)
    build_dirs: dict[str, Path] = {}
    if path.is_dir():
        man = path / "build-manifest.json"
        if not man.exists():
            raise VerifyError(f"{path} holds no build-manifest.json",
                              hint="give a build folder made by onebit-build, or a reference file")
        path = man
    data = read_named(path, "reference", limit=MAX_REFERENCE_BYTES, what="a reference", error=VerifyError,
                      hint="check the path, or write one with --write-reference")
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise VerifyError(f"reference {path} is not valid JSON ({exc})",
                          hint="regenerate it with --write-reference") from None
    if not isinstance(doc, dict):
        raise VerifyError(f"reference {path} is not a JSON object", hint="regenerate it with --write-reference")
    kind, schema = doc.get("kind"), doc.get("schema")
    fp = doc.get("fingerprint") if isinstance(doc.get("fingerprint"), dict) else {}
    if kind == REF_KIND:
        if schema != REF_SCHEMA:
            raise VerifyError(f"reference {path} has schema {schema!r}; this version reads schema {REF_SCHEMA}",
                              hint="regenerate it with this version's --write-reference")
        recipe = str(doc.get("recipe"))
    elif kind == manifest_mod.KIND:
        if schema != manifest_mod.SCHEMA:
            raise VerifyError(f"manifest {path} has schema {schema!r}; this version reads schema {manifest_mod.SCHEMA}",
                              hint="rebuild with this version")
        man = _parsed(doc, path)
        recipe = man.recipe
        build_dirs = {c.name: Path(c.build_dir) for c in man.components if c.build_dir}
        fp = fingerprint(man)
    else:
        raise VerifyError(f"{path} is neither an artifact reference nor a build manifest (kind {kind!r})",
                          hint="give a file written by --write-reference")
    comps = doc.get("components")
    if not isinstance(comps, list):
        raise VerifyError(f"reference {path} has no components list", hint="regenerate it with --write-reference")
    sets = _parsed({"components": comps}, path).artifact_sets()
    outputs = {str(c.get("name")): list(c.get("outputs", [])) for c in comps}
    objects = {str(c.get("name")): {str(k): str(v) for k, v in (c.get("objects") or {}).items()}
               for c in comps if isinstance(c.get("objects"), dict)}
    return Reference(path=path, recipe=recipe, sets=sets, outputs=outputs, build_dirs=build_dirs,
                     fingerprint={str(k): str(v) for k, v in fp.items()}, objects=objects)


def _parsed(doc: Mapping[str, Any], path: Path) -> Manifest:
    try:
        return Manifest.from_doc(doc, f"reference {path}")
    except StateError as exc:
        raise VerifyError(str(exc), hint="regenerate it with --write-reference") from None


def reference_files(refs_dir: Path) -> list[Path]:
    """The artifact references in a recipe's folder (it holds other records too, e.g. the
    adopted smoke speeds): every ``*.json`` file but those that say they are another kind."""
    out = []
    for p in sorted(refs_dir.glob("*.json")):
        try:
            kind = json.loads(p.read_text()).get("kind") if p.is_file() and not p.is_symlink() else REF_KIND
        except (OSError, ValueError, AttributeError):
            kind = REF_KIND  # unreadable: listed, so that the candidates say so
        if kind in (REF_KIND, manifest_mod.KIND):
            out.append(p)
    return out


def _readable(refs_dir: Path, described: list[str]):
    """Each committed reference that loads, as (path, reference); an unreadable one is added
    to ``described`` with why."""
    for p in reference_files(refs_dir):
        try:
            yield p, load_reference(p)
        except VerifyError as exc:
            described.append(f"{p.name} (unreadable: {exc.message})")


def known_sizes(refs_dir: Path) -> dict[str, int]:
    """``sha256:<hex>`` -> size of every output the committed references of a recipe name: a
    file with that digest has that size, whatever a registry says."""
    sizes: dict[str, int] = {}
    if refs_dir.is_dir():
        for _p, ref in _readable(refs_dir, []):
            for out in (o for outs in ref.outputs.values() for o in outs if isinstance(o, dict)):
                sha, size = out.get("sha256"), out.get("size")
                if isinstance(sha, str) and isinstance(size, int) and not isinstance(size, bool) and size >= 0:
                    sizes[f"sha256:{sha}"] = size
    return sizes


def find_reference(refs_dir: Path, manifest: Manifest) -> tuple[Path | None, list[str]]:
    """The committed reference whose toolchain fingerprint is this build's. Returns (path or
    None, descriptions of the candidates)."""
    described: list[str] = []
    if not refs_dir.is_dir():
        return None, described
    want = fingerprint(manifest)
    for p, ref in _readable(refs_dir, described):
        described.append(f"{p.name} ({fingerprint_text(ref.fingerprint) if ref.fingerprint else 'no fingerprint'})")
        if ref.fingerprint == want:
            return p, described
    return None, described


def find_matching_reference(refs_dir: Path, sets: dict[tuple[str, str], ArtifactSet]) -> tuple[Path | None, list[str]]:
    """Among committed references, one whose kernel-artifact facts equal these sets' (paths
    left out): what verify-run compares a new build's artifacts with. Returns (path or None,
    descriptions of the candidates)."""
    described = []
    if not refs_dir.is_dir() or not sets:
        return None, described
    for p, ref in _readable(refs_dir, described):
        same = all(
            key in ref.sets and ({k: v for k, v in ref.sets[key].facts.items() if k not in PATH_FACTS}
                                 == {k: v for k, v in cur.facts.items() if k not in PATH_FACTS})
            for key, cur in sets.items())
        facts = "; ".join(f"{k}={v}" for s in ref.sets.values() for k, v in s.facts.items() if k not in PATH_FACTS
                          and k.endswith(TOOL_FACTS))
        described.append(f"{p.name} ({facts or 'no facts'})")
        if same:
            return p, described
    return None, described
