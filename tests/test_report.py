"""The report is a pure rendering of a SmokeResult: tested here on results written out by
hand (the real run's report is checked in test_smoke)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from onebit_build.spec.recipe import load_recipe

from onebit_build.spec.pins import load_pins
from onebit_build.core.fsutil import read_state
from onebit_build.running.model import ModelFile
from onebit_build.running.report import REPORT_KIND, REPORT_SCHEMA, md_cell, print_summary, summary_lines, write_report
from onebit_build.running.measure import Sample
from onebit_build.running.smoke import DeviceResult, SmokeResult
from onebit_build.running.smoke_checks import SmokeCheck, check_speed, summarize_speed

REPO = Path(__file__).resolve().parent.parent


def recipe():
    return load_recipe(REPO / "recipes" / "default.yaml", load_pins(REPO / "pins.yaml"))


def sample(dps: float, ok: bool = True) -> Sample:
    return Sample(
        prompt_tok_s=150.0, decode_tok_s=dps, prompt_n=12, predicted_n=128,
        valid=ok, why="" if ok else "the text 'Berlin' does not start with the checked answer", text=" Paris",
    )


def make_result(run_dir: Path, *, cpu_ok: bool = True, with_missing: bool = True) -> SmokeResult:
    speed = summarize_speed(
        device="CPU", prompt="capital", tokens=128, warmup=sample(25.0),
        samples=(sample(30.0), sample(28.0, ok=cpu_ok), sample(29.0)),
        answer_passed=True, reference=None, tolerance=0.25,
    )
    cpu_checks = (
        SmokeCheck(name="start", device="CPU", passed=True, summary="healthy on port 1234 after 1.0 s",
                   evidence={"port": 1234}),
        SmokeCheck(name="health", device="CPU", passed=True, summary="/health: 200 status ok",
                   evidence={"http_status": 200}),
        SmokeCheck(name="answer:capital", device="CPU", passed=True,
                   summary="capital: answer ' Paris' contains 'Paris'",
              evidence={"answer": " Paris", "prompt": "Q|A\nAnswer:"}),
        check_speed(speed),
    )
    devices = [DeviceResult(device="CPU", checks=cpu_checks, speed=speed, log=run_dir / "logs" / "server-CPU.log",
                            seconds=12.5, port=1234)]
    listed: tuple[str, ...] = ()
    run_checks = (SmokeCheck(name="devices", device=None, passed=True,
                             summary="--list-devices shows every expected device (CPU)"),)
    if with_missing:
        devices.append(DeviceResult(
            device="HRX20",
            checks=(SmokeCheck(name="start", device="HRX20", passed=False,
                               summary="HRX20 is not offered by this llama-server"),),
            speed=None, log=None, seconds=0.0,
        ))
        run_checks = (SmokeCheck(name="devices", device=None, passed=False,
                                 summary="--list-devices lacks HRX20 (lists: none)",
                            evidence={"missing": ["HRX20"]}),)
    return SmokeResult(
        recipe="default",
        server_bin=Path("/opt/x/llama-server"),
        model=ModelFile(path=Path("/opt/x/m.gguf"), sha256="ab" * 32, source="local"),
        expect_commit="0c1e57098bba43ac29e6e3b677cdceebdd22334f",
        run_dir=run_dir,
        devices_expected=tuple(d.device for d in devices),
        devices_listed=listed,
        checks=run_checks,
        device_results=tuple(devices),
        started_at="2026-10-01T12:00:00+00:00",
        seconds=13.0,
    )


def test_report_json_is_versioned_and_complete(tmp_path):
    result = make_result(tmp_path)
    manifest = {"recipe": "default", "llama.cpp": "0c1e570", "nested": {"x": 1}}
    json_path, md_path = write_report(tmp_path, recipe=recipe(), smoke=result, manifest=manifest,
                                      extra={"stage_s": 13.0})
    assert json_path == tmp_path / "report.json" and md_path == tmp_path / "report.md"
    doc = read_state(json_path, REPORT_KIND, REPORT_SCHEMA)
    assert doc["result"] == "fail" and doc["passed"] is False
    assert doc["checks_total"] == len(result.all_checks) == 6
    assert doc["checks_passed"] == 4
    assert [c["name"] for c in doc["checks"]] == ["devices", "start", "health", "answer:capital", "speed", "start"]
    assert doc["checks"][3]["evidence"]["answer"] == " Paris"
    cpu, hrx = doc["devices"]
    assert cpu["device"] == "CPU" and cpu["passed"] is True and cpu["log"] == "logs/server-CPU.log"
    assert cpu["speed"]["valid"] is True and cpu["speed"]["decode_tok_s"] == 29.0  # median of 30, 28, 29
    assert len(cpu["speed"]["samples"]) == 3 and cpu["speed"]["warmup"]["decode_tok_s"] == 25.0
    assert hrx["passed"] is False and hrx["speed"] is None and hrx["log"] is None
    assert doc["manifest"] == manifest and doc["extra"] == {"stage_s": 13.0}
    assert doc["recipe"]["name"] == "default" and doc["recipe"]["prompts"][0]["expect"] == "Paris"
    assert doc["model"]["sha256"] == "ab" * 32
    assert {"python", "platform", "cpu_count", "onebit_build"} <= set(doc["environment"])
    json.dumps(doc)  # plain JSON all the way down


def test_report_markdown_reads_as_a_table_per_device(tmp_path):
    result = make_result(tmp_path)
    _, md_path = write_report(tmp_path, recipe=recipe(), smoke=result, manifest={"llama.cpp": "0c1e570"})
    md = md_path.read_text()
    assert md.startswith("# Smoke report: recipe `default`: FAIL")
    assert "4 of 6 checks passed" in md
    assert "| device | result | prompt tok/s | decode tok/s | first token s | speed note | log |" in md
    assert "| CPU | ✅ pass | 150.0 | 29.0 | — | no reference | [log](logs/server-CPU.log) |" in md
    assert "| HRX20 | ❌ FAIL |" in md
    assert "## CPU: pass (12.5 s)" in md and "## HRX20: FAIL (0.0 s)" in md
    assert "| devices | ❌ FAIL | --list-devices lacks HRX20 (lists: none) |" in md
    assert "manifest: llama.cpp `0c1e570`" in md
    # Every table row of the CPU section has the same number of cells as its header.
    for line in md.splitlines():
        if line.startswith("| start |") or line.startswith("| answer:capital |"):
            assert line.replace("\\|", "").count("|") == 4


def test_the_time_to_the_first_token_stands_beside_the_decode_speed(tmp_path):
    result = make_result(tmp_path, with_missing=False)
    cpu = result.device("CPU")
    stream = SmokeCheck(name="stream", device="CPU", passed=True, summary="stream: 12 chunks",
                        evidence={"first_token_s": 0.4321})
    result = replace(result, device_results=(replace(cpu, checks=(*cpu.checks, stream),
                                                     speed=replace(cpu.speed, first_token_s=0.4321)),))
    json_path, md_path = write_report(tmp_path, recipe=recipe(), smoke=result, manifest=None)
    assert "| CPU | ✅ pass | 150.0 | 29.0 | 0.43 | no reference |" in md_path.read_text()
    assert read_state(json_path, REPORT_KIND, REPORT_SCHEMA)["devices"][0]["speed"]["first_token_s"] == 0.4321
    assert "decode 29.0 tok/s, prompt 150.0 tok/s, first token 0.43 s" in "\n".join(summary_lines(result))


def test_invalid_speed_shows_as_invalid_not_as_a_number(tmp_path):
    result = make_result(tmp_path, cpu_ok=False, with_missing=False)
    cpu = result.device("CPU")
    assert cpu.speed is not None and cpu.speed.valid is False and cpu.speed.decode_tok_s is None
    assert result.passed is False
    _, md_path = write_report(tmp_path, recipe=recipe(), smoke=result, manifest=None)
    md = md_path.read_text()
    assert "| CPU | ❌ FAIL | invalid | invalid |" in md
    assert "FAIL: the text 'Berlin' does not start with the checked answer" in md
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["devices"][0]["speed"]["decode_tok_s"] is None
    assert doc["devices"][0]["speed"]["samples"][1]["answer_ok"] is False


def test_passing_result_and_terminal_summary(tmp_path, capsys):
    result = make_result(tmp_path, with_missing=False)
    assert result.passed is True
    _, md_path = write_report(tmp_path, recipe=recipe(), smoke=result, manifest=None)
    assert md_path.read_text().startswith("# Smoke report: recipe `default`: PASS")
    lines = summary_lines(result)
    assert lines[0].strip().startswith("CPU") and "answers 1/1" in lines[0] and "decode 29.0 tok/s" in lines[0]
    assert lines[-1].startswith("smoke PASS: 5/5 checks")
    print_summary(result)
    said = capsys.readouterr()
    # The verdict answers the command (stdout, kept with -q); the device lines are progress.
    assert said.out.startswith("smoke PASS") and "decode 29.0 tok/s" in said.err and "smoke PASS" not in said.err

    failing = replace(result, checks=(SmokeCheck(name="devices", device=None, passed=False,
                                                 summary="--list-devices lacks Vulkan0"),))
    lines = summary_lines(failing)
    assert "  FAIL --list-devices lacks Vulkan0" in lines and lines[-1].startswith("smoke FAIL: 4/5")


def test_md_cell_escapes_table_breakers():
    assert md_cell("a|b\nc") == "a\\|b⏎c"
    assert md_cell(None) == ""
