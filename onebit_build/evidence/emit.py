"""Writing a build's evidence beside its manifest: the provenance statement (signed:
``provenance.intoto.jsonl``; unsigned: ``provenance.json``), the SBOM (``sbom.cdx.json``)
and, when signed, the in-toto link ``build.<keyid8>.link``. The build folder gets them, and
the run folder a copy. A file of the other form left by an earlier run is removed, so a
folder never holds a statement of another signing state than its latest build's. A run
without a key keeps the signed evidence of the build it finds, when that evidence names the
very outputs and manifest the folder holds (:func:`keep_signed`): a signed build stays signed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from onebit_build.checking.manifest import MANIFEST_NAME, SERVER_OUTPUT, Manifest
from onebit_build.spec.recipe import Recipe
from onebit_build.core.errors import VerifyError
from onebit_build.core.fsutil import atomic_write_bytes, atomic_write_text, sha256_bytes, sha256_file
from onebit_build.spec.pins import Pin
from onebit_build.evidence import debian, sbom as sbom_mod
from onebit_build.evidence.envelope import envelope_line, read_statement, sign
from onebit_build.evidence.keys import SigningKey
from onebit_build.evidence.link import build_link, link_name
from onebit_build.evidence.runtime import RuntimeLib, runtime_libraries
from onebit_build.evidence.scrub import scrubber
from onebit_build.evidence.statement import BuildEvidence, check_shape, provenance_statement, recipe_file
from onebit_build.evidence.tools import tool_files

SIGNED = "provenance.intoto.jsonl"
UNSIGNED = "provenance.json"
LINK_GLOB = "build.*.link"
STATEMENT_PATTERNS = (SIGNED, UNSIGNED, LINK_GLOB)


@dataclass(frozen=True, kw_only=True)
class EmitRequest:
    folder: Path  # the build folder whose manifest it is (the last component's)
    copies: tuple[Path, ...]  # other folders that get a copy (the run folder)
    manifest: Manifest
    manifest_path: Path
    recipe: Recipe
    overrides: tuple[str, ...]
    pins: Mapping[str, Pin]
    key_inputs: Mapping[str, Mapping[str, Any]]
    workspace: Path
    project: Path
    invocation: str
    key: SigningKey | None


@dataclass(frozen=True, kw_only=True)
class Emitted:
    statement: Path | None  # None: the build has no output file to name
    sbom: Path
    link: Path | None
    keyid: str | None  # None: unsigned
    kept: bool = False  # the signed evidence of an earlier run of this build, kept as it was

    def note(self) -> str:
        """What the build line says about it."""
        if self.statement is None:
            return "no provenance statement (the recipe declares no output file)"
        if self.keyid is None:
            return "provenance unsigned (no --signing-key or $ONEBIT_SIGNING_KEY)"
        if self.kept:
            return f"provenance signed by key {self.keyid[:16]} (kept: the outputs are those it names)"
        return f"provenance signed by key {self.keyid[:16]}"


def toolchain_files(builds: list, launcher: str | None) -> list[dict[str, Any]]:
    """The manifest's ``toolchain_files``: every tool binary the builds ran."""
    return [t.to_dict() for t in tool_files([(b.component, b.build_dir) for b in builds], launcher)]


def _executables(man: Manifest) -> list[Path]:
    """The output files that are programs (the server first), not libraries."""
    files = [Path(o.path) for c in man.components for o in c.outputs if Path(o.path).is_file()]
    programs = [p for p in files if ".so" not in p.name and p.stat().st_mode & 0o111]
    return sorted(programs, key=lambda p: p.name != SERVER_OUTPUT)


def runtime_of(man: Manifest) -> tuple[RuntimeLib, ...]:
    """The system libraries the build's programs load (the server's, and any other program's)."""
    own = [Path(c.build_dir) for c in man.components]
    found: dict[Path, RuntimeLib] = {}
    for exe in _executables(man):
        for lib in runtime_libraries(exe, own):
            found.setdefault(lib.path, lib)
    return tuple(sorted(found.values(), key=lambda lib: lib.name))


def _sbom_text(req: EmitRequest, scrub) -> str:
    man = req.manifest
    runtime = runtime_of(man)
    programs = _executables(man)
    files = {(s.name, n): req.project / "patches" / s.name / n for s in man.sources for n, _h in s.patches}
    return sbom_mod.render(sbom_mod.SbomInput(
        manifest=man, manifest_sha256=sha256_file(req.manifest_path), server=programs[0].name if programs else "",
        patches=files, runtime=runtime, owners=debian.owners(lib.path for lib in runtime), distro=debian.distro(),
        scrub=scrub))


def _statements(statement: dict[str, Any], key: SigningKey | None) -> dict[str, str]:
    """The statement files (name -> text): signed with its link, or bare; none for a build
    with no output file (in-toto wants a subject)."""
    if not statement["subject"]:
        return {}
    problem = check_shape(statement)
    if problem is not None:  # a fault of this module, never of the user's input
        raise AssertionError(f"the provenance statement is malformed: {problem}")
    if key is None:
        return {UNSIGNED: json.dumps(statement, indent=2, ensure_ascii=False) + "\n"}
    link = envelope_line(sign(build_link(statement), key))
    return {SIGNED: envelope_line(sign(statement, key)), link_name(key.keyid): link}


def emit(req: EmitRequest) -> Emitted:
    """Write the evidence of the build ``req`` describes; returns where it went."""
    scrub = scrubber(workspace=req.workspace, project=req.project)
    sbom_text = _sbom_text(req, scrub)
    downloads = tuple(d for c in req.recipe.components for d in c.downloads)
    ev = BuildEvidence(manifest=req.manifest, manifest_sha256=sha256_file(req.manifest_path),
                       recipe_file=recipe_file(req.recipe.path, req.project), overrides=req.overrides, pins=req.pins,
                       downloads=downloads, model=req.recipe.model, key_inputs=req.key_inputs,
                       invocation=req.invocation, byproducts=((sbom_mod.NAME, sha256_bytes(sbom_text.encode())),),
                       scrub=scrub)
    statements = _statements(provenance_statement(ev), req.key)
    files = {sbom_mod.NAME: sbom_text, **statements}
    for folder in (req.folder, *req.copies):
        clear_stale(folder, keep=set(files))
        for name, text in files.items():
            atomic_write_text(folder / name, text)
    statement = next((req.folder / n for n in statements if n in (SIGNED, UNSIGNED)), None)
    link = next((req.folder / n for n in statements if n.endswith(".link")), None)
    return Emitted(statement=statement, sbom=req.folder / sbom_mod.NAME, link=link,
                   keyid=req.key.keyid if req.key and statement else None)


def keep_signed(folder: Path, outputs: set[tuple[str, str]], copies: tuple[Path, ...]) -> Emitted | None:
    """The signed evidence in ``folder`` kept as it is (and copied into ``copies``) when it is
    of this build: its subjects are ``outputs`` (file name, sha256) and the manifest and SBOM
    it names are the files beside it. None when there is none, or it is of other bytes."""
    try:
        opened = read_statement(folder / SIGNED)
    except VerifyError:
        return None
    st = opened.statement
    named = {(str(s.get("name")), str((s.get("digest") or {}).get("sha256"))) for s in st.get("subject") or []
             if isinstance(s, dict)}
    made = {str(b.get("name")): str((b.get("digest") or {}).get("sha256"))
            for b in (st.get("predicate", {}).get("runDetails") or {}).get("byproducts") or [] if isinstance(b, dict)}
    beside = (MANIFEST_NAME, sbom_mod.NAME)
    if not opened.signed or not named or named != outputs or any(
            not (folder / n).is_file() or made.get(n) != sha256_file(folder / n) for n in beside):
        return None
    link = folder / link_name(opened.keyids[0])
    files = [folder / SIGNED, folder / sbom_mod.NAME, *([link] if link.is_file() else [])]
    for target in (folder, *copies):
        clear_stale(target, keep={f.name for f in files})
        if target != folder:
            for f in files:
                atomic_write_bytes(target / f.name, f.read_bytes())
    return Emitted(statement=folder / SIGNED, sbom=folder / sbom_mod.NAME, link=link if link.is_file() else None,
                   keyid=opened.keyids[0], kept=True)


def clear_stale(folder: Path, *, keep: set[str], patterns: tuple[str, ...] | list[str] = STATEMENT_PATTERNS) -> None:
    """Remove the evidence files of another build or signing state from ``folder`` (those in
    ``keep`` stay): a folder holds one build's statement, never a stale one beside it."""
    for pattern in patterns:
        for p in folder.glob(pattern):
            if p.name not in keep and (p.is_file() or p.is_symlink()):
                p.unlink()


def carried(folder: Path) -> list[Path]:
    """The evidence files a build folder holds (what ``install`` carries): the statement of
    its latest build, its SBOM and its link."""
    names = [SIGNED, UNSIGNED, sbom_mod.NAME]
    return sorted([*(folder / n for n in names if (folder / n).is_file()), *folder.glob(LINK_GLOB)])

