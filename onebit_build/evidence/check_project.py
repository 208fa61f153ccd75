"""The checks of a build's provenance that need the project: its materials against
``pins.yaml`` (with ``pins.lock``) and ``patches/``, its outputs against the committed
reference of its toolchain, and each component's build key computed again from the inputs
the statement records (none of GitHub's, cosign's or slsa-verifier's checks look at these);
and :func:`verify_target`, every check of a statement in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from securesystemslib.signer import Key

from onebit_build.building.builder import key_of_inputs
from onebit_build.checking.manifest import MANIFEST_NAME, load_manifest
from onebit_build.sources.patch import PatchFile, list_patches, patch_digest
from onebit_build.checking.references import load_reference, reference_files
from onebit_build.core.errors import OnebitError
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.names import relative_inside
from onebit_build.spec.pins import Pin
from onebit_build.evidence.check import (FAILED, OK, TEST_RESULT_TYPE, UNCHECKED, Finding, Outcome, check_byproducts,
                                         check_signature, check_statement, check_subjects, check_verdict)
from onebit_build.evidence.envelope import read_statement
from onebit_build.evidence.locate import LocatedEvidence
from onebit_build.evidence.scrub import HOME, PROJECT, WORKSPACE, restore


@dataclass(frozen=True, kw_only=True)
class ProjectFacts:
    """The project data verify-provenance compares with (a checkout, or the installed copy)."""

    root: Path
    data_from: str  # checkout or package
    pins: Mapping[str, Pin]  # with pins.lock applied


def _build(statement: Mapping[str, Any]) -> Mapping[str, Any]:
    return statement["predicate"]["buildDefinition"]


def deps_of(statement: Mapping[str, Any], role: str) -> list[Mapping[str, Any]]:
    return [d for d in _build(statement).get("resolvedDependencies") or []
            if (d.get("annotations") or {}).get("role") == role]


def _pin_problems(statement: Mapping[str, Any], project: ProjectFacts) -> list[str]:
    bad = []
    for dep in deps_of(statement, "source"):
        name, commit = str(dep.get("name")), str((dep.get("digest") or {}).get("gitCommit", ""))
        pin = project.pins.get(name)
        if pin is None:
            bad.append(f"source {name}: not pinned in {project.root / 'pins.yaml'}")
        elif not (commit == pin.commit or (pin.abbreviated and commit.startswith(pin.commit))):
            bad.append(f"source {name}: built from {commit[:12]}, pins.yaml pins {pin.commit[:12]}")
    return bad


def _patch_problems(statement: Mapping[str, Any], project: ProjectFacts) -> list[str]:
    bad = []
    by_source: dict[str, dict[str, str]] = {}
    for dep in deps_of(statement, "patch"):
        src = str((dep.get("annotations") or {}).get("source", ""))
        by_source.setdefault(src, {})[str(dep.get("name", "")).rsplit("/", 1)[-1]] = \
            str((dep.get("digest") or {}).get("sha256", ""))
    for dep in deps_of(statement, "source"):
        src = str(dep.get("name"))
        try:
            here = {p.name: p.sha256 for p in list_patches(project.root / "patches", src)}
        except OnebitError as exc:
            bad.append(f"patches/{src}: {exc.message}")
            continue
        used = by_source.get(src, {})
        for name in sorted(set(here) | set(used)):
            if name not in here:
                bad.append(f"patches/{src}/{name}: applied by the build, not in this project")
            elif name not in used:
                bad.append(f"patches/{src}/{name}: in this project, not applied by the build")
            elif here[name] != used[name]:
                bad.append(f"patches/{src}/{name}: sha256 {here[name][:16]} here, the build applied {used[name][:16]}")
    return bad


def check_materials(statement: Mapping[str, Any], project: ProjectFacts) -> Finding:
    """Sources, patches and the recipe file against this project's."""
    bad = _pin_problems(statement, project) + _patch_problems(statement, project)
    recipe = _build(statement).get("externalParameters", {}).get("recipe") or {}
    file = str(recipe.get("file", ""))
    note = ""
    if relative_inside(file) and file.startswith("recipes/") and (project.root / file).is_file():
        if sha256_file(project.root / file) != recipe.get("sha256"):
            bad.append(f"{file}: changed since the build (sha256 {str(recipe.get('sha256'))[:16]} when built)")
    else:
        note = f"; recipe {file or '?'} is not one of this project's, not compared"
    where = f"{project.root} ({project.data_from})"
    if bad:
        return Finding(name="materials", status=FAILED, summary=f"{len(bad)} differ from {where}", lines=tuple(bad))
    n_src, n_patch = len(deps_of(statement, "source")), len(deps_of(statement, "patch"))
    return Finding(name="materials", status=OK,
                 summary=f"{n_src} source(s) and {n_patch} patch(es) as pinned in {where}{note}")


def _reference_outputs(statement: Mapping[str, Any], project: ProjectFacts) -> tuple[Path | None, dict[str, str]]:
    """The committed reference whose fingerprint is the statement's, with its outputs by file name."""
    params = _build(statement).get("internalParameters") or {}
    recipe = str((_build(statement).get("externalParameters", {}).get("recipe") or {}).get("name", ""))
    want = params.get("toolchainFingerprint") or {}
    folder = project.root / "references" / recipe
    if not want or not recipe or not relative_inside(recipe) or not folder.is_dir():
        return None, {}
    for path in reference_files(folder):
        try:
            ref = load_reference(path)
        except OnebitError:
            continue
        if ref.fingerprint == want:
            return path, {Path(str(o.get("name"))).name: str(o.get("sha256")) for outs in ref.outputs.values()
                          for o in outs}
    return None, {}


def check_references(statement: Mapping[str, Any], project: ProjectFacts) -> Finding:
    path, outputs = _reference_outputs(statement, project)
    if path is None:
        return Finding(name="references", status=UNCHECKED,
                     summary="no committed reference of its toolchain in this project's references/")
    bad = []
    subjects = {str(s.get("name")): str((s.get("digest") or {}).get("sha256", "")) for s in statement["subject"]}
    for name, got in sorted(subjects.items()):
        if name not in outputs:
            bad.append(f"{name}: not an output of the reference {path.name}")
        elif outputs[name] != got:
            bad.append(f"{name}: sha256 {got[:16]}, the reference {path.name} records {outputs[name][:16]}")
    if bad:
        return Finding(name="references", status=FAILED, summary=f"{len(bad)} differ from {path.name}",
                       lines=tuple(bad))
    return Finding(name="references", status=OK, summary=f"{len(subjects)}/{len(subjects)} outputs as {path.name}")


def _key_problem(comp: Mapping[str, Any], statement: Mapping[str, Any], places: Mapping[str, str]) -> str | None:
    """Why a component's recorded inputs do not give its key; None when they do (or cannot be
    computed here: a placeholder with no value)."""
    inputs, name, key = comp.get("keyInputs") or {}, comp.get("name"), str(comp.get("key", ""))
    source = next((d for d in deps_of(statement, "source") if d.get("name") == comp.get("source")), None)
    commit = str(((source or {}).get("digest") or {}).get("gitCommit", ""))
    if inputs.get("source_commit") != commit:
        return f"{name}: its key was made from commit {str(inputs.get('source_commit'))[:12]}, not {commit[:12]}"
    patches = tuple(PatchFile(name=str(d["name"]).rsplit("/", 1)[-1], path=Path(str(d["name"])),
                              sha256=str(d["digest"]["sha256"])) for d in deps_of(statement, "patch")
                    if (d.get("annotations") or {}).get("source") == comp.get("source"))
    if inputs.get("patch_digest") != patch_digest(commit, patches):
        return f"{name}: its key was made from other patches than the statement lists"
    if not str(comp.get("buildFolder", "")).endswith(key[:16]):
        return f"{name}: build folder {comp.get('buildFolder')} is not named after its key {key[:16]}"
    got = key_of_inputs(restore(inputs, places))
    return None if got == key else f"{name}: its inputs give key {got[:16]}, the statement says {key[:16]}"


def check_keys(statement: Mapping[str, Any], places: Mapping[str, str]) -> Finding:
    """Each component's build key from its recorded inputs. ``places``: the values of the
    placeholders known here (a build folder's workspace); inputs that name an unknown one
    are checked against the statement but not hashed."""
    comps = (_build(statement).get("internalParameters") or {}).get("components") or []
    bad, skipped = [], []
    for comp in comps:
        text = repr(comp.get("keyInputs"))
        unknown = [p for p in (WORKSPACE, PROJECT, HOME) if p in text and p not in places]
        problem = _key_problem(comp, statement, {**places, **{p: p for p in unknown}})
        if problem is not None and not (unknown and problem.startswith(f"{comp.get('name')}: its inputs give")):
            bad.append(problem)
        elif unknown:
            skipped.append(str(comp.get("name")))
    if bad:
        return Finding(name="build key", status=FAILED, summary=f"{len(bad)} of {len(comps)} differ", lines=tuple(bad))
    if skipped:
        return Finding(name="build key", status=OK, summary=f"{len(comps) - len(skipped)}/{len(comps)} recomputed; "
                     f"{', '.join(skipped)}: inputs agree with the statement (its workspace path is left out of "
                     "what is signed: give the build folder to compute the key)")
    return Finding(name="build key", status=OK, summary=f"{len(comps)}/{len(comps)} recomputed from their inputs")


def places_of(target: LocatedEvidence) -> dict[str, str]:
    """The placeholders' values known for a target: a build folder in a workspace knows its
    workspace, its project (from the manifest beside it) and this user's home."""
    if target.workspace is None:
        return {}
    places = {WORKSPACE: str(target.workspace), HOME: str(Path.home())}
    try:
        project = load_manifest(target.root / MANIFEST_NAME).project_root
    except (OSError, ValueError, OnebitError):
        project = None
    return {**places, PROJECT: project} if project else places


def verify_target(target: LocatedEvidence, key: Key | None, project: ProjectFacts) -> Outcome:
    """Every check of the statement ``target`` names."""
    opened = read_statement(target.statement)
    st = opened.statement
    checks = [check_signature(opened, key), check_statement(st)]
    if checks[-1].status == FAILED:
        return Outcome(target=target, checks=tuple(checks))
    steps = [("subjects", lambda: check_subjects(target, st))]
    if st.get("predicateType") == TEST_RESULT_TYPE:
        steps.append(("verdict", lambda: check_verdict(st)))
    else:
        steps += [("byproducts", lambda: check_byproducts(target, st)),
                  ("materials", lambda: check_materials(st, project)),
                  ("references", lambda: check_references(st, project)),
                  ("build key", lambda: check_keys(st, places_of(target)))]
    return Outcome(target=target, checks=tuple(checks + [_guarded(name, step) for name, step in steps]))


def _guarded(name: str, step: Callable[[], Finding]) -> Finding:
    """A check on a statement whose free-form parts (annotations, parameters) are not of the
    shape this tool writes fails as malformed, with what was wrong, instead of stopping."""
    try:
        return step()
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as exc:
        why = f"the statement's {name} part is malformed ({type(exc).__name__}: {exc})"
        return Finding(name=name, status=FAILED, summary="malformed", lines=(why,))
