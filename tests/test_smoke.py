"""The smoke stage: pure check decisions, then run_smoke against the real llama-server and
the real model (the default recipe passes; wrong expectations, missing devices, a broken
model and Ctrl-C are each caught)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
import requests

from _support import sigint_default

from onebit_build.spec.recipe import PromptCheck, load_recipe

from onebit_build.spec.pins import load_pins
from onebit_build.core.errors import SmokeError
from onebit_build.core.fsutil import read_state
from onebit_build.running.model import ModelFile
from onebit_build.running.report import REPORT_KIND, REPORT_SCHEMA, write_report
from onebit_build.running.measure import Completion, Sample
from onebit_build.running.smoke import run_smoke
from onebit_build.running.smoke_checks import (
    build_commit,
    check_answer,
    check_catalog,
    check_devices,
    check_health,
    check_props,
    check_speed,
    commit_matches,
    judge_speed_sample,
    on_par,
    summarize_speed,
)

REPO = Path(__file__).resolve().parent.parent
PIN = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
SMOKE_BUDGET_S = 60.0
# One server thread: on a 2-core machine that is busy with anything else, llama.cpp's
# spinning thread pool at 2 threads collapses (measured 4-10 tok/s against 50 with one).
THREADS = 1


def default_recipe():
    return load_recipe(REPO / "recipes" / "default.yaml", load_pins(REPO / "pins.yaml"))


def pid_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def server_pids(result) -> list[int]:
    return [c.evidence["pid"] for c in result.all_checks if c.name == "start" and "pid" in c.evidence]


# --------------------------------------------------------------------------- pure checks


def test_check_health():
    assert check_health("CPU", 200, {"status": "ok"}).passed
    bad = check_health("CPU", 503, {"error": {"message": "Loading model"}})
    assert not bad.passed and "503" in bad.summary


CATALOG = {"object": "list",
           "data": [{"id": "/m/x.gguf", "meta": {"n_params": 268098176, "n_ctx": 2048, "n_ctx_train": 32768}}]}


def test_check_catalog():
    ok = check_catalog("CPU", 200, CATALOG, model_id="/m/x.gguf", ctx_size=2048)
    assert ok.passed and ok.evidence["n_params"] == 268098176 and "268,098,176 parameters" in ok.summary
    two = {"data": CATALOG["data"] * 2}
    assert "2 models listed" in check_catalog("CPU", 200, two, model_id="/m/x.gguf", ctx_size=2048).summary
    assert not check_catalog("CPU", 200, CATALOG, model_id="/m/other.gguf", ctx_size=2048).passed
    assert not check_catalog("CPU", 200, CATALOG, model_id="/m/x.gguf", ctx_size=4096).passed
    zero = {"data": [{"id": "/m/x.gguf", "meta": {"n_params": 0, "n_ctx": 2048}}]}
    assert not check_catalog("CPU", 200, zero, model_id="/m/x.gguf", ctx_size=2048).passed
    assert not check_catalog("CPU", 500, "oops", model_id="/m/x.gguf", ctx_size=2048).passed


def test_build_commit_matching():
    assert build_commit("b20261001-0c1e570") == "0c1e570"
    assert build_commit("b0-unknown") == "unknown"
    assert build_commit("nonsense") is None
    assert commit_matches("b20261001-0c1e570", PIN)
    assert commit_matches("b20261001-0c1e570", "0c1e570")
    assert not commit_matches("b20261001-0c1e571", PIN)
    assert not commit_matches("b1-0c1e", PIN)  # too short to identify anything
    assert not commit_matches("b0-unknown", PIN)


def test_check_props(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    props = {"build_info": "b20261001-0c1e570", "model_path": str(model), "total_slots": 1,
             "default_generation_settings": {"n_ctx": 2048}}
    assert check_props("CPU", 200, props, expect_commit=PIN, model_path=model, ctx_size=2048).passed
    wrong_commit = check_props("CPU", 200, props, expect_commit="deadbeefcafe", model_path=model, ctx_size=2048)
    assert not wrong_commit.passed and "does not name commit deadbeefcafe" in wrong_commit.summary
    assert not check_props("CPU", 200, props, expect_commit=PIN, model_path=tmp_path / "other.gguf",
                           ctx_size=2048).passed
    assert not check_props("CPU", 200, props, expect_commit=PIN, model_path=model, ctx_size=1024).passed
    assert not check_props("CPU", 200, {**props, "total_slots": 4}, expect_commit=PIN, model_path=model,
                           ctx_size=2048).passed


def test_check_devices():
    assert check_devices(("CPU",), ()).passed
    missing = check_devices(("HRX20", "Vulkan0"), ("Vulkan0",))
    assert not missing.passed and missing.evidence["missing"] == ["HRX20"] and "lacks HRX20" in missing.summary


def test_check_answer():
    p = PromptCheck(name="capital", prompt="Q", expect="Paris")
    assert check_answer("CPU", p, Completion(text=" Paris, France"), n_predict=12).passed
    bad = check_answer("CPU", p, Completion(text=" Berlin"), n_predict=12)
    assert not bad.passed and "lacks 'Paris'" in bad.summary and bad.evidence["answer"] == " Berlin"


def timed(text: str, n: int = 128, dps: float = 30.0) -> Completion:
    return Completion(text=text, prompt_tok_s=150.0, decode_tok_s=dps, predicted_n=n, prompt_n=12)


def test_judge_speed_sample():
    ok = judge_speed_sample(timed(" Paris\n\nQuestion: ..."), answer=" Paris\n\n", expect="Paris", tokens=128)
    assert ok.valid and ok.decode_tok_s == 30.0
    drift = judge_speed_sample(timed(" London\n\n"), answer=" Paris\n\n", expect="Paris", tokens=128)
    assert not drift.valid and "does not start with" in drift.why
    short = judge_speed_sample(timed(" Paris\n\n", n=5), answer=" Paris\n\n", expect="Paris", tokens=128)
    assert not short.valid and "generated 5 tokens" in short.why
    wrong_ref = judge_speed_sample(timed(" Berlin"), answer=" Berlin", expect="Paris", tokens=128)
    assert not wrong_ref.valid and "lacks 'Paris'" in wrong_ref.why


def sample(dps: float, ok: bool = True) -> Sample:
    return Sample(prompt_tok_s=100.0 + dps, decode_tok_s=dps, prompt_n=12, predicted_n=128, valid=ok,
                  why="" if ok else "bad", text="")


def test_summarize_speed_median_and_validity():
    s = summarize_speed(device="CPU", prompt="capital", tokens=128, warmup=None,
                        samples=(sample(31.0), sample(10.0), sample(29.0)), answer_passed=True, reference=None,
                        tolerance=0.25)
    assert s.valid and s.decode_tok_s == 29.0 and s.prompt_tok_s == 129.0 and s.on_par is None
    assert check_speed(s).passed and "decode 29.0 tok/s" in check_speed(s).summary
    one_bad = summarize_speed(device="CPU", prompt="capital", tokens=128, warmup=None,
                              samples=(sample(31.0), sample(10.0, ok=False)), answer_passed=True, reference=None,
                              tolerance=0.25)
    assert not one_bad.valid and one_bad.decode_tok_s is None and "1 of 2" in one_bad.reason
    assert not check_speed(one_bad).passed
    wrong_answer = summarize_speed(device="CPU", prompt="capital", tokens=128, warmup=None,
                                   samples=(sample(31.0),), answer_passed=False, reference=None, tolerance=0.25)
    assert not wrong_answer.valid and wrong_answer.decode_tok_s is None and "answer check" in wrong_answer.reason


def test_reference_speed_with_tolerance():
    assert on_par(75.0, 100.0, 0.25) and on_par(150.0, 100.0, 0.25)
    assert not on_par(74.9, 100.0, 0.25)
    slow = summarize_speed(device="HRX20", prompt="capital", tokens=128, warmup=None,
                           samples=(sample(20.0),), answer_passed=True, reference=34.0, tolerance=0.25)
    assert slow.valid and slow.on_par is False
    c = check_speed(slow)
    assert not c.passed and "below the reference 34" in c.summary
    par = summarize_speed(device="HRX20", prompt="capital", tokens=128, warmup=None,
                          samples=(sample(33.0),), answer_passed=True, reference=34.0, tolerance=0.25)
    assert check_speed(par).passed and "on par with the reference 34" in check_speed(par).summary


# --------------------------------------------------------------------------- the real server and model


@pytest.fixture(scope="module")
def default_run(llama_server, gemma_model, tmp_path_factory):
    """One smoke run of the default recipe on the CPU, shared by the tests that read it."""
    recipe = default_recipe()
    model = ModelFile(path=Path(gemma_model).resolve(), sha256=recipe.model.sha256, source="local")
    run_dir = tmp_path_factory.mktemp("smoke-default")
    t0 = time.monotonic()
    result = run_smoke(recipe=recipe, server_bin=Path(llama_server), model=model, run_dir=run_dir, expect_commit=PIN,
                       threads=THREADS)
    wall = time.monotonic() - t0
    print(f"\nsmoke stage: {wall:.1f} s")
    for c in result.all_checks:
        print(f"  {c.device or '-':<4} {'pass' if c.passed else 'FAIL'} {c.summary}")
    return recipe, result, run_dir, wall


def test_default_recipe_passes_on_cpu(default_run):
    recipe, result, run_dir, wall = default_run
    failed = [c.summary for c in result.all_checks if not c.passed]
    assert result.passed, failed
    assert wall < SMOKE_BUDGET_S, f"smoke stage took {wall:.1f} s"
    cpu = result.device("CPU")
    names = [c.name for c in cpu.checks]
    assert names == ["start", "offload", "health", "catalog", "props", "answer:capital", "answer:landmark",
                     "answer:counting", "stream", "speed"]
    stream = next(c for c in cpu.checks if c.name == "stream")
    assert stream.evidence["chunks"] > 3 and stream.evidence["streamed_text"] == stream.evidence["whole_text"]
    # The time to the first token stands beside the decode speed.
    assert cpu.speed is not None and cpu.speed.first_token_s == stream.evidence["first_token_s"] > 0
    assert "first token" in next(c for c in cpu.checks if c.name == "speed").summary
    capital = next(c for c in cpu.checks if c.name == "answer:capital")
    assert "Paris" in capital.evidence["answer"]
    assert len(recipe.smoke.prompts) >= 3
    start = next(c for c in cpu.checks if c.name == "start")
    assert start.evidence["argv"][-2:] == ["-t", str(THREADS)]
    # The server lists the model by the recipe's name, and the catalog check compared that name.
    assert start.evidence["argv"][-4:-2] == ["--alias", recipe.model.name]
    catalog = next(c for c in cpu.checks if c.name == "catalog")
    assert catalog.evidence["ids"] == [recipe.model.name] == [catalog.evidence["expected_id"]]
    props = next(c for c in cpu.checks if c.name == "props")
    assert props.evidence["build_info"].endswith("-0c1e570")
    assert Path(props.evidence["model_path"]).resolve() == Path(result.model.path).resolve()
    speed = cpu.speed
    assert speed is not None and speed.valid
    assert speed.decode_tok_s and speed.decode_tok_s > 1.0 and speed.prompt_tok_s and speed.prompt_tok_s > 1.0
    assert len(speed.samples) == recipe.smoke.speed_repeats and speed.warmup is not None
    assert all(s.valid and s.predicted_n == recipe.smoke.speed_tokens for s in speed.samples)
    assert all(s.text.startswith(" Paris") for s in speed.samples)
    # The server is gone, its log kept in the run folder.
    assert all(pid_gone(pid) for pid in server_pids(result))
    assert cpu.stopped_by == "SIGTERM"  # an idle server shuts down on the first SIGTERM
    log = run_dir / "logs" / "server-CPU.log"
    assert cpu.log == log and log.stat().st_size > 0
    assert (run_dir / "logs" / "list-devices.log").is_file()


def test_default_run_report(default_run):
    recipe, result, run_dir, _ = default_run
    json_path, md_path = write_report(run_dir, recipe=recipe, smoke=result, manifest={"recipe": "default"})
    doc = read_state(json_path, REPORT_KIND, REPORT_SCHEMA)
    assert doc["passed"] is True and doc["checks_passed"] == doc["checks_total"] == len(result.all_checks)
    assert doc["devices"][0]["speed"]["decode_tok_s"] == result.device("CPU").speed.decode_tok_s
    md = md_path.read_text()
    assert "PASS" in md.splitlines()[0] and "[log](logs/server-CPU.log)" in md and "❌" not in md
    assert "| decode tok/s | first token s |" in md
    assert doc["devices"][0]["speed"]["first_token_s"] == result.device("CPU").speed.first_token_s
    assert (run_dir / json.loads(json_path.read_text())["devices"][0]["log"]).is_file()


def test_wrong_answer_and_wrong_commit_fail_and_invalidate_the_speed(llama_server, gemma_model, tmp_path):
    base = default_recipe()
    smoke = replace(
        base.smoke,
        prompts=(
            PromptCheck(name="capital", prompt=base.smoke.prompts[0].prompt, expect="Berlin"),
            base.smoke.prompts[1],
        ),
        answer_tokens=8, speed_tokens=16, speed_repeats=1,
    )
    recipe = replace(base, smoke=smoke)
    model = ModelFile(path=Path(gemma_model).resolve(), sha256=base.model.sha256, source="local")
    result = run_smoke(recipe=recipe, server_bin=Path(llama_server), model=model, run_dir=tmp_path,
                       expect_commit="deadbeefcafe", threads=THREADS)
    assert not result.passed
    verdicts = {c.name: c.passed for c in result.device("CPU").checks}
    assert verdicts == {
        "start": True, "offload": True, "health": True, "catalog": True, "props": False, "stream": True,
        "answer:capital": False, "answer:landmark": True, "speed": False,
    }
    capital = next(c for c in result.device("CPU").checks if c.name == "answer:capital")
    assert "Paris" in capital.evidence["answer"] and "lacks 'Berlin'" in capital.summary
    speed = result.device("CPU").speed
    assert speed is not None and not speed.valid
    assert speed.decode_tok_s is None and speed.prompt_tok_s is None
    assert "answer check of prompt 'capital' failed" in speed.reason
    assert speed.samples and not any(s.valid for s in speed.samples)
    assert all(pid_gone(pid) for pid in server_pids(result))


def test_missing_device_fails_the_run_without_starting_it(llama_server, gemma_model, tmp_path):
    recipe = default_recipe()
    model = ModelFile(path=Path(gemma_model).resolve(), sha256=recipe.model.sha256, source="local")
    result = run_smoke(recipe=recipe, server_bin=Path(llama_server), model=model, run_dir=tmp_path,
                       expect_commit=PIN, devices=("HRX20", "Vulkan0"))
    assert not result.passed
    (devices,) = result.checks
    assert not devices.passed and devices.evidence["missing"] == ["HRX20", "Vulkan0"]
    for name in ("HRX20", "Vulkan0"):
        d = result.device(name)
        assert [c.name for c in d.checks] == ["start"] and not d.passed and d.log is None
    assert not list((tmp_path / "logs").glob("server-*.log"))


def test_truncated_model_is_reported_with_the_server_log_tail(llama_server, gemma_model, tmp_path):
    truncated = tmp_path / "truncated.gguf"
    with open(gemma_model, "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read(8 << 20))
    recipe = default_recipe()
    model = ModelFile(path=truncated, sha256="0" * 64, source="local")
    result = run_smoke(recipe=recipe, server_bin=Path(llama_server), model=model, run_dir=tmp_path / "run",
                       expect_commit=PIN)
    assert not result.passed
    (start,) = result.device("CPU").checks
    assert start.name == "start" and not start.passed
    assert "exited with code" in start.summary
    assert "truncated.gguf" in start.evidence["log_tail"]
    assert result.device("CPU").speed is None


def test_misuse_raises(tmp_path):
    recipe = default_recipe()
    model = ModelFile(path=Path("m.gguf"), sha256="0" * 64, source="local")
    with pytest.raises(ValueError, match="no devices"):
        run_smoke(recipe=recipe, server_bin=Path("x"), model=model, run_dir=Path("."), expect_commit=PIN, devices=())
    with pytest.raises(ValueError, match="expect_commit"):
        run_smoke(recipe=recipe, server_bin=Path("x"), model=model, run_dir=Path("."), expect_commit=" ")
    with pytest.raises(SmokeError, match="llama-server not found"):
        run_smoke(recipe=recipe, server_bin=tmp_path / "llama-server", model=model, run_dir=tmp_path, expect_commit=PIN)


def _serving_child(ppid: int) -> tuple[int, int] | None:
    """(pid, port) of a llama-server child of ``ppid`` that serves (has --port); the short
    ``--list-devices`` run before it does not count."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        comm = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == ppid and comm.startswith("llama-server") and b"--port" in argv:
            return int(entry.name), int(argv[argv.index(b"--port") + 1])
    return None


def test_ctrl_c_during_smoke_leaves_no_server(llama_server, gemma_model, tmp_path):
    script = textwrap.dedent(f"""
        from pathlib import Path
        from onebit_build.spec.recipe import load_recipe
        from onebit_build.spec.pins import load_pins
        from onebit_build.running.model import ModelFile
        from onebit_build.running.smoke import run_smoke
        recipe = load_recipe(Path("recipes/default.yaml"), load_pins(Path("pins.yaml")))
        model = ModelFile(path=Path({str(gemma_model)!r}), sha256=recipe.model.sha256, source="local")
        run_smoke(recipe=recipe, server_bin=Path({str(llama_server)!r}), model=model,
                  run_dir=Path({str(tmp_path)!r}), expect_commit={PIN!r}, threads={THREADS})
        print("smoke finished", flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=sigint_default)
    server_pid = None
    try:
        deadline = time.monotonic() + 90
        # Wait until the server is up and answering, i.e. the smoke checks are under way.
        healthy = False
        while not healthy and time.monotonic() < deadline and child.poll() is None:
            found = _serving_child(child.pid)
            if found:
                server_pid, port = found
                try:
                    healthy = requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
                except requests.RequestException:
                    pass
            time.sleep(0.1)
        assert healthy and child.poll() is None, "the smoke run never had a healthy server"
        assert server_pid is not None and not pid_gone(server_pid, timeout=0)
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
        assert time.monotonic() - t0 < 10, "Ctrl-C took too long to take effect"
        assert child.returncode != 0 and "KeyboardInterrupt" in err
        assert pid_gone(server_pid), f"llama-server {server_pid} survived Ctrl-C"
        # It was stopped by the interrupted run through SIGTERM (the server shuts down, or on
        # the second SIGTERM exits at once), not merely killed along with its parent.
        log = (tmp_path / "logs" / "server-CPU.log").read_text()
        assert "cleaning up before exit" in log or "Received second interrupt" in log
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if server_pid and not pid_gone(server_pid, timeout=0):
            os.kill(server_pid, signal.SIGKILL)
