"""The numerical check for real: the default build's llama-server, the real model, and a
build that is wrong only for batches of more than 16 rows (tests/fixtures/0099-known-bad-rms-
norm-long-batches.patch), which answers every smoke prompt right and must still fail ``smoke``
(exit 10) and ``verify-run`` against the clean build (exit 11)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from _support import REPO, run_cli, shared_from_user
from conftest import workspace_for_tests
from onebit_build.checking.manifest import load_latest, load_manifest, Workspace
from onebit_build.checking.references import fingerprint, reference_name
from onebit_build.spec.recipe import load_recipe
from onebit_build.spec.pins import load_pins
from onebit_build.running import numerics as nm
from onebit_build.running.numerics_ref import eval_text
from onebit_build.running.numerics_run import Runner

KNOWN_BAD = REPO / "tests" / "fixtures" / "0099-known-bad-rms-norm-long-batches.patch"
PROJECT_DATA = ("pins.yaml", "pins.lock", "recipes", "patches", "references", "smoke")


def default_recipe():
    return load_recipe(REPO / "recipes" / "default.yaml", load_pins(REPO / "pins.yaml"))


def runner(server: Path, model: Path, logs: Path) -> Runner:
    recipe = default_recipe()
    assert recipe.numerics is not None
    return Runner(server_bin=server, model=model, spec=recipe.numerics, ctx_size=recipe.smoke.ctx_size,
                  threads=recipe.smoke.threads, env=(), health_timeout_s=60, logs=logs,
                  timeout_s=lambda r: 60 + r.batch / 2)


def test_the_same_build_scores_the_same_numbers_with_the_batches_planned(llama_server, gemma_model, tmp_path):
    """Two CPU runs of one build: no divergence at all, every batch as the schedule meant it
    (the prompt cache kept, so the jumps are the long batches), a plausible perplexity."""
    text = eval_text(REPO / "smoke", default_recipe().numerics.text)[0]
    r = runner(llama_server, gemma_model, tmp_path)
    t0 = time.monotonic()
    first, tokens = r.run("CPU", "cpu", "0", text, None)
    seconds = time.monotonic() - t0
    second, _ = r.run("CPU", "cpu", "0", text, tokens)
    spec = r.spec
    assert len(first.scored) == spec.positions >= 4 * spec.ubatch
    assert first.batches_note == ""
    jumps = [s for s in first.scored if s.batch > spec.ubatch]
    assert len(jumps) == spec.rounds and all(s.batch >= spec.jump for s in jumps)
    fig = nm.compare(first.scored, second.scored)
    assert fig.kld_max == 0 and fig.top1 == 1 and fig.ppl_ratio == 1
    assert 1.5 < fig.ppl < 200, fig
    # each jump evaluated as one prompt batch, as the server's own log says
    assert first.log.read_text().count("prompt eval time =") == len(first.scored)
    assert f"/    {spec.jump} tokens" in first.log.read_text() and seconds > 0


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's data, to add a patch to."""
    root = tmp_path / "project"
    root.mkdir()
    for item in PROJECT_DATA:
        src = REPO / item
        if src.is_dir():
            shutil.copytree(src, root / item)
        elif src.is_file():
            shutil.copy2(src, root / item)
    return root


def report_of(stdout: str) -> dict:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("report: "))
    return json.loads(Path(line.split(": ", 1)[1].strip()).with_suffix(".json").read_text())


@pytest.mark.slow
@pytest.mark.shared_workspace
def test_a_build_wrong_only_for_long_batches_fails_smoke_and_verify_run(project, tmp_path):
    ws = workspace_for_tests()
    common = ("--workspace", str(ws), *shared_from_user(ws))
    # The clean build (the test workspace's default build) records its reference into the
    # copy, for whatever toolchain this machine has, then passes against it.
    built = run_cli(project, *common, "build", timeout=3600)
    assert built.returncode == 0, built.stderr[-3000:]
    clean = load_latest(Workspace(root=ws), "default")
    assert clean is not None
    clean_folder = Path(clean.output("llama-server").path).parent.parent
    name = reference_name(fingerprint(load_manifest(clean_folder / "build-manifest.json")))
    ref = project / "references" / "default" / "numerics" / f"{name}.json"
    ref.unlink(missing_ok=True)
    wrote = run_cli(project, *common, "smoke", "--write-numerics", str(ref), timeout=1800)
    assert wrote.returncode == 0, wrote.stderr[-3000:]
    assert f"numerical reference: {ref}" in wrote.stdout and ref.is_file() and ref.stat().st_size < (1 << 20)
    again = run_cli(project, *common, "smoke", timeout=1800)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "CPU matches the reference" in again.stderr

    # The known-bad patch on top of the series: every prompt still answered right, the CPU
    # numbers off after each long batch.
    shutil.copy2(KNOWN_BAD, project / "patches" / "llama.cpp" / KNOWN_BAD.name)
    bad = run_cli(project, *common, "smoke", timeout=3600)
    assert bad.returncode == 10, bad.stderr[-3000:]
    doc = report_of(bad.stdout)
    failed = [c for c in doc["checks"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["numerics"], failed
    assert all(c["passed"] for c in doc["checks"] if c["name"].startswith("answer:"))
    assert "CPU: " in failed[0]["summary"] and "budget" in failed[0]["summary"]
    assert doc["numerics"]["runs"][0]["figures"]["kld_mean"] > default_recipe().numerics.reference.kld_mean

    run_dir = tmp_path / "verify-run"
    vr = run_cli(project, *common, "verify-run", "--working", str(clean_folder), "--no-speed",
                 "--run-dir", str(run_dir), timeout=3600)
    assert vr.returncode == 11, vr.stderr[-3000:]
    verdict = json.loads((run_dir / "verification.json").read_text())
    assert "numerics" in verdict["failed"], verdict["failed"]
    parts = {p["name"]: p for p in verdict["parts"]}
    assert parts["answers"]["ok"], parts["answers"]["summary"]
    assert parts["numerics"]["per_device"][0]["missed"], parts["numerics"]
