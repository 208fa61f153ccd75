"""The bench stage: pure decisions (parsing, order, judging, statistics, table, plot, lock)
first, then the real llama-server with the real model: two thread configs compared, a config
made to answer wrongly marked invalid, given expectations, a held lock, a missing device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from onebit_build.running import bench
from onebit_build.running.bench import (
    BenchLock,
    BenchRequest,
    BenchResult,
    Build,
    Config,
    Expectation,
    Prompt,
    Step,
    Variant,
    BenchVerdict,
    completion_body,
    judge_answer,
    make_variants,
    parse_build,
    parse_config,
    parse_configs,
    pick_devices,
    render_table,
    steps_from_probs,
    summarize,
)
from onebit_build.core.errors import BoxLockError, ConfigError
from onebit_build.running.measure import Completion, Sample, answer_starts_with
from onebit_build.running.model import ModelFile
from onebit_build.running.server import AnswerError, completion_from_reply

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- helpers


def variant(name: str, device: str = "CPU") -> Variant:
    return Variant(name=name, config=name, build="b", device=device, server=Path("llama-server"), args=())


def sample(v: str, p: str, rnd: int, dps: float, pps: float = 100.0, valid: bool = True, why: str = "") -> Sample:
    return Sample(round=rnd, variant=v, prompt=p, prompt_tok_s=pps, decode_tok_s=dps, prompt_n=10, predicted_n=16,
                  text="x", valid=valid, why=why)


def answer(content: str, *, n: int = 16, pps: float = 150.0, dps: float = 30.0,
           tokens: list[int] | None = None) -> Completion:
    data = {"content": content, "timings": {"predicted_n": n, "prompt_per_second": pps, "predicted_per_second": dps}}
    if tokens is not None:
        data["tokens"] = tokens
    return Completion.from_json(data)


def synthetic_result(tmp_path: Path) -> BenchResult:
    vs = (variant("t1"), variant("t2"), variant("bad"))
    prompts = ("code", "prose", "short")
    samples = []
    for p in prompts:
        for r in (1, 2, 3):
            samples.append(sample("t1", p, r, 20.0 + r, 150.0 + r))
            samples.append(sample("t2", p, r, 30.0 + r, 200.0 + r))
            samples.append(sample("bad", p, r, 90.0, 900.0, valid=False, why="diverged at character 3"))
    req = BenchRequest(
        variants=vs, model=ModelFile(path=tmp_path / "m.gguf", sha256="0" * 64, source="local"),
        prompts=tuple(Prompt(name=p, text=p) for p in prompts), run_dir=tmp_path, rounds=3, decode_tokens=16,
    )
    cells = summarize(vs, prompts, tuple(samples), 3)
    return BenchResult(request=req, expectations={}, samples=tuple(samples), servers=(), cells=cells, started_at="now",
                       seconds=1.0)


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


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_WORKSPACE",)}
    env["ONEBIT_ROOT"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "onebit_build", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


HOLDER = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    from onebit_build.running.bench import BenchLock
    with BenchLock(Path(sys.argv[1]), "holder-test-bench"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process that holds the bench lock for ``seconds``; returns once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


# --------------------------------------------------------------------------- parsing


def test_parse_config_splits_like_a_shell():
    c = parse_config("t1=-t 1 --override-kv 'a=str:b c'")
    assert c == Config(name="t1", args=("-t", "1", "--override-kv", "a=str:b c"))
    assert parse_config("plain=").args == ()


@pytest.mark.parametrize("text", ["noequals", "=-t 1", "bad name=-t 1", "x=-t '1"])
def test_parse_config_rejects_malformed(text):
    with pytest.raises(ConfigError):
        parse_config(text)


@pytest.mark.parametrize("flag", ["--port 8080", "-m other.gguf", "--model=x.gguf", "--device CUDA0", "-np 4",
                                  "--host 0.0.0.0"])
def test_parse_config_rejects_arguments_the_bench_sets(flag):
    with pytest.raises(ConfigError, match="set by the bench"):
        parse_config(f"c={flag}")


def test_parse_configs_default_and_duplicates():
    assert parse_configs([]) == (Config(name="default"),)
    with pytest.raises(ConfigError, match="used twice"):
        parse_configs(["a=-t 1", "a=-t 2"])


def test_parse_build_folder_binary_and_name(tmp_path):
    binary = tmp_path / "build-x" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert parse_build(str(tmp_path / "build-x")) == Build(name="build-x", server=binary.resolve())
    assert parse_build(f"patched={binary}") == Build(name="patched", server=binary.resolve())
    with pytest.raises(ConfigError, match="not found"):
        parse_build(str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match="no llama-server"):
        parse_build(str(tmp_path))


def test_shipped_prompts_are_three_fixed_texts():
    prompts = bench.load_prompts(REPO / "smoke" / "prompts")
    assert [p.name for p in prompts] == ["code", "prose", "short"]
    for p in prompts:
        assert p.text.strip() and not p.text.endswith("\n")
    assert len(prompts[1].text) > len(prompts[2].text)


def test_load_prompts_names_a_missing_file(tmp_path):
    (tmp_path / "code.txt").write_text("def f():\n")
    with pytest.raises(ConfigError, match="prose.txt"):
        bench.load_prompts(tmp_path)


def test_load_expectations_from_yaml_and_from_bench_json(tmp_path):
    y = tmp_path / "expect.yaml"
    y.write_text("short: ' 6, 7, 8'\ncode: \"\\n    return\"\n")
    got = {e.prompt: e for e in bench.load_expectations(y, ("code", "prose", "short"))}
    assert got["short"].text == " 6, 7, 8" and got["code"].text == "\n    return"
    assert got["short"].source == "given (expect.yaml)" and got["short"].tokens is None
    earlier = tmp_path / "bench.json"
    steps = [{"id": 1, "text": " he", "runner_up": 9, "runner_up_text": " the", "margin": 0.04},
             {"id": 2, "text": " was", "runner_up": None, "runner_up_text": "", "margin": None}]
    prose = {"text": " he was", "tokens": 2, "source": "baseline CPU round 1", "steps": steps}
    earlier.write_text(json.dumps({"kind": "onebit-bench", "schema": 1, "expectations": {"prose": prose}}))
    (prose,) = bench.load_expectations(earlier, ("code", "prose", "short"))
    assert prose.prompt == "prose" and prose.text == " he was" and prose.tokens == 2
    assert prose.steps[0] == Step(id=1, text=" he", runner_up=9, runner_up_text=" the", margin=0.04)
    assert prose.source == "given (bench.json: baseline CPU round 1)"
    bad = tmp_path / "bad.yaml"
    bad.write_text("poem: roses\n")
    with pytest.raises(ConfigError, match="unknown prompt 'poem'"):
        bench.load_expectations(bad, ("code", "prose", "short"))


# --------------------------------------------------------------------------- plan


def test_variants_name_only_what_varies_and_the_first_is_the_baseline():
    a, b = Build(name="upstream", server=Path("a")), Build(name="patched", server=Path("b"))
    t1, t2 = Config(name="t1", args=("-t", "1")), Config(name="t2", args=("-t", "2"))
    only_configs = make_variants((t1, t2), (a,), {"upstream": ("CPU",)})
    assert [v.name for v in only_configs] == ["t1", "t2"] and only_configs[0].args == ("-t", "1")
    devices = make_variants((Config(name="default"),), (a,), {"upstream": ("CPU", "CUDA0", "Vulkan0")})
    assert [v.name for v in devices] == ["CPU", "CUDA0", "Vulkan0"]
    assert [v.device for v in devices] == ["CPU", "CUDA0", "Vulkan0"]
    builds = make_variants((t1, t2), (a, b), {"upstream": ("CPU",), "patched": ("CPU",)})
    assert [v.name for v in builds] == ["upstream/t1", "upstream/t2", "patched/t1", "patched/t2"]
    assert builds[2].server == Path("b")


def test_pick_devices_all_means_cpu_and_every_listed_device():
    assert pick_devices((), ("CUDA0",)) == ("CPU",)
    assert pick_devices(("all",), ("CUDA0", "Vulkan0")) == ("CPU", "CUDA0", "Vulkan0")
    assert pick_devices(("CUDA0", "all"), ("CUDA0", "Vulkan0")) == ("CUDA0", "CPU", "Vulkan0")


def test_requests_are_greedy_without_prompt_cache():
    body = completion_body("hi", 32)
    assert body["cache_prompt"] is False and body["temperature"] == 0.0 and body["top_k"] == 1
    assert body["n_predict"] == 32 and body["ignore_eos"] is True and body["return_tokens"] is True


# --------------------------------------------------------------------------- judging


def test_answer_holds_on_the_prefix_only():
    assert answer_starts_with(" 6, 7, 8, 9, 10, 11", " 6, 7, 8")
    assert not answer_starts_with(" 6, 7, 9, 9", " 6, 7, 8")
    assert answer_starts_with(" 6, 7", " 6, 7, 8")  # fewer tokens generated than the prefix covers
    assert not answer_starts_with("", " 6")
    assert not answer_starts_with(" 6", "")


def test_judge_verdicts():
    exp = Expectation(prompt="short", text=" 6, 7, 8", tokens=6, source="baseline")
    assert judge_answer(answer(" 6, 7, 8, 9"), expected=exp, tokens=16) == BenchVerdict(valid=True)
    v = judge_answer(answer(" 6, 7, 9, 9"), expected=exp, tokens=16)
    assert not v.valid and "diverged at character 7" in v.why and "'9, 9'" in v.why
    assert "not 16" in judge_answer(answer(" 6, 7, 8", n=3), expected=exp, tokens=16).why
    assert "timings" in judge_answer(answer(" 6, 7, 8", dps=0.0), expected=exp, tokens=16).why
    with pytest.raises(AnswerError, match="HTTP 500"):
        completion_from_reply(500, {"error": "x"})
    assert "no reference answer" in judge_answer(answer(" 6"), expected=None, tokens=16).why


# The baseline said " he was" then " standing" over " in" by a margin of 0.05 (a near tie),
# then " on" over " at" by 2.0.
TIE = Expectation(prompt="prose", text=" he was standing on", tokens=4, source="baseline", steps=(
    Step(id=1, text=" he", runner_up=9, runner_up_text=" the", margin=3.0),
    Step(id=2, text=" was", runner_up=8, runner_up_text=" had", margin=1.0),
    Step(id=3, text=" standing", runner_up=7, runner_up_text=" in", margin=0.05),
    Step(id=4, text=" on", runner_up=6, runner_up_text=" at", margin=2.0),
))


def test_a_near_tie_taken_the_other_way_is_excused():
    v = judge_answer(answer(" he was in the house", tokens=[1, 2, 7, 5]), expected=TIE, tokens=16, tie_margin=0.1)
    assert v.valid and "near tie at token 2" in v.note and "' in'" in v.note and "0.050" in v.note


def test_divergence_where_the_baseline_was_sure_is_not_excused():
    v = judge_answer(answer(" he was standing at", tokens=[1, 2, 3, 6]), expected=TIE, tokens=16, tie_margin=0.1)
    assert not v.valid and "token 3" in v.why and "margin there 2.000" in v.why
    # A tie, but the margin is not below the threshold given.
    v = judge_answer(answer(" he was in the house", tokens=[1, 2, 7, 5]), expected=TIE, tokens=16, tie_margin=0.05)
    assert not v.valid and "excused below 0.05" in v.why
    # A tie, but the variant took neither of the two likeliest tokens.
    v = judge_answer(answer(" he was sitting", tokens=[1, 2, 11, 5]), expected=TIE, tokens=16, tie_margin=0.1)
    assert not v.valid and "not even the baseline's runner-up" in v.why
    # Without token ids nothing can be excused.
    assert not judge_answer(answer(" he was in the house"), expected=TIE, tokens=16, tie_margin=0.1).valid


def test_steps_from_probs_keeps_margins_only_while_the_tokens_agree():
    def entry(tid: int, text: str, lp: float, rid: int, rtext: str, rlp: float) -> dict:
        return {"id": tid, "token": text, "logprob": lp,
                "top_logprobs": [{"id": tid, "token": text, "logprob": lp},
                                 {"id": rid, "token": rtext, "logprob": rlp}]}

    probs = [entry(1, " he", -0.5, 9, " the", -1.5), entry(2, " was", -1.7, 8, " had", -1.75),
             entry(30, " is", -1.0, 2, " was", -1.1), entry(4, " on", -0.1, 6, " at", -3.0)]
    steps = steps_from_probs(probs, [1, 2, 3, 4])
    assert [s.id for s in steps] == [1, 2, 3, 4]
    assert steps[0].margin == pytest.approx(1.0) and steps[0].runner_up == 9 and steps[0].runner_up_text == " the"
    assert steps[1].margin == pytest.approx(0.05)
    assert steps[2].margin is None and steps[3].margin is None  # that request chose another token at 2
    assert [s.margin for s in steps_from_probs(None, [1, 2])] == [None, None]


# --------------------------------------------------------------------------- statistics and table


def test_summarize_best_median_and_change_vs_baseline():
    vs = (variant("a"), variant("b"))
    samples = (
        sample("a", "p", 1, 10.0, 100.0), sample("a", "p", 2, 12.0, 110.0), sample("a", "p", 3, 11.0, 90.0),
        sample("b", "p", 1, 16.0, 100.0), sample("b", "p", 2, 17.0, 120.0), sample("b", "p", 3, 15.0, 80.0),
    )
    a, b = summarize(vs, ("p",), samples, 3)
    assert a.valid and a.decode.best == 12.0 and a.decode.median == 11.0 and a.decode.low == 10.0 and a.decode.n == 3
    assert a.decode_vs_base_pct == 0.0
    assert b.decode.median == 16.0 and b.decode_vs_base_pct == pytest.approx(100 * (16 / 11 - 1))
    assert b.prompt_speed.median == 100.0 and b.prompt_vs_base_pct == pytest.approx(0.0)


def test_one_wrong_round_makes_the_cell_invalid_and_keeps_its_speed_out():
    vs = (variant("a"), variant("b"))
    samples = (
        sample("a", "p", 1, 10.0), sample("a", "p", 2, 10.0),
        sample("b", "p", 1, 50.0), sample("b", "p", 2, 99.0, valid=False, why="diverged at character 4"),
    )
    a, b = summarize(vs, ("p",), samples, 2)
    assert a.valid and not b.valid
    assert b.decode is None and b.decode_vs_base_pct is None
    assert b.reason == "round 2: diverged at character 4"


def test_missing_round_and_invalid_baseline():
    vs = (variant("a"), variant("b"))
    samples = (sample("a", "p", 1, 10.0, valid=False, why="x"), sample("a", "p", 2, 10.0), sample("b", "p", 1, 5.0))
    a, b = summarize(vs, ("p",), samples, 2)
    assert not a.valid and not b.valid and b.reason == "no answer in round 2"
    samples = samples + (sample("b", "p", 2, 6.0),)
    a, b = summarize(vs, ("p",), samples, 2)
    assert b.valid and b.decode_vs_base_pct is None  # nothing valid to compare with


def test_table_marks_invalid_rows_without_figures(tmp_path):
    result = synthetic_result(tmp_path)
    table = render_table(result)
    lines = table.splitlines()
    assert lines[0].startswith("| prompt | variant | decode tok/s best / median | decode vs base")
    t1_code = next(ln for ln in lines if ln.startswith("| code | t1 |"))
    t2_code = next(ln for ln in lines if ln.startswith("| code | t2 |"))
    bad_code = next(ln for ln in lines if ln.startswith("| code | bad |"))
    assert "23.0 / 22.0" in t1_code and "baseline" in t1_code
    assert "33.0 / 32.0" in t2_code and f"{100 * (32 / 22 - 1):+.1f}%" in t2_code
    assert "INVALID" in bad_code and "90" not in bad_code and "diverged" in bad_code
    md = bench.render_markdown(result, plot_name="bench.png")
    assert "![decode and prompt speed](bench.png)" in md and "| bad | b | CPU |" in md


def test_plot_is_a_small_png(tmp_path):
    path = bench.plot(synthetic_result(tmp_path), tmp_path / "p.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert 10_000 < len(data) < 250_000


# --------------------------------------------------------------------------- the lock


def test_lock_held_elsewhere_fails_at_once_naming_the_holder(tmp_path):
    lock = tmp_path / "bench.lock"
    holder = hold_lock(lock, 30)
    try:
        t0 = time.monotonic()
        with pytest.raises(BoxLockError) as err:
            with BenchLock(lock, "second"):
                pass
        assert time.monotonic() - t0 < 2
        assert f"pid {holder.pid}" in str(err.value) and "holder-test-bench" in str(err.value)
        assert err.value.exit_code == 15
    finally:
        holder.kill()
        holder.wait()


def test_lock_waits_for_the_holder_then_times_out_or_takes_it(tmp_path):
    lock = tmp_path / "bench.lock"
    holder = hold_lock(lock, 30)
    told: list[str] = []
    try:
        t0 = time.monotonic()
        with pytest.raises(BoxLockError, match="still held by pid"):
            with BenchLock(lock, "second", wait_s=1.0, poll_s=0.1, on_wait=told.append):
                pass
        assert 1.0 <= time.monotonic() - t0 < 4
        assert told and f"pid {holder.pid}" in told[0]
    finally:
        holder.kill()
        holder.wait()
    holder = hold_lock(lock, 1.5)
    try:
        t0 = time.monotonic()
        with BenchLock(lock, "second", wait_s=20, poll_s=0.1, on_wait=lambda _: None):
            assert time.monotonic() - t0 > 1.0  # it got the lock only once the holder let go
            doc = json.loads(lock.read_text())
            assert doc["pid"] == os.getpid() and doc["command"] == "second"
    finally:
        holder.wait()
    assert lock.read_text() == ""  # released and the holder cleared


# --------------------------------------------------------------------------- real server


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
    done = run_cli(
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
        done = run_cli("bench", "--server", str(llama_server), "--model", str(gemma_model), "--lock", str(lock),
                       "--out", str(tmp_path / "run"), timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 15, done.stderr
    assert f"pid {holder.pid}" in done.stderr and "holder-test-bench" in done.stderr and "--wait" in done.stderr
    assert not (tmp_path / "run" / "bench.json").exists()


@pytest.mark.slow
def test_cli_device_the_build_lacks_is_refused(llama_server, gemma_model, tmp_path):
    done = run_cli("bench", "--server", str(llama_server), "--model", str(gemma_model), "--device", "CPU", "--device",
                   "CUDA0", "--lock", str(tmp_path / "bench.lock"), "--out", str(tmp_path / "run"), timeout=120)
    assert done.returncode == 2, done.stderr
    assert "does not offer CUDA0" in done.stderr and "--device all" in done.stderr


def test_without_matplotlib_the_bench_writes_its_table_and_json_and_says_how_to_get_the_plot(tmp_path, monkeypatch):
    # matplotlib is the optional 'plot' extra: hide it (and anything of it already imported).
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    out = bench.write_outputs(synthetic_result(tmp_path), tmp_path / "run")
    assert out.plot is None and not (tmp_path / "run" / "bench.png").exists()
    assert "bench.png" not in out.table.read_text()
    assert json.loads(out.json.read_text())["outputs"]["plot"] is None
    assert "onebit-build[plot]" in bench.PLOT_EXTRA_HINT


def test_matplotlib_is_only_the_plot_extra():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("matplotlib")]
    assert any(d.startswith("matplotlib") for d in project["optional-dependencies"]["plot"])
