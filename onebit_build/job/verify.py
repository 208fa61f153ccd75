"""The verify stage: every output of a build (kernel artifacts first) against the committed
reference of its toolchain (:mod:`onebit_build.checking.committed`), printed and recorded
beside the build; NOT VERIFIED stops the job."""

from __future__ import annotations

from pathlib import Path

from onebit_build.checking.committed import BuildVerdict, committed_verdict, show_verdict
from onebit_build.checking.manifest import load_manifest
from onebit_build.checking.verdict import record_verdict
from onebit_build.checking.whatdiffers import ReportPlace
from onebit_build.core import ui
from onebit_build.core.errors import VerifyError
from onebit_build.job.job import Job


def verify_stage(job: Job, manifest_file: Path) -> BuildVerdict:
    """Part of the default job: the build against the committed reference of its toolchain.
    Never passes silently; NOT VERIFIED stops the job (VerifyError)."""
    return _committed(job, manifest_file)


def _committed(job: Job, manifest_file: Path) -> BuildVerdict:
    """The committed-reference verdict as a stage: printed, and raised when NOT VERIFIED."""
    with ui.stage("verify") as st:
        place = ReportPlace(folder=job.run_dir, copies=(job.workspace.root / "build", job.workspace.root / "pulled"))
        verdict = committed_verdict(job.references, load_manifest(manifest_file), place)
        show_verdict(verdict)
        record_verdict(manifest_file, verdict.status, verdict.detail, verdict.remedy)  # read by what uses the build
        if verdict.status == "not-verified":
            raise VerifyError(verdict.detail, hint=verdict.remedy)
        st["note"] = verdict.detail
        if verdict.status == "unverified":
            st["status"] = "UNVERIFIED"
    if verdict.status == "unverified":
        ui.warn(verdict.remedy)
    return verdict
