"""What a person and a CI system read from a real ``smoke``: JUnit read back by a JUnit reader
of its own (junitparser), each check shown as it finishes, the outputs of an up-to-date
build in one line, and lines cut to the terminal's width (COLUMNS)."""

from __future__ import annotations

import json
import re

import pytest
from junitparser import Failure, JUnitXml

from _support import REPO, run_cli, shared_from_user
from conftest import workspace_for_tests
from onebit_build.running.junit import Case, write_junit
from onebit_build.verify_run.verdict_junit import junit_cases
from onebit_build.verify_run.verdict import Part, RunVerdict

pytestmark = pytest.mark.shared_workspace

COLUMNS = 100


@pytest.fixture(scope="module")
def smoke_cli(llama_server, gemma_model, tmp_path_factory):
    """One real ``onebit-build smoke --junit FILE`` on the up-to-date test build, COLUMNS set."""
    ws = workspace_for_tests()
    junit = tmp_path_factory.mktemp("junit") / "smoke.xml"
    out = run_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "--model", str(gemma_model),
                  "smoke", "--junit", str(junit), env={"COLUMNS": str(COLUMNS)}, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out, junit


@pytest.mark.slow
def test_smoke_junit_has_real_times_recipe_device_classes_and_evidence(smoke_cli):
    out, junit = smoke_cli
    xml = JUnitXml.fromfile(str(junit))
    cases = [c for suite in xml for c in suite]
    by_name = {(c.classname, c.name): c for c in cases}
    assert ("default", "devices") in by_name and ("default.CPU", "answer:capital") in by_name
    assert {c.classname for c in cases} == {"default", "default.CPU"}
    assert all(c.is_passed for c in cases)
    # Times are measured: the start waits for the model load, the speed check times 4 requests.
    start, speed = by_name[("default.CPU", "start")], by_name[("default.CPU", "speed")]
    assert start.time > 0.1 and speed.time > 1.0
    assert speed.time > by_name[("default.CPU", "answer:capital")].time > 0
    assert sum(c.time for c in cases) <= float(xml.time) + 0.5
    # Passing cases carry what was measured: the answer, the alias listed, the decode speed.
    assert "Paris" in by_name[("default.CPU", "answer:capital")].system_out
    assert '"ids": [\n    "gemma-3-270m-q4_k_m"\n  ]' in by_name[("default.CPU", "catalog")].system_out
    evidence = json.loads(speed.system_out.split("\n", 1)[1])
    assert evidence["decode_tok_s"] > 1.0 and evidence["valid"] is True
    # The streamed chat is a case of its own; its time to the first token stands beside the decode speed.
    stream = json.loads(by_name[("default.CPU", "stream")].system_out.split("\n", 1)[1])
    assert stream["chunks"] > 3 and stream["ends_with_done"] and stream["streamed_text"] == stream["whole_text"]
    assert evidence["first_token_s"] == stream["first_token_s"] > 0 and "first token" in speed.system_out


@pytest.mark.slow
def test_smoke_shows_each_check_and_fits_the_terminal(smoke_cli):
    out, _ = smoke_cli
    lines = out.stderr.splitlines()
    # stderr is no terminal here: one line per finished check, in order, before the stage line.
    shown = [line for line in lines if line.startswith("  CPU pass ") or line.startswith("  pass ")]
    assert len(shown) == 12, out.stderr  # 11 checks and the numerical one
    assert shown[0].startswith("  pass --list-devices") and "healthy on port" in shown[1]
    assert lines.index(shown[-1]) < next(i for i, line in enumerate(lines) if line.startswith("smoke    ok"))
    # The build is up to date: no output is listed, one line names the manifest.
    assert not any("sha256" in line and "/bin/" in line for line in lines), out.stderr
    summary = [line for line in lines if "output(s) up to date, see " in line]
    assert len(summary) == 1 and summary[0].strip().startswith("8 output(s)")
    assert summary[0].endswith("build-manifest.json")
    assert all(len(line) <= COLUMNS for line in shown)
    assert any(line.endswith("…") for line in shown)  # the speed line is longer than 100 columns


def test_a_failed_case_is_a_failure_with_its_message(tmp_path):
    cases = [Case(name="catalog", classname="r.CPU", ok=False, message="/v1/models: 2 models listed",
                  detail="/v1/models: 2 models listed\n{}", seconds=0.25),
             Case(name="health", classname="r.CPU", ok=True, detail="/health: 200 status ok", seconds=0.01)]
    xml = JUnitXml.fromfile(str(write_junit(tmp_path / "j.xml", "smoke", cases, seconds=1.0)))
    got = {c.name: c for suite in xml for c in suite}
    failure = got["catalog"].result[0]
    assert isinstance(failure, Failure) and failure.message == "/v1/models: 2 models listed"
    assert got["catalog"].time == 0.25 and got["catalog"].system_out is None
    assert got["health"].is_passed and got["health"].system_out == "/health: 200 status ok"


def test_verify_run_cases_are_classed_by_device_and_timed():
    answers = Part(name="answers", ok=False, summary="1 of 2 differ", data={"comparisons": [
        {"device": "CPU", "prompt": "capital", "same": True, "difference": "", "new": {"text": " Paris"}},
        {"device": "Vulkan0", "prompt": "capital", "same": False, "difference": "token 3 differs"}]})
    speed = Part(name="speed", ok=True, summary="on par", data={"per_device": [
        {"device": "CPU", "metric": "decode", "verdict": "on par", "median_ratio": 1.01, "ok": True}]})
    times = {"artifacts": 2.0, "answers/CPU": 3.0, "answers/Vulkan0": 4.0, "speed/CPU": 30.0}
    cases = junit_cases(RunVerdict(parts=(answers, speed)), recipe="vulkan", times=times)
    got = {(c.classname, c.name): c for c in cases}
    assert got[("vulkan", "answers")].seconds == 7.0 and got[("vulkan", "speed")].seconds == 30.0
    ok, bad = got[("vulkan.CPU", "answer:capital")], got[("vulkan.Vulkan0", "answer:capital")]
    assert ok.ok and ok.seconds == 3.0 and "Paris" in ok.detail
    assert not bad.ok and bad.message == "token 3 differs" and bad.seconds == 4.0
    decode = got[("vulkan.CPU", "speed:decode")]
    assert decode.ok and decode.seconds == 30.0 and "new/working 1.010" in decode.detail


def test_plan_lines_fit_the_terminal_width_and_say_how_to_see_them_whole():
    out = run_cli(REPO, "plan", env={"COLUMNS": "90"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines and all(len(line) <= 90 for line in lines)
    assert "-v or --json shows them whole" in out.stderr
    whole = run_cli(REPO, "-v", "plan", env={"COLUMNS": "90"})
    assert max(len(line) for line in whole.stdout.splitlines()) > 90  # the plan's own lines, whole
    assert "-Xpreprocessor -fdebug-prefix-map=" in whole.stdout


def test_only_changed_outputs_are_listed(capsys, tmp_path):
    from types import SimpleNamespace

    from onebit_build.job.build import show_outputs

    outs = [SimpleNamespace(name=f"lib{i}.so", path=tmp_path / f"lib{i}.so", sha256=f"{i}" * 64) for i in range(3)]
    before = {str(outs[0].path): outs[0].sha256, str(outs[1].path): "f" * 64}  # lib1 changed, lib2 is new
    show_outputs([SimpleNamespace(outputs=outs)], tmp_path / "build-manifest.json", before)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0].strip() for line in lines[:-1]] == ["lib1.so", "lib2.so"]
    assert lines[-1] == f"  1 output(s) up to date, see {tmp_path / 'build-manifest.json'}"
    show_outputs([SimpleNamespace(outputs=outs)], tmp_path / "m.json", {})
    assert capsys.readouterr().err.splitlines()[-1] == f"  manifest: {tmp_path / 'm.json'}"


@pytest.mark.slow
def test_on_a_terminal_the_running_check_is_named_while_it_runs(llama_server, gemma_model):
    import os
    import sys

    from _support import run_in_terminal

    ws = workspace_for_tests()
    env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_MIRROR_DIR", "ONEBIT_WORKSPACE", "COLUMNS")}
    env["ONEBIT_ROOT"] = str(REPO)
    rc, text = run_in_terminal([sys.executable, "-m", "onebit_build", "--workspace", str(ws), *shared_from_user(ws),
                                "--model", str(gemma_model), "smoke"], env, timeout=900)
    assert rc == 0, text[-3000:]
    # The spinner's line names each check before it ends (rich redraws it in place)...
    for running in ("CPU start: loading gemma-3-270m-q4_k_m.gguf ...", "CPU answer:capital ...", "CPU speed ...",
                    "CPU numerics (cpu): "):
        assert running in text, running
    # ...and each finished check stays as its own line.
    assert "CPU pass /v1/models lists only gemma-3-270m-q4_k_m" in text and "smoke PASS: 12/12" in text
    # the job's total time, last, with the build's recorded verdict (another test may have verified it)
    assert re.search(r"s in all \(verify (NOT RUN|VERIFIED|VERIFIED \(RECORDED\))\); logs: ", text), text[-500:]
