"""The numerical check on a device other than the CPU, for real: the vulkan recipe's build on
Mesa's lavapipe (a CPU Vulkan device, shown to llama.cpp with GGML_VK_VISIBLE_DEVICES=0). The
clean build passes on the CPU and on Vulkan0; a build whose Vulkan RMS norm is wrong
(tests/fixtures/0099-known-bad-vulkan-rms-norm.patch) still passes on the CPU and fails on
Vulkan0 (exit 10).

lavapipe evaluates about 1-5 tokens a second here, so the recipe copy these tests use scores
fewer positions than the vulkan recipe does (micro-batches of 8, 2 rounds, 32 positions, the
least the recipe check allows), only with every layer on the device, and times one short
speed request; its budgets stay the recipe's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from _support import REPO, run_cli, shared_from_user
from conftest import vulkan_workspace_for_tests

pytestmark = [pytest.mark.slow, pytest.mark.shared_workspace(workspace="vulkan")]

KNOWN_BAD = REPO / "tests" / "fixtures" / "0099-known-bad-vulkan-rms-norm.patch"
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0", "GGML_VK_DISABLE_GRAPH_OPTIMIZE": "1"}
LIGHT = """numerics:
  text: harbour.txt
  ubatch: 8
  rounds: 2
  jump: 20
  steps: 15
  top_k: 20
  offload: [all]
"""


def light_recipe(text: str) -> str:
    """The vulkan recipe with the light schedule (its budgets kept) and deadlines for lavapipe."""
    head, _, tail = text.partition("\nnumerics:\n")
    budgets = tail[tail.index("  budgets:"):]
    head = head.replace("  health_timeout_s: 180\n", "  health_timeout_s: 300\n  request_base_s: 600\n"
                        "  stage_timeout_s: 5400\n").replace("speed_tokens: 128", "speed_tokens: 16")
    head = head.replace("speed_repeats: 3", "speed_repeats: 1")
    return head + "\n" + LIGHT + budgets


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
    # The light schedule is another workload than a committed reference's: none is compared.
    shutil.rmtree(root / "references" / "vulkan" / "numerics", ignore_errors=True)
    recipe = root / "recipes" / "vulkan.yaml"
    recipe.write_text(light_recipe(recipe.read_text()))
    return root


def smoke(project: Path) -> tuple[subprocess.CompletedProcess, dict]:
    ws = vulkan_workspace_for_tests()
    out = run_cli(project, "--workspace", str(ws), *shared_from_user(ws), "--recipe", "vulkan", "smoke",
                  env=LAVAPIPE, timeout=5400)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("report: ")), None)
    assert line is not None, out.stderr[-3000:]
    return out, json.loads(Path(line.split(": ", 1)[1].strip()).with_suffix(".json").read_text())


def numerics(doc: dict) -> dict[str, dict]:
    return {c["name"] + "/" + str(c["device"]): c for c in doc["checks"] if c["name"].startswith("numerics")}


def crashed(doc: dict) -> str | None:
    """What lavapipe did when its server died under the clean build (a Mesa fault, not the
    build's; Debian 12's Mesa 22.3 needs GGML_VK_DISABLE_GRAPH_OPTIMIZE=1), else None."""
    for c in doc["checks"]:
        if c["device"] == "Vulkan0" and not c["passed"] and c.get("evidence", {}).get("server_exit_code") is not None:
            return c["summary"]
    return None


def test_clean_on_lavapipe_and_a_vulkan_only_error_caught(project):
    clean, doc = smoke(project)
    if crashed(doc):
        pytest.skip(f"lavapipe's llama-server died on this machine's Mesa: {crashed(doc)}")
    checks = numerics(doc)
    assert set(checks) == {"numerics/CPU", "numerics:all/Vulkan0"}, checks
    assert all(c["passed"] for c in checks.values()), [c["summary"] for c in checks.values()]
    assert clean.returncode == 0, clean.stderr[-3000:]

    shutil.copy2(KNOWN_BAD, project / "patches" / "llama.cpp" / KNOWN_BAD.name)
    bad, doc = smoke(project)
    assert bad.returncode == 10, bad.stderr[-3000:]
    checks = numerics(doc)
    assert checks["numerics/CPU"]["passed"], checks["numerics/CPU"]["summary"]
    vk = checks["numerics:all/Vulkan0"]
    assert not vk["passed"] and re.match(r"Vulkan0 at all offload \(-ngl all\): .* budget", vk["summary"]), vk
