"""The numerical check's pure parts: the schedule, the figures, the budgets, the reference
file and the recipe section (no server here; tests/test_numerics_e2e.py runs the real one)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from onebit_build.core.errors import ConfigError
from onebit_build.running import numerics as nm
from onebit_build.running import numerics_ref as ref
from onebit_build.running.numerics_run import judged, levels_of
from onebit_build.spec.numerics_spec import NumericsSpec


def dist(pos: int, target: int, probs: dict[int, float], batch: int = 1) -> nm.Scored:
    top = tuple(sorted(((t, math.log(p)) for t, p in probs.items()), key=lambda x: -x[1]))
    return nm.Scored(pos=pos, target=target, logprob=math.log(probs.get(target, 1e-6)), top=top, batch=batch)


def test_schedule_jumps_then_steps_and_reads_the_tokens_it_says():
    plan = nm.schedule(rounds=2, jump=5, steps=3)
    assert [(r.length, r.batch) for r in plan] == [(5, 5), (6, 1), (7, 1), (8, 1), (13, 5), (14, 1), (15, 1), (16, 1)]
    assert nm.tokens_needed(rounds=2, jump=5, steps=3) == plan[-1].length + 1


def test_identical_runs_have_no_divergence_and_full_agreement():
    base = [dist(i, 1, {1: 0.6, 2: 0.3, 3: 0.05}) for i in range(10)]
    fig = nm.compare(base, base)
    assert fig.kld_mean == 0 and fig.kld_max == 0 and fig.top1 == 1 and fig.ppl_ratio == 1
    assert nm.misses(fig, nm.NumericsBudget(kld_mean=0, kld_p99=0, ppl_ratio=0, top1=1)) == ()


def test_kl_divergence_equals_the_exact_value_when_the_lists_cover_everything():
    p, q = {1: 0.5, 2: 0.3, 3: 0.2}, {1: 0.4, 2: 0.4, 3: 0.2}
    exact = sum(p[t] * math.log(p[t] / q[t]) for t in p)
    assert nm.kl_divergence(dist(0, 1, p), dist(0, 1, q)) == pytest.approx(exact, rel=1e-9)


def test_kl_divergence_lumps_the_rest_and_never_exceeds_the_full_value():
    # The full distributions over 5 tokens; the lists hold the top 2 of each.
    p = {1: 0.5, 2: 0.2, 3: 0.15, 4: 0.1, 5: 0.05}
    q = {1: 0.3, 2: 0.1, 3: 0.4, 4: 0.1, 5: 0.1}
    full = sum(p[t] * math.log(p[t] / q[t]) for t in p)
    top2 = lambda d: dict(sorted(d.items(), key=lambda x: -x[1])[:2])  # noqa: E731
    got = nm.kl_divergence(dist(0, 1, top2(p)), dist(0, 1, top2(q)))
    assert 0 < got <= full + 1e-12


def test_a_shifted_distribution_misses_each_budget_it_breaks():
    base = [dist(i, 1, {1: 0.7, 2: 0.2}) for i in range(20)]
    worse = [dist(i, 1, {1: 0.45, 2: 0.5}) for i in range(20)]  # another top-1, lower target probability
    fig = nm.compare(base, worse)
    assert fig.top1 == 0 and fig.ppl_ratio > 1.5 and fig.kld_mean > 0.05
    budget = nm.NumericsBudget(kld_mean=0.01, kld_p99=0.1, ppl_ratio=0.02, top1=0.95)
    missed = {m.figure for m in nm.misses(fig, budget)}
    assert missed == {"top1", "ppl_ratio", "kld_mean", "kld_p99"}
    assert "top-1 agreement 0.0000 < budget 0.95" in str(nm.misses(fig, nm.NumericsBudget(
        kld_mean=1, kld_p99=1, ppl_ratio=1, top1=0.95))[0])


def test_runs_of_other_positions_or_tokens_are_not_compared():
    base = [dist(i, 1, {1: 0.7}) for i in range(3)]
    with pytest.raises(ValueError, match="another text, tokenizer or schedule"):
        nm.compare(base, [dist(i, 2, {1: 0.7}) for i in range(3)])
    with pytest.raises(ValueError):
        nm.compare(base, base[:2])


def test_percentile_interpolates():
    assert nm.percentile([0, 10], 50) == 5
    assert nm.percentile([3.0], 99) == 3.0
    assert nm.percentile(list(range(101)), 99) == pytest.approx(99)


def test_the_server_answer_is_read_and_a_wrong_one_named():
    reply = {"completion_probabilities": [{"id": 7, "logprob": -1.5, "top_logprobs": [
        {"id": 3, "logprob": -0.5}, {"id": 7, "logprob": -1.5}]}], "timings": {"prompt_n": 80}}
    s = nm.scored_from_reply(reply, nm.Request(length=80, batch=80), 7)
    assert (s.pos, s.target, s.logprob, s.top, s.batch) == (80, 7, -1.5, ((3, -0.5), (7, -1.5)), 80)
    with pytest.raises(ValueError, match="not the forced text token 8"):
        nm.scored_from_reply(reply, nm.Request(length=80, batch=80), 8)
    with pytest.raises(ValueError, match="no completion_probabilities"):
        nm.scored_from_reply({"content": "x"}, nm.Request(length=1, batch=1), 7)
    bad = json.loads(json.dumps(reply))
    bad["completion_probabilities"][0]["logprob"] = float("nan")
    with pytest.raises(ValueError, match="log-probability"):
        nm.scored_from_reply(bad, nm.Request(length=80, batch=80), 7)


def test_a_server_that_reevaluates_whole_prompts_is_named():
    plan = nm.schedule(rounds=1, jump=40, steps=2)
    # steps that go back a few tokens (a context checkpoint) are still short batches
    ok = [nm.Scored(pos=r.length, target=1, logprob=-1, top=((1, -1.0),), batch=r.batch if r.batch > 1 else 6)
          for r in plan]
    assert nm.batches_as_planned(ok, plan, 32) == ""
    whole = [nm.Scored(pos=r.length, target=1, logprob=-1, top=((1, -1.0),), batch=r.length) for r in plan]
    assert "the step to position 41 evaluated 41 tokens, not a short batch (1 to 32)" in \
        nm.batches_as_planned(whole, plan, 32)
    short = [nm.Scored(pos=r.length, target=1, logprob=-1, top=((1, -1.0),), batch=1) for r in plan]
    assert "the jump to position 40 evaluated 1 tokens, not at least 40" in nm.batches_as_planned(short, plan, 32)


def _workload(**kw) -> ref.NumericsWorkload:
    base = dict(model_sha256="a" * 64, text="t.txt", text_sha256="b" * 64, tokens_sha256="c" * 64, ctx_size=2048,
                ubatch=32, rounds=1, jump=40, steps=3, top_k=2, threads=1)
    return ref.NumericsWorkload(**{**base, **kw})


def test_reference_round_trip_and_workload_mismatch(tmp_path: Path):
    scored = tuple(dist(i, 1, {1: 0.6, 2: 0.3}, batch=1) for i in range(4))
    path = ref.write_reference(tmp_path / "numerics" / "x.json", workload=_workload(), scored=scored,
                               recorded={"device": "CPU"})
    back = ref.load_reference(path)
    assert back.workload == _workload()
    assert [s.to_json() for s in back.scored] == [s.to_json() for s in scored]
    assert back.workload.mismatch(_workload(threads=2)) == ""  # threads aside
    assert "ubatch 64" in back.workload.mismatch(_workload(ubatch=64))
    assert len(path.read_bytes()) < 4096


@pytest.mark.parametrize("doc, problem", [
    ("[]", "not a numerical reference"),
    ('{"kind": "onebit-build numerical reference", "schema": 1, "workload": {}}', "must name exactly"),
    ("{", "not JSON"),
])
def test_a_damaged_reference_is_one_message(tmp_path: Path, doc: str, problem: str):
    path = tmp_path / "r.json"
    path.write_text(doc)
    with pytest.raises(ValueError, match=problem):
        ref.load_reference(path)


def test_levels_are_all_half_none():
    assert levels_of(NumericsSpec(), 18) == [("all", "all"), ("half", "9"), ("none", "0")]
    assert levels_of(NumericsSpec(), None) == [("all", "all"), ("none", "0")]


def test_a_miss_names_device_level_figure_and_budget():
    base = tuple(dist(i, 1, {1: 0.7, 2: 0.2}) for i in range(5))
    from onebit_build.running.numerics_run import ScoreRun

    run = ScoreRun(device="Vulkan0", level="half", layers="9", seconds=1.0, log=Path("x.log"),
                   scored=tuple(dist(i, 1, {1: 0.5, 2: 0.45}) for i in range(5)))
    check, fig = judged("Vulkan0", "half", run, base, nm.NumericsBudget(kld_mean=0.01, kld_p99=1, ppl_ratio=1, top1=0),
                        "this box's CPU run")
    assert not check.passed and fig is not None
    assert check.summary.startswith("Vulkan0 at half offload (-ngl 9): kld mean")
    assert "> budget 0.01" in check.summary


def recipe_with(tmp_path: Path, numerics: str):
    from onebit_build.spec.recipe import load_recipe
    from onebit_build.spec.pins import load_pins

    root = Path(__file__).resolve().parent.parent
    text = (root / "recipes" / "default.yaml").read_text().split("\nnumerics:")[0]
    path = tmp_path / "default.yaml"
    path.write_text(text + "\n" + numerics)
    return load_recipe(path, load_pins(root / "pins.yaml"))


def test_the_default_recipe_scores_four_micro_batches_and_more():
    from onebit_build.spec.recipe import load_recipe
    from onebit_build.spec.pins import load_pins

    root = Path(__file__).resolve().parent.parent
    spec = load_recipe(root / "recipes" / "default.yaml", load_pins(root / "pins.yaml")).numerics
    assert spec is not None and spec.jump > spec.ubatch and spec.positions >= 4 * spec.ubatch
    assert (root / "smoke" / "eval" / spec.text).is_file()


@pytest.mark.parametrize("section, problem", [
    ("numerics:\n  ubatch: 64\n  jump: 64\n", "jump 64 is not longer than ubatch 64"),
    ("numerics:\n  ubatch: 32\n  rounds: 1\n  steps: 10\n", "fewer than 4 x ubatch"),
    ("numerics:\n  offload: [most]\n", "offload level 'most' is unknown"),
    ("numerics:\n  text: ../../etc/passwd\n", "is not a file name"),
    ("numerics:\n  budgets:\n    device: {kld_mean: 0.1}\n", "kld_p99"),
    ("numerics:\n  budgets:\n    device: {kld_mean: 0.1, kld_p99: 1, ppl_ratio: 0.1, top1: 2}\n", "top1"),
    ("numerics:\n  colour: red\n", "colour"),
])
def test_a_bad_numerics_section_names_the_key_and_the_fix(tmp_path: Path, section: str, problem: str):
    with pytest.raises(ConfigError, match="numerics") as exc:
        recipe_with(tmp_path, section)
    assert problem in str(exc.value)
