"""Checks as JUnit XML, the format CI systems show as test results (``--junit FILE``).

One ``<testsuite>`` per command; one ``<testcase>`` per check, with the time it took and the
class name ``<recipe>.<device>`` (``<recipe>`` alone for a check of the whole run). A failed
case carries ``<failure message=...>`` with the evidence as its text; a passing one carries
its evidence (the measured value, the answer) in ``<system-out>``; a check that was not made
at all carries ``<skipped message=...>`` saying why. Written atomically. Pure
apart from the write.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from onebit_build.core.fsutil import atomic_write_bytes


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    ok: bool
    message: str = ""  # why it failed (or a note when it passed)
    detail: str = ""
    seconds: float = 0.0
    classname: str = ""
    skipped: bool = False  # not checked at all (``<skipped message=...>``); ok is then True


def junit_xml(suite: str, cases: Sequence[Case], *, seconds: float = 0.0) -> bytes:
    failures = sum(1 for c in cases if not c.ok)
    skipped = sum(1 for c in cases if c.skipped)
    root = ET.Element("testsuites", name=suite, tests=str(len(cases)), failures=str(failures), time=f"{seconds:.3f}")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(cases)), failures=str(failures), errors="0",
                       skipped=str(skipped), time=f"{seconds:.3f}")
    for c in cases:
        tc = ET.SubElement(ts, "testcase", name=c.name, classname=c.classname or suite, time=f"{c.seconds:.3f}")
        if not c.ok:
            f = ET.SubElement(tc, "failure", message=c.message or "failed")
            f.text = c.detail or c.message
        elif c.skipped:
            ET.SubElement(tc, "skipped", message=c.message or "not checked")
        elif c.detail or c.message:
            out = ET.SubElement(tc, "system-out")
            out.text = c.detail or c.message
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(path: Path, suite: str, cases: Sequence[Case], *, seconds: float = 0.0) -> Path:
    atomic_write_bytes(Path(path), junit_xml(suite, cases, seconds=seconds))
    return Path(path)


def classname(recipe: str, device: str | None) -> str:
    """The class of a case: ``<recipe>.<device>``, or the recipe alone for the whole run."""
    return f"{recipe}.{device}" if device else recipe


def evidence_text(summary: str, evidence: dict) -> str:
    """The summary line, then the evidence as indented JSON (what a reader of the CI page sees)."""
    if not evidence:
        return summary
    return summary + "\n" + json.dumps(evidence, indent=2, sort_keys=True, default=str)


def smoke_cases(result) -> list[Case]:
    """The checks of a smoke result (``running.smoke.SmokeResult``), one case each, named by
    the check and classed by recipe and device, with the check's time and evidence."""
    return [Case(name=c.name, classname=classname(result.recipe, c.device), ok=c.passed, seconds=c.seconds,
                 message="" if c.passed else c.summary, detail=evidence_text(c.summary, c.evidence))
            for c in result.all_checks]
