"""The bench on the real llama-server with the real model: two thread configs compared, a
config made to answer wrongly marked invalid, a near tie excused, given expectations, a round
serving both variants at once, a held lock and a missing device (the pure decisions:
test_bench.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from onebit_build.running import bench
from onebit_build.running.bench import BenchRequest, Expectation, Variant
from _support import REPO, hold_lock, run_cli


def gone(pid: int, timeout: float = 10.0) -> bool:
    """True once no process ``pid`` runs (absent, or a zombie not reaped yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


# Token ids (Gemma 3 tokenizer of the pinned model) of the first token the baseline
# generates for each prompt: "\n" (code), " he" (prose), " " (short). Forbidding them
# with --logit-bias makes every greedy answer differ from the first token on.
WRONG = "-t 1 -l 107-inf -l 668-inf -l 236743-inf"


@pytest.mark.slow
def test_real_cpu_bench_two_configs_and_a_wrong_one(llama_server, gemma_model, tmp_path):
    """Two valid configurations and a wrong one. The second differs by --poll 0 (its thread
    sleeps instead of polling while it waits for work): the same answers, another server
    command line. Not -t 2: with the other test worker busy, two threads on two shared cores
    decoded 8-12 tok/s against one thread's 60-70 (measured in this test), so its requests took
    most of the test's time and measured the machine's contention, not the bench."""
    out = tmp_path / "run"
    t0 = time.monotonic()
    done = run_cli(REPO,
        "bench", "--server", str(llama_server), "--model", str(gemma_model),
        "--config", "t1=-t 1", "--config", "poll0=-t 1 --poll 0", "--config", f"wrong={WRONG}",
        "--rounds", "2", "--decode-tokens", "16", "--out", str(out), "--lock", str(tmp_path / "bench.lock"),
    )
    print(f"bench took {time.monotonic() - t0:.0f} s\n{done.stdout}\n{done.stderr}")
    assert done.returncode == 10, done.stderr  # some figures are invalid
    doc = json.loads((out / "bench.json").read_text())
    assert doc["kind"] == "onebit-bench" and doc["schema"] == 1 and doc["all_valid"] is False
    assert [v["name"] for v in doc["variants"]] == ["t1", "poll0", "wrong"] and doc["variants"][0]["baseline"]
    assert doc["variants"][1]["args"] == ["-t", "1", "--poll", "0"]

    # A fresh server per variant per round, interleaved, every one stopped.
    order = [(s["round"], s["variant"]) for s in doc["servers"]]
    assert order == [(1, "t1"), (1, "poll0"), (1, "wrong"), (2, "t1"), (2, "poll0"), (2, "wrong")]
    assert len({s["pid"] for s in doc["servers"]}) == 6 and not any(s["error"] for s in doc["servers"])
    assert all(gone(s["pid"]) for s in doc["servers"])

    # Expectations: the first 16 tokens of the baseline's first round.
    assert doc["settings"]["tie_margin"] == 0.1
    for name in ("code", "prose", "short"):
        e = doc["expectations"][name]
        assert e["tokens"] == 16 and e["source"] == "baseline t1 round 1" and e["text"]
        # Every token's runner-up and margin, from the untimed n_probs request.
        assert len(e["steps"]) == 16 and all(st["margin"] is not None and st["margin"] >= 0 for st in e["steps"])
        assert "".join(st["text"] for st in e["steps"]).startswith(e["text"])
    assert doc["expectations"]["short"]["text"].startswith(" 6, 7, 8")

    samples = doc["samples"]
    assert len(samples) == 18 and all(s["predicted_n"] == 16 for s in samples)
    # Prompt cache off: the prose prompt (also the warm-up's) is processed in full each time.
    prose_n = {s["prompt_n"] for s in samples if s["prompt"] == "prose"}
    assert len(prose_n) == 1 and prose_n.pop() > 100

    results = {(r["variant"], r["prompt"]): r for r in doc["results"]}
    for prompt in ("code", "prose", "short"):
        base, other, wrong = results[("t1", prompt)], results[("poll0", prompt)], results[("wrong", prompt)]
        assert base["valid"] and other["valid"], (base, other)
        d_base = sorted(s["decode_tok_s"] for s in samples if s["variant"] == "t1" and s["prompt"] == prompt)
        assert base["decode_tok_s"]["median"] == pytest.approx(sum(d_base) / 2, rel=1e-3)
        assert base["decode_tok_s"]["best"] == pytest.approx(d_base[-1], rel=1e-3)
        expected_pct = 100 * (other["decode_tok_s"]["median"] / base["decode_tok_s"]["median"] - 1)
        assert other["decode_vs_baseline_pct"] == pytest.approx(expected_pct, abs=0.05)
        assert not wrong["valid"] and wrong["decode_tok_s"] is None and "diverged at character" in wrong["reason"]
        assert "(token 0," in wrong["reason"]  # where the baseline was sure: not a near tie

    table = (out / "bench.md").read_text()
    assert "| code | wrong | INVALID |" in table and "| code | t1 |" in table and "baseline" in table
    assert "| short | poll0 |" in done.stdout and "INVALID" in done.stdout
    assert "round 2/2" in done.stderr and "INVALID" in done.stderr
    png = (out / "bench.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) < 250_000


# For the code prompt the baseline's 5th token is " sorted", ahead of " values" by a
# log-probability margin of about 0.02 (a near tie): lowering its logit a little flips it.
NEAR_TIE = "-t 1 -l 19372-0.1"


@pytest.mark.slow
def test_real_near_tie_flip_is_excused_and_given_prefixes_gate_everyone(llama_server, gemma_model, tmp_path):
    """A variant that takes the baseline's runner-up at a near tie stays valid, with a note;
    a given prefix is checked on every variant, the baseline included; prompts without one
    take the baseline's first round."""
    from onebit_build.running.model import local_model

    out = tmp_path / "run"
    prompts = bench.load_prompts(REPO / "smoke" / "prompts")
    given = (
        Expectation(prompt="short", text=" 6, 7, 8", tokens=None, source="given"),
        Expectation(prompt="prose", text=" she said", tokens=None, source="given"),
    )
    base = Variant(name="t1", config="t1", build="cpu", device="CPU", server=Path(llama_server), args=("-t", "1"))
    tie = Variant(name="tie", config="tie", build="cpu", device="CPU", server=Path(llama_server),
                  args=tuple(NEAR_TIE.split()))
    req = BenchRequest(variants=(base, tie), model=local_model(Path(gemma_model)), prompts=prompts, run_dir=out,
                       rounds=1, decode_tokens=12, prefix_tokens=8, given=given)
    result = bench.run_bench(req, progress=lambda _: None)

    code = result.expectations["code"]
    assert code.source == "baseline t1 round 1" and code.tokens == 8 and len(code.steps) == 8
    assert code.steps[4].text == " sorted" and code.steps[4].margin < 0.1
    assert result.cell("t1", "code").valid and not result.cell("t1", "code").note
    tie_code = result.cell("tie", "code")
    assert tie_code.valid and "near tie at token 4" in tie_code.note and "' values'" in tie_code.note
    tie_sample = next(s for s in result.samples if s.variant == "tie" and s.prompt == "code")
    assert not tie_sample.text.startswith(code.text)  # it really answered differently

    for v in ("t1", "tie"):
        assert result.cell(v, "short").valid
        prose = result.cell(v, "prose")
        assert not prose.valid and "diverged at character 1" in prose.reason
    files = bench.write_outputs(result, out)
    assert "near tie at token 4" in files.table.read_text()
    doc = json.loads(files.json.read_text())
    assert doc["expectations"]["prose"]["source"] == "given" and doc["expectations"]["prose"]["steps"] == []


@pytest.mark.slow
def test_real_round_together_serves_both_variants_at_once(llama_server, gemma_model, tmp_path):
    """verify-run's rounds: both fresh servers of a round are up at once, every prompt is
    answered by both, the baseline records the expectations, and no server outlives the run."""
    from onebit_build.running.model import local_model

    prompts = bench.load_prompts(REPO / "smoke" / "prompts")
    a = Variant(name="a", config="a", build="cpu", device="CPU", server=Path(llama_server), args=("-t", "1"))
    b = Variant(name="b", config="b", build="cpu", device="CPU", server=Path(llama_server), args=("-t", "1"))
    req = BenchRequest(variants=(a, b), model=local_model(Path(gemma_model)), prompts=prompts, run_dir=tmp_path,
                       rounds=2, decode_tokens=8, prefix_tokens=4, together=True)
    started: list[tuple[int, str, int]] = []
    alive_at_start: list[bool] = []

    def on_start(server, v, rnd):
        # the other variant's server of this round, when already started, still runs
        alive_at_start.extend(os.path.exists(f"/proc/{pid}") for r, _, pid in started if r == rnd)
        started.append((rnd, v.name, server.pid))

    result = bench.run_bench(req, progress=lambda _: None, on_start=on_start)
    assert [(r, v) for r, v, _ in started] == [(1, "a"), (1, "b"), (2, "a"), (2, "b")]
    assert alive_at_start == [True, True]
    assert result.rounds_run == 2 and all(s.valid for s in result.samples), [s.why for s in result.samples]
    assert sorted((s.round, s.variant, s.prompt) for s in result.samples) == sorted(
        (r, v, p.name) for r in (1, 2) for v in ("a", "b") for p in prompts)
    assert {e.source for e in result.expectations.values()} == {"baseline a round 1"}
    assert not any(os.path.exists(f"/proc/{pid}") for _, _, pid in started)


@pytest.mark.slow
def test_cli_held_lock_fails_naming_the_holder(llama_server, gemma_model, tmp_path):
    lock = tmp_path / "bench.lock"
    holder = hold_lock(lock, 60)
    try:
        done = run_cli(REPO, "bench", "--server", str(llama_server), "--model", str(gemma_model), "--lock", str(lock),
                       "--out", str(tmp_path / "run"), timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 15, done.stderr
    assert f"pid {holder.pid}" in done.stderr and "holder-test-bench" in done.stderr and "--wait" in done.stderr
    assert not (tmp_path / "run" / "bench.json").exists()


@pytest.mark.slow
def test_cli_device_the_build_lacks_is_refused(llama_server, gemma_model, tmp_path):
    done = run_cli(REPO, "bench", "--server", str(llama_server), "--model", str(gemma_model), "--device", "CPU",
                   "--device", "CUDA0", "--lock", str(tmp_path / "bench.lock"), "--out", str(tmp_path / "run"),
                   timeout=120)
    assert done.returncode == 2, done.stderr
    assert "does not offer CUDA0" in done.stderr and "--device all" in done.stderr
