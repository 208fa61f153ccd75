"""``verify-provenance``: the checks on a statement and the verdict.

In order: the signature (against ``--key``), the statement's shape (the in-toto bindings and
the predicate's schema), the subjects against the files present, the byproducts (manifest,
SBOM) beside the statement, and, for a build's provenance, the materials against the
project's pins and patches, the outputs against the committed reference of its toolchain
and each build key recomputed from its inputs (:mod:`check_project`). A verification run's
statement carries a verdict of its own, which must be VERIFIED.

VERIFIED: every check ran and passed. NOT VERIFIED (exit 11): one failed; each names what
differs. UNVERIFIED (exit 12): nothing failed, but the signature was not checked (no
``--key``) or no committed reference of its toolchain exists to compare the outputs with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from securesystemslib.signer import Key

from onebit_build.core.errors import NotAvailableError, VerifyError
from onebit_build.core.fsutil import sha256_file
from onebit_build.evidence.envelope import Opened, signature_problem
from onebit_build.evidence.locate import LocatedEvidence, subject_file
from onebit_build.evidence.statement import PREDICATE_TYPE, check_shape

TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
OK, FAILED, UNCHECKED = "ok", "FAILED", "not checked"
VERIFIED, NOT_VERIFIED, UNVERIFIED = "VERIFIED", "NOT VERIFIED", "UNVERIFIED"


@dataclass(frozen=True, kw_only=True)
class Finding:
    name: str
    status: str  # OK, FAILED or UNCHECKED
    summary: str
    lines: tuple[str, ...] = ()  # what differs, one line each


@dataclass(frozen=True, kw_only=True)
class Outcome:
    target: LocatedEvidence
    checks: tuple[Finding, ...]

    @property
    def label(self) -> str:
        if any(c.status == FAILED for c in self.checks):
            return NOT_VERIFIED
        blocking = {"signature", "references"}
        return UNVERIFIED if any(c.status == UNCHECKED and c.name in blocking for c in self.checks) else VERIFIED

    @property
    def first_failure(self) -> str:
        bad = next((c for c in self.checks if c.status == FAILED), None)
        return "" if bad is None else f"{bad.name}: {bad.lines[0] if bad.lines else bad.summary}"

    def raise_for_verdict(self) -> None:
        """VerifyError (exit 11) for NOT VERIFIED, NotAvailableError (exit 12) for UNVERIFIED."""
        if self.label == NOT_VERIFIED:
            raise VerifyError(f"NOT VERIFIED: {self.first_failure}",
                              hint="the statement, or the files it names, are not what was built and signed")
        if self.label == UNVERIFIED:
            unchecked = {c.name: c.summary for c in self.checks if c.status == UNCHECKED}
            remedies = {"signature": "give --key with the builder's public key",
                        "references": "the outputs of a toolchain without a committed reference are checked once one "
                                      "is recorded for it (verify --write-reference)"}
            why = [unchecked[n] for n in remedies if n in unchecked]
            raise NotAvailableError(f"UNVERIFIED: {'; '.join(why)}",
                                    hint="; ".join(r for n, r in remedies.items() if n in unchecked))


def check_signature(opened: Opened, key: Key | None) -> Finding:
    ids = ", ".join(k[:16] for k in opened.keyids)
    if key is None:
        said = f"signed by key {ids}; give --key PUB to check it" if opened.signed else "the statement is unsigned"
        return Finding(name="signature", status=UNCHECKED, summary=said)
    problem = signature_problem(opened, key)
    if problem is not None:
        return Finding(name="signature", status=FAILED, summary=problem, lines=(problem,))
    return Finding(name="signature", status=OK, summary=f"signed by key {key.keyid[:16]} ({key.scheme})")


def check_statement(statement: Mapping[str, Any]) -> Finding:
    kind = statement.get("predicateType")
    schema = {PREDICATE_TYPE: None, TEST_RESULT_TYPE: test_result_pb2.TestResult}.get(str(kind), False)
    if schema is False:
        why = f"predicate type {kind!r} is not one onebit-build writes ({PREDICATE_TYPE}, {TEST_RESULT_TYPE})"
        return Finding(name="statement", status=FAILED, summary=why, lines=(why,))
    problem = check_shape(statement) if schema is None else check_shape(statement, schema)
    if problem is not None:
        return Finding(name="statement", status=FAILED, summary="not a valid statement", lines=(problem,))
    build_type = (statement.get("predicate", {}).get("buildDefinition") or {}).get("buildType", "")
    what = f"SLSA provenance v1 ({build_type})" if kind == PREDICATE_TYPE else "test result v0.1"
    return Finding(name="statement", status=OK, summary=f"in-toto Statement v1, {what}")


def component_folders(statement: Mapping[str, Any]) -> dict[str, str]:
    """{component: its build folder's name} as a provenance statement records them; the last
    component's is "" (the folder the statement lies in, wherever it was moved to)."""
    params = (statement.get("predicate", {}).get("buildDefinition") or {}).get("internalParameters", {})
    comps = [c for c in params.get("components") or [] if isinstance(c, Mapping)]
    return {str(c.get("name")): "" if i == len(comps) - 1 else str(c.get("buildFolder", ""))
            for i, c in enumerate(comps)}


def check_subjects(target: LocatedEvidence, statement: Mapping[str, Any],
                   hasher: Callable[[Path], str] = sha256_file) -> Finding:
    """Each subject's file against its sha256; in a build folder or a prefix every one must be
    there, in another folder those present are checked."""
    folders = component_folders(statement)
    bad, absent, matched = [], [], 0
    subjects = statement.get("subject") or []
    for s in subjects:
        name, want = str(s.get("name", "")), str((s.get("digest") or {}).get("sha256", ""))
        path, refused = subject_file(target, s, folders)
        if path is None:
            bad.append(f"subject {name!r}: {refused}")
        elif not path.is_file():
            (bad if target.complete else absent).append(f"subject {name}: missing (no file {path})")
        elif (got := hasher(path)) != want:
            bad.append(f"subject {name}: sha256 {got[:16]} here, the statement says {want[:16]} ({path})")
        else:
            matched += 1
    n = len(subjects)
    if bad:
        return Finding(name="subjects", status=FAILED, summary=f"{len(bad)} of {n} differ", lines=tuple(bad))
    if not matched:
        return Finding(name="subjects", status=UNCHECKED if n else FAILED,
                     summary=f"none of the {n} files is beside the statement: the statement alone is checked"
                     if n else "the statement names no subject")
    rest = f"; {len(absent)} not here" if absent else ""
    return Finding(name="subjects", status=OK, summary=f"{matched}/{n} files match{rest}", lines=tuple(absent))


def check_byproducts(target: LocatedEvidence, statement: Mapping[str, Any]) -> Finding:
    """The manifest and SBOM the statement names, where they lie beside it."""
    run = (statement.get("predicate", {}).get("runDetails") or {})
    bad, seen = [], []
    for b in run.get("byproducts") or []:
        name, want = str(b.get("name", "")), str((b.get("digest") or {}).get("sha256", ""))
        path = target.statement.parent / name
        if "/" in name or not path.is_file():
            continue
        seen.append(name)
        if sha256_file(path) != want:
            bad.append(f"{name}: changed since the statement was made ({path})")
    if bad:
        return Finding(name="byproducts", status=FAILED, summary=f"{len(bad)} changed", lines=tuple(bad))
    return Finding(name="byproducts", status=OK if seen else UNCHECKED,
                 summary=", ".join(seen) + " match" if seen else "none beside the statement")


def check_verdict(statement: Mapping[str, Any]) -> Finding:
    """A verification run's own verdict: PASSED, or it failed (and names its failed checks)."""
    pred = statement.get("predicate") or {}
    result, failed = str(pred.get("result", "")), [str(t) for t in pred.get("failedTests") or []]
    if result != "PASSED":
        why = f"the verification run it records was {result or 'not judged'}" + \
              (f" (failed: {', '.join(failed)})" if failed else "")
        return Finding(name="verdict", status=FAILED, summary=why, lines=(why,))
    passed = ", ".join(str(t) for t in pred.get("passedTests") or [])
    return Finding(name="verdict", status=OK, summary=f"the verification run passed ({passed})")
