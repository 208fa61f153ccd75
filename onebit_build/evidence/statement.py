"""The SLSA provenance v1 statement of a build (an in-toto Statement v1), as
``docs/build-type-v1.md`` defines it, made from the build manifest and what the job knew.

Subjects are the build's output files by name, each with the component and the path in its
build folder as annotations. Every string passes the :mod:`scrub` step first: the statement
names no host, user or home folder. :func:`check_shape` validates a statement with the
in-toto attestation bindings and the provenance predicate's own schema (protobuf, unknown
fields refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2
from in_toto_attestation.v1.statement import Statement

from onebit_build import __version__
from onebit_build.checking.manifest import Manifest
from onebit_build.checking.references import fingerprint
from onebit_build.spec.downloads_spec import DownloadSpec
from onebit_build.spec.model_spec import ModelSpec
from onebit_build.core.names import public_url
from onebit_build.spec.pins import Pin
from onebit_build.evidence.envelope import STATEMENT_TYPE
from onebit_build.evidence.scrub import Scrubber

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:onebit-build:build-type:v1"  # defined by docs/build-type-v1.md
BUILDER_ID = "urn:onebit-build:builder:local"
# What a local build signed with a developer's key honestly meets (docs/build-type-v1.md).
SLSA_LEVEL = {"level": 1, "why": "provenance made and signed by the build's own tool on the builder's machine; "
                                 "a hosted CI build attested by the platform (GitHub's attest-build-provenance) "
                                 "adds a signature the builder cannot forge: SLSA Build L2"}


@dataclass(frozen=True, kw_only=True)
class BuildEvidence:
    """What the provenance of one build says, gathered by the job."""

    manifest: Manifest
    manifest_sha256: str
    recipe_file: str  # the recipe as the statement names it: relative to the project, or its file name
    overrides: tuple[str, ...]  # the user's -D, as given
    pins: Mapping[str, Pin]
    downloads: tuple[DownloadSpec, ...]
    model: ModelSpec | None
    key_inputs: Mapping[str, Mapping[str, Any]]  # by component, with the machine's real paths
    invocation: str  # the run folder's name
    byproducts: tuple[tuple[str, str], ...] = ()  # (file name, sha256) besides the manifest
    scrub: Scrubber


def subjects(man: Manifest) -> list[dict[str, Any]]:
    """One subject per output file (folders are carried by their files), by file name."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for comp in man.components:
        root = Path(comp.build_dir)
        for o in comp.outputs:
            p = Path(o.path)
            if p.is_dir():  # an assembled folder: its files are outputs of their own
                continue
            rel = p.relative_to(root).as_posix() if p.is_relative_to(root) else p.name
            out.setdefault((p.name, o.sha256), {"name": p.name, "digest": {"sha256": o.sha256},
                                                "annotations": {"component": comp.name, "path": rel}})
    return sorted(out.values(), key=lambda s: (s["name"], s["digest"]["sha256"]))


def _dep(name: str, role: str, *, uri: str = "", digest: Mapping[str, str] | None = None,
         **notes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": name}
    if uri:
        doc["uri"] = uri
    if digest:
        doc["digest"] = dict(digest)
    doc["annotations"] = {"role": role, **{k: v for k, v in notes.items() if v not in (None, "")}}
    return doc


def dependencies(ev: BuildEvidence) -> list[dict[str, Any]]:
    """resolvedDependencies: sources, their mirrors, patches, downloads, the model, the tools."""
    man, deps = ev.manifest, []
    for s in man.sources:
        deps.append(_dep(s.name, "source", uri=f"git+{public_url(s.url)}@{s.commit}", digest={"gitCommit": s.commit},
                         fetchedFrom=fetched_from(s.mirror_used), archiveSha256=s.archive_sha256,
                         patchedHead=s.patched_head, patchDigest=s.patch_digest))
        pin = ev.pins.get(s.name)
        for m in pin.mirrors if pin else ():
            deps.append(_dep(f"{s.name} sdist", "mirror", uri=f"pkg:pypi/{m.package}@{m.version}",
                             digest={"sha256": m.sha256}, source=s.name))
        deps += [_dep(f"patches/{s.name}/{n}", "patch", digest={"sha256": h}, source=s.name) for n, h in s.patches]
    deps += [_dep(d.name, "download", uri=d.public, digest={"sha256": d.sha256}) for d in ev.downloads]
    if ev.model is not None and ev.model.sha256:
        deps.append(_dep(ev.model.file, "model", digest={"sha256": ev.model.sha256}, served=ev.model.name,
                         wheels=[f"pkg:pypi/{r.replace('==', '@')}" for r in ev.model.requirements] or None))
    for t in man.toolchain_files:
        deps.append(_dep(str(t["name"]), "tool", uri=str(t["purl"]), digest={"sha256": str(t["sha256"])},
                         components=list(t.get("components") or ())))
    return deps


def fetched_from(mirror_used: str) -> str:
    """Where a source was fetched from, as a statement says it: a mirror folder by its name
    alone (its path is the machine's). Pure."""
    kind, sep, where = mirror_used.partition(":")
    return f"{kind}:{PurePosixPath(where).name}" if sep and kind == "mirror-dir" else mirror_used


def provenance_statement(ev: BuildEvidence) -> dict[str, Any]:
    """The statement, scrubbed of the machine's paths."""
    man = ev.manifest
    comps = [{"name": c.name, "source": c.source, "buildFolder": Path(c.build_dir).name, "key": c.key,
              "keyInputs": dict(ev.key_inputs.get(c.name, {}))} for c in man.components]
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {"recipe": {"name": man.recipe, "file": ev.recipe_file, "sha256": man.recipe_sha256},
                                   "defines": list(ev.overrides)},
            "internalParameters": {"components": comps, "toolchainFingerprint": fingerprint(man),
                                   "dataFrom": man.data_from or "", "slsaBuildLevel": SLSA_LEVEL,
                                   **({"runtimeFloor": dict(man.runtime_floor)} if man.runtime_floor else {})},
            "resolvedDependencies": dependencies(ev),
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": {"onebit-build": __version__}},
            "metadata": {"invocationId": ev.invocation, "startedOn": man.started or man.created,
                         "finishedOn": man.created},
            "byproducts": [{"name": n, "digest": {"sha256": h}}
                           for n, h in (("build-manifest.json", ev.manifest_sha256), *ev.byproducts)],
        },
    }
    doc = {"_type": STATEMENT_TYPE, "subject": subjects(man), "predicateType": PREDICATE_TYPE, "predicate": predicate}
    return ev.scrub.value(doc)


def recipe_file(recipe_path: Path, project: Path) -> str:
    """The recipe file as a statement names it: ``recipes/default.yaml`` inside the project,
    else its file name alone (a path outside the project may name a user). Pure."""
    try:
        return PurePosixPath(recipe_path.resolve().relative_to(project.resolve())).as_posix()
    except ValueError:
        return recipe_path.name


def check_shape(doc: Mapping[str, Any], predicate_message: type | None = provenance_pb2.Provenance) -> str | None:
    """Why ``doc`` is not a valid in-toto Statement v1 (with a valid predicate of the given
    schema); None when it is. Validated by the in-toto attestation bindings."""
    try:
        subs = [json_format.ParseDict(s, resource_descriptor_pb2.ResourceDescriptor()) for s in doc["subject"]]
        stmt = Statement(subs, str(doc["predicateType"]), dict(doc["predicate"]))
        stmt.validate()
        if predicate_message is not None:
            json_format.ParseDict(doc["predicate"], predicate_message())
    except (KeyError, TypeError, ValueError, json_format.ParseError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
