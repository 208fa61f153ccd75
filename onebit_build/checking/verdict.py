"""The verdict of a build, kept with it: what ``verify`` concluded (VERIFIED, NOT VERIFIED or
UNVERIFIED), written atomically as ``verdict.json`` beside the build's manifest, and read by
every command that uses the build.

A verdict names the digest of the outputs it judged (:func:`outputs_digest`: every output's
and kernel artifact's sha256, not the manifest's bytes, which each run writes again); a build
whose outputs changed since is no longer judged by it, and the record is ignored. A NOT
VERIFIED build is refused (VerifyError, exit 11, with the verdict's line) unless the command
is given ``--allow-unverified``, which is then said and recorded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from onebit_build.checking.manifest import MANIFEST_NAME, Manifest, load_manifest
from onebit_build.core import ui
from onebit_build.core.errors import VerifyError
from onebit_build.core.fsutil import StateError, read_state, write_state

VERDICT_NAME = "verdict.json"  # in the build folder, beside MANIFEST_NAME
KIND = "onebit-build/build-verdict"
SCHEMA = 1
STATUSES = {"verified": "VERIFIED", "not-verified": "NOT VERIFIED", "unverified": "UNVERIFIED"}
MAX_LINE = 2000


@dataclass(frozen=True, kw_only=True)
class Recorded:
    status: str  # a key of STATUSES
    line: str  # the verdict's one line
    remedy: str = ""

    @property
    def label(self) -> str:
        return STATUSES[self.status]

    @property
    def said(self) -> str:
        """``NOT VERIFIED against r.json: ...``: the label, then the line without it."""
        return f"{self.label} {self.line.removeprefix(self.label).lstrip(' :')}".rstrip()


def outputs_digest(man: Manifest) -> str:
    """sha256 over every output's and kernel artifact's name and sha256, component by
    component: the same bytes built again give the same digest. Pure."""
    doc = [[c.name, sorted([o.name, o.sha256] for o in c.outputs),
            sorted([a.kind, sorted([i.name, i.sha256] for i in a.items)] for a in c.artifacts)]
           for c in man.components]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def record_verdict(manifest_file: Path, status: str, line: str, remedy: str = "") -> Path:
    """Write the verdict on the build whose manifest is ``manifest_file`` beside it."""
    assert status in STATUSES  # the verify stage's own statuses
    path = manifest_file.parent / VERDICT_NAME
    write_state(path, KIND, SCHEMA, {"status": status, "line": _one_line(line), "remedy": _one_line(remedy),
                                     "outputs": outputs_digest(load_manifest(manifest_file)),
                                     "manifest": MANIFEST_NAME})
    return path


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:MAX_LINE]


def recorded_verdict(manifest_file: Path, man: Manifest | None = None) -> Recorded | None:
    """The verdict recorded on this build; None when there is none, or it judged other outputs.
    A record that is not one is named in a warning and ignored."""
    path = manifest_file.parent / VERDICT_NAME
    try:
        doc = read_state(path, KIND, SCHEMA)
    except FileNotFoundError:
        return None
    except (OSError, StateError, ValueError) as exc:
        ui.warn(f"the build's verdict {path} is unreadable ({exc}); ignored: run 'onebit-build verify' again")
        return None
    status, line = doc.get("status"), doc.get("line")
    if status not in STATUSES or not isinstance(line, str) or not isinstance(doc.get("outputs"), str):
        ui.warn(f"the build's verdict {path} is not one onebit-build writes; ignored: run 'onebit-build verify' again")
        return None
    if doc["outputs"] != outputs_digest(man or load_manifest(manifest_file)):
        return None  # a verdict on outputs this build no longer has
    return Recorded(status=status, line=_one_line(line), remedy=_one_line(str(doc.get("remedy") or "")))


def refuse_not_verified(manifest_file: Path, *, allow: bool, what: str,
                        man: Manifest | None = None) -> Recorded | None:
    """The build's recorded verdict; VerifyError (exit 11) with its line when it is NOT
    VERIFIED, unless ``allow`` (``--allow-unverified``), which a warning line then says."""
    rec = recorded_verdict(manifest_file, man)
    if rec is None or rec.status != "not-verified":
        return rec
    if not allow:
        raise VerifyError(f"{what}: the build is {rec.said}",
                          hint=(rec.remedy + "; or " if rec.remedy else "")
                          + "pass --allow-unverified to use it all the same (it is recorded)")
    ui.warn(f"{what}: using a NOT VERIFIED build (--allow-unverified): {rec.said}")
    return rec
