"""The GitHub workflows: actionlint (with shellcheck for the run: scripts) passes on both,
their cached and uploaded paths are ones the actions accept, and the Strix Halo workflow is
a real verification run that never uploads an older run's report."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("name", ["ci.yml", "strix-halo.yml", "bump.yml"])
def test_actionlint_passes(name):
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck): actionlint needs it "
                    "to check the run: scripts")
    out = subprocess.run([actionlint(), "-config-file", str(CONFIG), str(WORKFLOWS / name)], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_catches_an_unknown_runner_label(tmp_path):
    """The check can fail: without the configuration the self-hosted label is unknown."""
    copy = tmp_path / ".github" / "workflows"
    copy.mkdir(parents=True)
    shutil.copy2(WORKFLOWS / "strix-halo.yml", copy / "strix-halo.yml")
    out = subprocess.run([actionlint(), "-shellcheck=", str(copy / "strix-halo.yml")], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode != 0 and 'label "strix-halo" is unknown' in out.stdout


def test_actionlint_config_names_the_runner_label():
    labels = yaml.safe_load(CONFIG.read_text())["self-hosted-runner"]["labels"]
    runs_on = load("strix-halo.yml")["jobs"]["verify-run"]["runs-on"]
    assert "strix-halo" in labels and "strix-halo" in runs_on


@pytest.mark.parametrize("name", ["ci.yml", "strix-halo.yml", "bump.yml"])
def test_cached_and_uploaded_paths_have_no_dot_dot_segment(name):
    """actions/cache and actions/upload-artifact refuse a path with a '..' segment."""
    seen = 0
    for s in steps(load(name)):
        if str(s.get("uses", "")).startswith(("actions/cache", "actions/upload-artifact")):
            for line in str(s["with"]["path"]).splitlines():
                seen += 1
                assert ".." not in Path(line.strip()).parts, f"{name}: {s.get('name')}: {line}"
    assert seen


@pytest.mark.parametrize("name", ["ci.yml", "strix-halo.yml", "bump.yml"])
def test_permissions_are_read_only(name):
    assert load(name)["permissions"] == {"contents": "read"}


def test_strix_halo_is_a_verification_run():
    doc = load("strix-halo.yml")
    text = (WORKFLOWS / "strix-halo.yml").read_text()
    run = next(s for s in steps(doc) if "onebit-build" in str(s.get("run", ""))
               and " verify-run " in str(s.get("run", "")))
    assert "--working" in run["run"] and "--run-dir" in run["run"] and "--junit" in run["run"]
    assert "GITHUB_STEP_SUMMARY" in text
    uploads = [s for s in steps(doc) if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    bundle = next(s for s in uploads if "verification.tar.gz" in s["with"]["path"])
    assert "pins.lock" in bundle["with"]["path"]
    # Only this job's run folder is uploaded: the upload depends on the report this job wrote,
    # and no step looks for the newest folder among older runs.
    assert "steps.report.outputs.bundle" in bundle["if"]
    assert "ls -t" not in text and "runs/*" not in text


def test_bump_opens_a_pull_request_only_when_the_bump_passed():
    doc = load("bump.yml")
    assert set(doc[True]) == {"schedule", "workflow_dispatch"}  # YAML 1.1 reads the key "on" as true
    job = doc["jobs"]["bump"]
    assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
    by_name = {s.get("name"): s for s in job["steps"]}
    bump, pr = by_name["Bump"], by_name["Pull request"]
    assert "onebit-build pins bump llama.cpp --to-sdist" in bump["run"] and "--run-dir" in bump["run"]
    assert pr["if"] == "steps.bump.outcome == 'success'" and "gh pr create" in pr["run"]
    assert "bump-report.md" in pr["run"]
    # What comes from outside (the index's version) reaches the scripts through the environment only.
    assert all("${{" not in str(s.get("run", "")) for s in job["steps"])


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


# --------------------------------------------------------------------------- ci.yml: pins, scope, caches, checks

USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<ref>\S+)(?P<rest>.*)$")


@pytest.mark.parametrize("name", ["ci.yml", "strix-halo.yml", "bump.yml"])
def test_every_action_is_pinned_by_its_full_commit_sha(name):
    """A tag can be moved to other code; a commit cannot. The release stays readable in a comment."""
    lines = [m for m in map(USES.match, (WORKFLOWS / name).read_text().splitlines()) if m]
    assert lines, f"{name} uses no action?"
    for m in lines:
        where = f"{name}: {m['action']}@{m['ref']}"
        assert re.fullmatch(r"[0-9a-f]{40}", m["ref"]), f"{where} is not pinned by a commit SHA"
        assert re.fullmatch(r"\s+#\s*v\d+(\.\d+){2}\s*", m["rest"]), f"{where}: the version comment is missing"


def test_one_action_is_one_commit_in_every_workflow():
    seen: dict[str, set[str]] = {}
    for name in ("ci.yml", "strix-halo.yml", "bump.yml"):
        for m in filter(None, map(USES.match, (WORKFLOWS / name).read_text().splitlines())):
            seen.setdefault(m["action"], set()).add(m["ref"] + m["rest"].strip())
    assert all(len(refs) == 1 for refs in seen.values()), seen


def test_ci_cancels_the_run_a_newer_push_supersedes():
    group = load("ci.yml")["concurrency"]
    assert group["cancel-in-progress"] is True
    assert "github.ref" in group["group"] and "pull_request.number" in group["group"]


GHA_CACHE_VARS = ("SCCACHE_GHA_ENABLED", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_CACHE_URL", "ACTIONS_RESULTS_URL")


def test_the_cache_service_token_reaches_only_the_build_steps():
    doc = load("ci.yml")
    text = (WORKFLOWS / "ci.yml").read_text()
    job = doc["jobs"]["test"]
    assert not set(GHA_CACHE_VARS) & set(doc.get("env") or {}) and not set(GHA_CACHE_VARS) & set(job.get("env") or {})
    assert "exportVariable" not in text, "a variable exported by github-script reaches every later step"
    with_token = [s for s in job["steps"] if set(GHA_CACHE_VARS) <= set(s.get("env") or {})]
    assert {s["name"] for s in with_token} == {"Unit and integration tests", "Default build and smoke test"}
    for s in with_token:
        assert "pytest" in s["run"] or "onebit-build" in s["run"]
        assert s["env"]["ACTIONS_RUNTIME_TOKEN"] == "${{ steps.gha-cache.outputs.ACTIONS_RUNTIME_TOKEN }}"


def test_the_model_and_sdist_are_cached_once_keyed_by_their_pins():
    caches = [s for s in steps(load("ci.yml")) if str(s.get("uses", "")).startswith("actions/cache")]
    fetched = [s for s in caches if any(d in str(s["with"]["path"]) for d in ("downloads", "models", "ONEBIT_FETCHED"))]
    assert len(fetched) == 1, [s.get("name") for s in fetched]
    key = fetched[0]["with"]["key"]
    assert "pins.yaml" in key and "models.lock" in key and "restore-keys" not in fetched[0]["with"]


def ci_step(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    step = next(s for s in steps(load("ci.yml")) if s.get("name") == name)
    return subprocess.run(["bash", "--noprofile", "--norc", "-e", "-c", step["run"]], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **env}, timeout=60)


def manifest(folder: Path, cache: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "default.json").write_text(json.dumps({"components": [{"name": "llama", "compiler_cache": cache}]}))


GHA_OK = {"launcher": "sccache", "backend": "gha", "stats": {"requests": 212, "hits": 200, "misses": 12, "errors": 0}}
CACHE_CASES = {
    "worked": (GHA_OK, 0, "200 of 212 compiles from the cache"),
    "reads failed": ({**GHA_OK, "stats": {**GHA_OK["stats"], "errors": 7},
                      "warnings": ["compiler cache: 7 reads or writes of the shared cache gha failed"]},
                     1, "7 reads or writes"),
    "did not start": ({"launcher": "none", "mode": "sccache", "reason": "sccache could not start: storage failed",
                       "warnings": ["compiler cache: sccache could not start (storage failed)"]}, 1, "could not start"),
}


@pytest.mark.parametrize("case", sorted(CACHE_CASES))
def test_a_github_cache_backend_that_failed_fails_the_job_and_says_so(tmp_path, case):
    cache, rc, said = CACHE_CASES[case]
    manifest(tmp_path / "ws" / "manifests", cache)
    summary = tmp_path / "summary.md"
    out = ci_step("Compiler cache backend worked",
                  {"ONEBIT_WORKSPACE": str(tmp_path / "ws"), "GITHUB_STEP_SUMMARY": str(summary)})
    assert out.returncode == rc, out.stdout + out.stderr
    assert said in summary.read_text()
    if rc:
        assert "::error::compiler cache" in out.stdout and "failed**" in summary.read_text()


def test_junit_results_become_a_check_summary(tmp_path):
    """A real JUnit file (pytest's own) read by the step: counts, the failure named, the verdict."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\ndef test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2, 'one is not two'\n\n"
        "@pytest.mark.skip(reason='not here')\ndef test_later():\n    pass\n")
    junit = tmp_path / "junit"
    junit.mkdir()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={junit / 'pytest.xml'}", str(tmp_path / "test_sample.py")],
                   cwd=tmp_path, capture_output=True, timeout=120)
    out = ci_step("JUnit results in a check summary", {"ONEBIT_JUNIT": str(junit), "RUNNER_TEMP": str(tmp_path),
                                                       "RUN_URL": "https://github.com/o/r/actions/runs/1"})
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "junit-check.json").read_text())
    assert doc["title"] == "3 tests, 1 failed, 1 skipped" and doc["conclusion"] == "failure"
    assert "test_bad" in doc["summary"] and "one is not two" in doc["summary"]
    check = next(s for s in steps(load("ci.yml")) if s.get("name") == "JUnit results as a check run")
    assert "checks.create" in check["with"]["script"]
    assert load("ci.yml")["jobs"]["test"]["permissions"]["checks"] == "write"


def test_summary_links_lead_to_the_run_on_github(tmp_path):
    expected = "${{ github.server_url }}/${{ github.repository }}/actions/runs/${{ github.run_id }}"
    step = next(s for s in steps(load("ci.yml")) if s.get("name") == "Smoke verdict to the summary")
    assert step["env"]["RUN_URL"] == expected
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "report.md").write_text("# smoke PASS\n"
                                      "- logs: [list-devices](logs/list-devices.log), [CPU](logs/cpu.log)\n"
                                      "- see [llama.cpp](https://github.com/ggml-org/llama.cpp)\n")
    summary = tmp_path / "summary.md"
    url = "https://github.com/o/r/actions/runs/42"
    out = ci_step("Smoke verdict to the summary", {"ONEBIT_RUN_DIR": str(run_dir), "GITHUB_STEP_SUMMARY": str(summary),
                                                   "RUN_URL": url})
    assert out.returncode == 0, out.stderr
    text = summary.read_text()
    assert f"[list-devices]({url}#artifacts)" in text and f"[CPU]({url}#artifacts)" in text
    assert "](logs/" not in text and "[llama.cpp](https://github.com/ggml-org/llama.cpp)" in text


def test_ci_attests_the_built_server_with_githubs_provenance_action():
    """GitHub's build provenance of llama-server: the job may mint an id-token and write
    attestations, the action is pinned by a full SHA and attests the server the job built."""
    job = load("ci.yml")["jobs"]["test"]
    assert job["permissions"]["id-token"] == "write" and job["permissions"]["attestations"] == "write"
    attest = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/attest-build-provenance@"))
    assert re.fullmatch(r"actions/attest-build-provenance@[0-9a-f]{40}", attest["uses"])
    assert attest["with"]["subject-path"] == "${{ steps.server.outputs.path }}"
    server = next(s for s in job["steps"] if s.get("id") == "server")
    assert "onebit-build -q --recipe default location" in server["run"] and server["if"] == attest["if"]
