"""A verification run's verdict as an in-toto statement (test-result predicate v0.1), signed
like a build's provenance, so that a Strix Halo box's VERIFIED can be checked anywhere with
``verify-provenance``.

Its subjects are the new build's outputs (as in the build's provenance); ``result`` is
PASSED or FAILED with the parts in ``passedTests`` / ``failedTests`` / ``warnedTests`` (not
judged); ``configuration`` names the working build's outputs, the model and the report
(``verification.json``) by digest, and carries the checks, the speed comparison and the
machine's GPUs and drivers as annotations. Nothing in it names the host, user or home.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from onebit_build.checking.manifest import Manifest
from onebit_build.core.fsutil import atomic_write_text, sha256_file
from onebit_build.evidence.envelope import STATEMENT_TYPE, envelope_line, sign
from onebit_build.evidence.keys import SigningKey
from onebit_build.evidence.scrub import Scrubber
from onebit_build.evidence.statement import subjects

PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
SIGNED = "verification.intoto.jsonl"
UNSIGNED = "verification.statement.json"


@dataclass(frozen=True, kw_only=True)
class RunEvidence:
    new: Manifest
    working: Manifest
    report: Mapping[str, Any]  # verification.json's document
    report_sha256: str
    model: tuple[str, str]  # (file name, sha256)
    scrub: Scrubber


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace").strip()
    except OSError:
        return ""


def machine_facts() -> dict[str, Any]:
    """The machine's GPUs (PCI vendor and device ids, kernel driver and its version) and the
    NVIDIA driver's version line: what shaped the run besides the build. No host name."""
    gpus = []
    for card in sorted(Path("/sys/class/drm").glob("card[0-9]*")):
        dev = card / "device"
        if "-" in card.name or not (dev / "vendor").exists():
            continue
        driver = os.path.basename(os.path.realpath(dev / "driver")) if (dev / "driver").exists() else ""
        gpus.append({"card": card.name, "vendor": _read(str(dev / "vendor")), "device": _read(str(dev / "device")),
                     "driver": driver, "driver_version": _read(f"/sys/module/{driver}/version") or platform.release()})
    nvidia = _read("/proc/driver/nvidia/version").splitlines()
    return {"gpus": gpus, "nvidia": nvidia[0] if nvidia else "", "kernel": platform.release(),
            "machine": platform.machine()}


def _outputs(man: Manifest, prefix: str) -> list[dict[str, Any]]:
    return [{"name": f"{prefix}{s['name']}", "digest": s["digest"]} for s in subjects(man)]


def verdict_statement(ev: RunEvidence, machine: Mapping[str, Any]) -> dict[str, Any]:
    """The statement of a run (scrubbed of the machine's paths). Pure but for the subjects'
    folders (an assembled folder output is left out)."""
    report = ev.report
    parts = [p for p in report.get("parts", [])]
    speed = next((p.get("per_device", []) for p in parts if p.get("name") == "speed"), [])
    checks = {"verdict": report.get("verdict"), "recipe": report.get("recipe"), "devices": report.get("devices", []),
              "parts": [{"name": p.get("name"), "status": "skipped" if not p.get("judged", True)
                         else "ok" if p.get("ok") else "FAILED", "summary": p.get("summary")} for p in parts],
              "speed": speed, "machine": dict(machine)}
    predicate = {
        "result": "PASSED" if report.get("verified") else "FAILED",
        "configuration": [
            {"name": "verification.json", "digest": {"sha256": ev.report_sha256}, "annotations": checks},
            {"name": ev.model[0], "digest": {"sha256": ev.model[1]}, "annotations": {"role": "model"}},
            *_outputs(ev.working, "working/"),
        ],
        "passedTests": [p["name"] for p in parts if p.get("ok") and p.get("judged", True)],
        "failedTests": [p["name"] for p in parts if not p.get("ok")],
        "warnedTests": [p["name"] for p in parts if not p.get("judged", True)],
    }
    doc = {"_type": STATEMENT_TYPE, "subject": subjects(ev.new), "predicateType": PREDICATE_TYPE,
           "predicate": predicate}
    return ev.scrub.value(doc)


def write_verdict(run_dir: Path, statement: dict[str, Any], key: SigningKey | None) -> Path:
    """Write the statement into the run folder: signed, or bare when there is no key."""
    if key is None:
        path = run_dir / UNSIGNED
        atomic_write_text(path, json.dumps(statement, indent=2, ensure_ascii=False) + "\n")
    else:
        path = run_dir / SIGNED
        atomic_write_text(path, envelope_line(sign(statement, key)))
    return path


def record(*, run_dir: Path, report: Path, new: Manifest, working: Manifest, model: tuple[str, str],
           key: SigningKey | None, scrub: Scrubber) -> Path:
    """The statement of the run whose report ``report`` is, written into ``run_dir``."""
    ev = RunEvidence(new=new, working=working, report=json.loads(report.read_text()),
                     report_sha256=sha256_file(report), model=model, scrub=scrub)
    return write_verdict(run_dir, verdict_statement(ev, machine_facts()), key)
