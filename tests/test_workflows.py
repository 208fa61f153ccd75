"""The GitHub workflows: actionlint (with shellcheck for the run: scripts) passes on both,
their cached and uploaded paths are ones the actions accept, and the Strix Halo workflow is
a real verification run that never uploads an older run's report."""

from __future__ import annotations

import os
import re
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


# --------------------------------------------------------------------------- the runner's own settings

VARS_EXPR = re.compile(r"^\$\{\{\s*vars\.[A-Za-z_][A-Za-z0-9_]*\s*\}\}$")


def job_environment(doc: dict, runner_env: dict[str, str]) -> dict[str, str]:
    """The environment a step of the verify-run job starts with, the way Actions builds it:
    the runner's environment, overridden by the workflow's and the job's ``env:``. A
    repository variable that is not set (none is, here) evaluates to ""."""
    env = dict(runner_env)
    for level in (doc.get("env") or {}, doc["jobs"]["verify-run"].get("env") or {}):
        for key, value in level.items():
            text = str(value)
            if VARS_EXPR.match(text):
                env[key] = ""
            elif "${{" in text:
                pytest.fail(f"env {key}: this test does not model the expression {text}")
            else:
                env[key] = text
    return env


def run_step(doc: dict, name: str, env: dict[str, str], github_env: Path) -> subprocess.CompletedProcess[str]:
    """Run one step's script as Actions does (bash -e), then apply what it wrote to GITHUB_ENV."""
    step = next(s for s in steps(doc) if s.get("name") == name)
    out = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-c", step["run"]], capture_output=True, text=True,
                         env={**env, "GITHUB_ENV": str(github_env)}, timeout=60)
    if github_env.exists():
        for line in github_env.read_text().splitlines():
            key, _, value = line.partition("=")
            env[key] = value
    return out


def a_box(tmp_path: Path) -> dict[str, str]:
    """A runner environment that has everything: a working build, TheRock, the model, a cache folder."""
    working = tmp_path / "working" / "bin"
    working.mkdir(parents=True)
    (working / "llama-server").write_bytes(b"\x7fELF")
    clang = tmp_path / "therock" / "bin" / "amdclang"
    clang.parent.mkdir(parents=True)
    clang.write_text("#!/bin/sh\n")
    clang.chmod(0o755)
    model = tmp_path / "Qwen3-0.6B-Q4_0.gguf"
    model.write_bytes(b"GGUF")
    (tmp_path / "temp").mkdir()
    return {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "RUNNER_TEMP": str(tmp_path / "temp"),
        "ONEBIT_WORKING_BUILD": str(working.parent), "ONEBIT_TOOLCHAIN_ROOT": str(clang.parent.parent),
        "ONEBIT_HRX_MODEL": str(model), "ONEBIT_WORKSPACE": str(tmp_path / "cache"),
    }


def cheap_checks(doc: dict, runner_env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = job_environment(doc, runner_env)
    github_env = tmp_path / "github_env"
    folders = run_step(doc, "Folders of this job", env, github_env)
    assert folders.returncode == 0, folders.stderr
    return run_step(doc, "Runner needs", env, github_env)


def test_the_runner_settings_reach_the_job(tmp_path):
    """A box whose runner environment names everything passes the cheap checks: no
    repository variable overrides the runner's values with "" (the old workflow did)."""
    doc = load("strix-halo.yml")
    box = a_box(tmp_path)
    env = job_environment(doc, box)
    for key in ("ONEBIT_WORKING_BUILD", "ONEBIT_HRX_MODEL", "ONEBIT_TOOLCHAIN_ROOT"):
        assert env[key] == box[key], f"{key} is {env[key]!r} in the job, not the runner's {box[key]!r}"
    out = cheap_checks(doc, box, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "cache").is_dir()


def test_the_cheap_checks_name_everything_missing_at_once(tmp_path):
    box = a_box(tmp_path)
    for key in ("ONEBIT_WORKING_BUILD", "ONEBIT_HRX_MODEL"):
        del box[key]
    box["ONEBIT_TOOLCHAIN_ROOT"] = str(tmp_path / "no-therock")
    out = cheap_checks(load("strix-halo.yml"), box, tmp_path)
    assert out.returncode != 0
    errors = [line for line in out.stdout.splitlines() if line.startswith("::error::")]
    assert len(errors) == 3, out.stdout
    assert "ONEBIT_WORKING_BUILD is not set" in errors[0] and "no TheRock toolchain" in errors[1]
    assert "ONEBIT_HRX_MODEL is not set" in errors[2]


def test_an_unwritable_cache_folder_is_named(tmp_path):
    box = a_box(tmp_path)
    box["ONEBIT_WORKSPACE"] = str(tmp_path / "file-not-folder")
    (tmp_path / "file-not-folder").write_text("")
    out = cheap_checks(load("strix-halo.yml"), box, tmp_path)
    assert out.returncode != 0 and "is not writable" in out.stdout


def test_cheap_checks_come_before_install_and_doctor_and_the_run_is_locked():
    doc = load("strix-halo.yml")
    names = [s.get("name") for s in steps(doc)]
    assert names.index("Runner needs") < names.index("Install onebit-build") < names.index("Doctor")
    run = next(s for s in steps(doc) if " verify-run " in str(s.get("run", "")))
    assert "--locked" in run["run"].split()
    # the virtual environment is kept in the runner's workspace, created only when missing
    install = next(s for s in steps(doc) if s.get("name") == "Install onebit-build")["run"]
    assert '"$ONEBIT_WORKSPACE/venv"' in install and '[ -x "$venv/bin/python" ] || python3 -m venv' in install
