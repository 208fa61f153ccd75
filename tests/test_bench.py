"""The bench stage's decisions: parsing, order, judging, statistics, table, plot and the lock
(the bench on the real llama-server: test_bench_real.py)."""

from __future__ import annotations

import json
import os
import sys
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

from _support import REPO, hold_lock


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
