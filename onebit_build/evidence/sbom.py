"""The CycloneDX 1.6 SBOM of a build (``sbom.cdx.json``), made with cyclonedx-python-lib and
checked against the 1.6 JSON schema before it is written.

It lists the build's outputs (the server as the BOM's subject), the pinned sources with
purls and their patches as pedigree (each patch's text attached), the toolchain as the
BOM's tools, and the system libraries the server loads at run time (:mod:`runtime`) as the
Debian packages that own them, with versions. Its serial number is made from the manifest's
sha256, so one build always gives the same SBOM.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from cyclonedx.model import AttachedText, Encoding, ExternalReference, ExternalReferenceType, HashAlgorithm, \
    HashType, Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Commit, Component, ComponentType, Diff, Patch, PatchClassification, Pedigree
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from onebit_build import __version__
from onebit_build.checking.manifest import Manifest, SourceRecord
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.names import public_url
from onebit_build.evidence import debian
from onebit_build.evidence.runtime import RuntimeLib
from onebit_build.evidence.scrub import Scrubber

NAME = "sbom.cdx.json"
PROP = "onebit-build"  # the namespace of the SBOM's own properties


@dataclass(frozen=True, kw_only=True)
class SbomInput:
    manifest: Manifest
    manifest_sha256: str
    server: str  # the file name of the server output
    patches: Mapping[tuple[str, str], Path]  # (source, patch name) -> the patch file
    runtime: tuple[RuntimeLib, ...]
    owners: Mapping[Path, debian.DebPackage]
    distro: debian.Distro | None
    scrub: Scrubber


def _sha(hex_digest: str) -> list[HashType]:
    return [HashType(alg=HashAlgorithm.SHA_256, content=hex_digest)]


def _props(scrub: Scrubber, **values: Any) -> list[Property]:
    return [Property(name=f"{PROP}:{k}", value=scrub.text(str(v))) for k, v in values.items() if v]


def source_purl(s: SourceRecord) -> PackageURL:
    """``pkg:github/OWNER/REPO@COMMIT`` for a GitHub URL, else a generic purl with the VCS URL. Pure."""
    parts = urlsplit(s.url)
    path = parts.path.strip("/").removesuffix(".git").split("/")
    if parts.hostname == "github.com" and len(path) == 2:
        return PackageURL(type="github", namespace=path[0], name=path[1], version=s.commit)
    return PackageURL(type="generic", name=s.name, version=s.commit, qualifiers={"vcs_url": f"git+{public_url(s.url)}"})


def _patch(source: str, name: str, sha: str, files: Mapping[tuple[str, str], Path]) -> Patch:
    path = files.get((source, name))
    text = None
    if path is not None and path.is_file() and sha256_file(path) == sha:
        text = AttachedText(content=base64.b64encode(path.read_bytes()).decode(), encoding=Encoding.BASE_64,
                            content_type="text/x-diff")
    return Patch(type=PatchClassification.UNOFFICIAL, diff=Diff(text=text, url=XsUri(f"patches/{source}/{name}")))


def _source(s: SourceRecord, inp: SbomInput) -> Component:
    pedigree = Pedigree(patches=[_patch(s.name, n, h, inp.patches) for n, h in s.patches],
                        commits=[Commit(uid=s.patched_head, message="the pinned commit with the patches applied")]
                        if s.patched_head and s.patches else None)
    return Component(type=ComponentType.LIBRARY, name=s.name, version=s.commit, bom_ref=f"source:{s.name}",
                     purl=source_purl(s), pedigree=pedigree if s.patches else None,
                     external_references=[ExternalReference(type=ExternalReferenceType.VCS,
                                                            url=XsUri(public_url(s.url)))],
                     properties=_props(inp.scrub, patch_digest=s.patch_digest))


def _outputs(inp: SbomInput) -> tuple[Component | None, list[Component]]:
    server, others = None, []
    for comp in inp.manifest.components:
        for o in comp.outputs:
            p = Path(o.path)
            if p.is_dir():
                continue
            kind = ComponentType.APPLICATION if ".so" not in p.name else ComponentType.LIBRARY
            c = Component(type=kind, name=p.name, version=comp.key[:16], bom_ref=f"output:{comp.name}:{p.name}",
                          hashes=_sha(o.sha256), properties=_props(inp.scrub, component=comp.name))
            if p.name == inp.server and server is None:
                server = c
            else:
                others.append(c)
    return server, others


def _runtime(inp: SbomInput) -> list[Component]:
    """One component per Debian package the server loads from (its libraries as properties);
    a library no package owns is a component of its own, with its sha256."""
    by_pkg: dict[str, tuple[debian.DebPackage, list[str]]] = {}
    alone = []
    for lib in inp.runtime:
        pkg = inp.owners.get(lib.path)
        if pkg is None:
            alone.append(Component(type=ComponentType.LIBRARY, name=Path(lib.name).name, bom_ref=f"runtime:{lib.name}",
                                   hashes=_sha(sha256_file(lib.path)),
                                   properties=_props(inp.scrub, library=lib.name, path=lib.path)))
        else:
            by_pkg.setdefault(pkg.name, (pkg, []))[1].append(lib.name)
    return [Component(type=ComponentType.LIBRARY, name=pkg.name, version=pkg.version, bom_ref=f"runtime:{pkg.name}",
                      purl=PackageURL.from_string(pkg.purl(inp.distro)),
                      properties=[Property(name=f"{PROP}:library", value=n) for n in names]
                      + [Property(name=f"{PROP}:scope", value="loaded by the server at run time")])
            for pkg, names in by_pkg.values()] + alone


def _tools(man: Manifest) -> list[Component]:
    tools = [Component(type=ComponentType.APPLICATION, name="onebit-build", version=__version__,
                       bom_ref="tool:onebit-build")]
    for t in man.toolchain_files:
        tools.append(Component(type=ComponentType.APPLICATION, name=str(t["name"]), bom_ref=f"tool:{t['name']}",
                               purl=PackageURL.from_string(str(t["purl"])), hashes=_sha(str(t["sha256"]))))
    return tools


def _floor_props(man: Manifest) -> dict[str, str]:
    """The highest glibc and C++ library versions the programs need (``runtime_floor_glibc``: ``GLIBC_2.34``)."""
    highest = (man.runtime_floor or {}).get("highest") or {}
    return {f"runtime_floor_{family.lower()}": str(v) for family, v in sorted(highest.items())}


def make_bom(inp: SbomInput) -> Bom:
    man = inp.manifest
    server, outputs = _outputs(inp)
    runtime = _runtime(inp)
    meta = BomMetaData(tools=ToolRepository(components=_tools(man)), component=server,
                       timestamp=datetime.fromisoformat((man.created or "1970-01-01T00:00:00Z").replace("Z", "+00:00")),
                       properties=_props(inp.scrub, recipe=man.recipe, recipe_sha256=man.recipe_sha256,
                                         **_floor_props(man)))
    bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_OID, f"onebit-build:{inp.manifest_sha256}"), metadata=meta,
              components=[*outputs, *(_source(s, inp) for s in man.sources), *runtime])
    if server is not None:
        bom.register_dependency(server, [*outputs, *runtime])
    return bom


def render(inp: SbomInput) -> str:
    """The SBOM's JSON text. (The tests check it against the CycloneDX 1.6 schema with the
    library's strict validator; importing that validator takes seconds, so a build does not.)"""
    return JsonV1Dot6(make_bom(inp)).output_as_string(indent=2) + "\n"
