"""``verify-provenance PATH [--key PUB]``: check a build's signed provenance (or a verification
run's signed verdict) anywhere: a build folder, an install prefix or a statement file."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="verify-provenance", help="check a build's signed provenance statement (or verify-run's signed"
                  " verdict): signature, files, pins and patches, references, build key", rank=16,
                  json="print the checks as JSON (schema 1)")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="a build folder, an install prefix, or a statement file"
                   " (provenance.intoto.jsonl, provenance.json, verification.intoto.jsonl)")
    p.add_argument("--key", metavar="PUB", dest="provenance_key",
                   help="the builder's public key (PEM, ECDSA P-256 or Ed25519) the signature must be made with;"
                   " without it the signature is not checked and the verdict is at best UNVERIFIED")


@dataclass(frozen=True, kw_only=True)
class ProvenanceAsked:
    path: Path
    key: Path | None


def asked_of(args: Mapping[str, Any]) -> ProvenanceAsked:
    """The command's own options, checked. Pure but for resolving the paths."""
    from onebit_build.core.safepath import FILE, FILE_OR_FOLDER, check_kind, resolved

    key = args.get("provenance_key")
    return ProvenanceAsked(path=check_kind(resolved(str(args["path"]), "PATH"), "PATH", FILE_OR_FOLDER),
                 key=check_kind(resolved(str(key), "--key"), "--key", FILE) if key else None)


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Every check in order, one line each, then VERIFIED (exit 0), NOT VERIFIED (exit 11)
    or UNVERIFIED (exit 12)."""
    from onebit_build.evidence.check_project import ProjectFacts, verify_target
    from onebit_build.evidence.keys import load_public_key
    from onebit_build.evidence.locate import locate
    from onebit_build.job.job import load_locked_pins

    asked = asked_of(opts.args)
    key = load_public_key(asked.key) if asked.key else None
    target = locate(asked.path)
    facts = ProjectFacts(root=project.path, data_from=project.data_from, pins=load_locked_pins(project).sources)
    outcome = verify_target(target, key, facts)
    show(outcome, as_json=opts.json)
    outcome.raise_for_verdict()
    return 0


def show(outcome, *, as_json: bool) -> None:
    import json

    from onebit_build.core import ui

    if as_json:
        doc = {"kind": "onebit-build/verify-provenance", "schema": 1, "verdict": outcome.label,
               "layout": outcome.target.layout, "statement": str(outcome.target.statement),
               "checks": [{"name": c.name, "status": c.status, "summary": c.summary, "lines": list(c.lines)}
                          for c in outcome.checks]}
        ui.answer(json.dumps(doc, indent=2))
        return
    ui.info(f"verify-provenance: {outcome.target.layout} {outcome.target.root} ({outcome.target.statement.name})")
    for c in outcome.checks:
        ui.info(ui.fit(f"  {c.name:<11} {c.status:<11} {c.summary}"))
        for line in c.lines[:20]:
            ui.info(f"    {line}")
    ui.answer(outcome.label)
