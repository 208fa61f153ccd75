"""The numerical check on a device other than the CPU, for real: the vulkan recipe's build on
Mesa's lavapipe (a CPU Vulkan device, shown to llama.cpp with GGML_VK_VISIBLE_DEVICES=0),
scored and judged by the code smoke runs (running/numerics_run.py) against the same build's
CPU run. The clean build matches on Vulkan0; a build whose Vulkan RMS norm is wrong
(tests/fixtures/0099-known-bad-vulkan-rms-norm.patch) still matches on the CPU and misses the
recipe's device budget on Vulkan0.

lavapipe evaluates about 1-5 tokens a second here (a whole vulkan smoke on it took 15 minutes),
so these runs score fewer positions than the recipe does (micro-batches of 8, 2 rounds, 32
positions, the least the recipe check allows), with every layer on the device, and judge them
by the recipe's own budgets."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from _support import REPO, run_cli, shared_from_user
from conftest import vulkan_workspace_for_tests
from onebit_build.checking.manifest import Workspace, load_latest
from onebit_build.spec.recipe import load_recipe
from onebit_build.spec.pins import load_pins
from onebit_build.running.numerics_ref import eval_text
from onebit_build.running.numerics_run import Runner, budget_of, judged

pytestmark = [pytest.mark.slow, pytest.mark.shared_workspace(workspace="vulkan")]

KNOWN_BAD = REPO / "tests" / "fixtures" / "0099-known-bad-vulkan-rms-norm.patch"
LAVAPIPE = (("GGML_VK_VISIBLE_DEVICES", "0"), ("GGML_VK_DISABLE_GRAPH_OPTIMIZE", "1"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if shutil.which("glslc") is None:
        pytest.skip("glslc is not installed (apt-get install glslc libvulkan-dev spirv-headers)")
    listed = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True, env={"PATH": "/usr/bin"})
    if "llvmpipe" not in listed.stdout:
        pytest.skip(f"no lavapipe device (mesa-vulkan-drivers): vulkaninfo says {listed.stdout[-200:]!r}")
    root = tmp_path / "project"
    root.mkdir()
    for item in ("pins.yaml", "pins.lock", "recipes", "patches", "references", "smoke"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / item)
    return root


def built(project: Path) -> Path:
    """The vulkan recipe built from ``project`` in the vulkan test workspace; its llama-server."""
    ws = vulkan_workspace_for_tests()
    out = run_cli(project, "--workspace", str(ws), *shared_from_user(ws), "--recipe", "vulkan", "build", timeout=5400)
    assert out.returncode == 0, out.stderr[-3000:]
    man = load_latest(Workspace(root=ws), "vulkan")
    assert man is not None
    return Path(man.output("llama-server").path)


def scored(server: Path, model: Path, logs: Path):
    """The CPU run and the Vulkan0 run (every layer) of the light schedule, each judged: the CPU
    against itself (as smoke does without a reference), Vulkan0 against the CPU."""
    recipe = load_recipe(REPO / "recipes" / "vulkan.yaml", load_pins(REPO / "pins.yaml"))
    assert recipe.numerics is not None
    spec = replace(recipe.numerics, ubatch=8, rounds=2, jump=20, steps=15)
    text = eval_text(REPO / "smoke", spec.text)[0]
    runner = Runner(server_bin=server, model=model, spec=spec, ctx_size=recipe.smoke.ctx_size,
                    threads=recipe.smoke.threads, env=LAVAPIPE, health_timeout_s=300, logs=logs,
                    timeout_s=lambda r: 600 + 30 * r.batch)
    cpu, tokens = runner.run("CPU", "cpu", "0", text, None)
    vk, _ = runner.run("Vulkan0", "all", "all", text, tokens)
    assert cpu.batches_note == "" and vk.batches_note == "", (cpu.batches_note, vk.batches_note)
    check, fig = judged("Vulkan0", "all", vk, cpu.scored, budget_of(spec.device), "this box's CPU run")
    return cpu, check, fig, budget_of(spec.reference)


def test_clean_on_lavapipe_matches_and_a_vulkan_only_error_is_caught(project, gemma_model, tmp_path):
    clean_cpu, check, fig, _ = scored(built(project), gemma_model, tmp_path / "clean")
    assert check.passed and fig is not None, check.summary

    shutil.copy2(KNOWN_BAD, project / "patches" / "llama.cpp" / KNOWN_BAD.name)
    bad_cpu, check, fig, reference = scored(built(project), gemma_model, tmp_path / "bad")
    assert not check.passed and fig is not None, check.summary
    assert check.summary.startswith("Vulkan0 at all offload (-ngl all): ") and "budget" in check.summary
    # The CPU of the bad build is untouched: judged against the clean build's CPU run by the
    # budget of a CPU against its reference, it passes.
    cpu_check, _ = judged("CPU", "cpu", bad_cpu, clean_cpu.scored, reference, "the clean build's CPU run")
    assert cpu_check.passed, cpu_check.summary
