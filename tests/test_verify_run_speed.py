"""Verification runs, the speed part: the signed-rank interval, the sequential rounds against
a budget, the ratio's label, and which prompts judge the prompt speed (pure)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from onebit_build.running.measure import Sample
from onebit_build.spec.recipe import VerificationSpec
from onebit_build.verify_run import speed, speed_rounds, verdict

from _support import speed_measures

def test_signed_rank_coverage_matches_every_sign_pattern():
    """The coverage comes from the exact signed-rank distribution: checked against all 2**n
    sign patterns of n ranks."""
    for n in (1, 4, 5, 9):
        sums = [sum(r for r, sign in zip(range(1, n + 1), pattern) if sign)
                for pattern in itertools.product((0, 1), repeat=n)]
        for d in (1, 2, 3):
            below = sum(1 for w in sums if w <= d - 1) / 2 ** n
            assert speed.coverage(n, d) == pytest.approx(max(0.0, 1 - 2 * below))
    assert speed.coverage(5, 1) == pytest.approx(1 - 2 / 32)  # why 5 rounds are the fewest for 90 %
    assert speed.coverage(4, 1) < speed.CONFIDENCE


def test_the_minimum_of_rounds_is_the_fewest_whose_interval_has_the_coverage():
    n = speed.MIN_ROUNDS
    assert speed.coverage(n, 1) >= speed.CONFIDENCE > speed.coverage(n - 1, 1)
    assert VerificationSpec().rounds == n  # a recipe without verification.rounds starts there



def test_walsh_interval_takes_the_narrowest_with_the_coverage():
    est, lo, hi, cov = speed.walsh_interval([5, 1, 4, 2, 3])
    assert (est, lo, hi) == (3, 1, 5) and cov == pytest.approx(0.9375)  # 5 values: their whole range
    est, lo, hi, cov = speed.walsh_interval(list(range(1, 10)))  # 45 averages; d = 6 keeps 90.2 %
    assert (est, lo, hi) == (5, 3, 7) and cov == pytest.approx(0.902, abs=1e-3)
    est, lo, hi, cov = speed.walsh_interval([1.0] * 9 + [50.0])  # one wild round moves it little
    assert est == pytest.approx(1.0) and hi == pytest.approx(1.0) and cov >= speed.CONFIDENCE


def test_walsh_interval_holds_the_centre_as_often_as_it_says():
    """Seeded draws from a heavy-tailed symmetric law (Laplace) around a known centre."""
    rng = random.Random(21)
    for n in (6, 12, 25):
        held = 0
        for _ in range(1500):
            xs = [0.05 + rng.choice((-1, 1)) * rng.expovariate(10.0) for _ in range(n)]
            _, lo, hi, cov = speed.walsh_interval(xs)
            held += lo <= 0.05 <= hi
        assert held / 1500 >= cov - 0.025, (n, held, cov)


def test_round_ratio_is_the_geometric_mean_over_prompts_and_skips_missing_figures():
    ms = [
        speed.Measure(round=1, side="working", prompt="a", tok_s=10.0),
        speed.Measure(round=1, side="new", prompt="a", tok_s=20.0),
        speed.Measure(round=1, side="working", prompt="b", tok_s=10.0),
        speed.Measure(round=1, side="new", prompt="b", tok_s=5.0),
        speed.Measure(round=1, side="working", prompt="c", tok_s=10.0),
        speed.Measure(round=1, side="new", prompt="c", tok_s=None),  # its answer did not hold
        speed.Measure(round=2, side="working", prompt="a", tok_s=None),
        speed.Measure(round=2, side="new", prompt="a", tok_s=9.0),
    ]
    (r,) = speed.round_ratios(ms)
    assert r.round == 1 and r.prompts == 2 and r.ratio == pytest.approx(1.0)


@pytest.mark.parametrize("pairs, label", [
    ([(100, 100.5), (100, 99.8), (100, 101.0), (100, 100.2), (100, 99.5)], speed.ON_PAR),
    ([(100, 110), (100, 112), (100, 109), (100, 111), (100, 110)], speed.FASTER),
    ([(100, 20), (100, 21), (100, 19), (100, 22), (100, 20)], speed.SLOWER),
    # the median is on par, but the rounds scatter more than the tolerance
    ([(100, 80), (100, 100), (100, 101), (100, 99), (100, 125)], speed.TOO_NOISY),
    # 6 % slower in the median, yet one round above 1: the difference is within the noise
    ([(100, 94), (100, 93), (100, 95), (100, 101), (100, 70)], speed.TOO_NOISY),
])
def test_speed_labels(pairs, label):
    v = speed.speed_verdict(speed_measures(pairs, prompts=3), tolerance=0.03, rounds_asked=len(pairs))
    assert v.label == label, v.sentence()
    assert v.ok == (label in (speed.ON_PAR, speed.FASTER))


def test_speed_needs_five_valid_rounds():
    v = speed.speed_verdict(speed_measures([(100, 20)] * 4), tolerance=0.03, rounds_asked=4)
    assert v.label == speed.TOO_FEW and not v.ok
    assert "needs 5 valid rounds" in v.sentence()
    v = speed.speed_verdict([], tolerance=0.03)
    assert v.label == speed.TOO_FEW and v.median is None


def test_slower_says_the_ratio_and_its_spread():
    rounds = speed_measures([(40, 10), (40, 11), (40, 9), (40, 10), (40, 12)])
    v = speed.speed_verdict(rounds, tolerance=0.03, rounds_asked=5)
    assert v.label == speed.SLOWER
    s = v.sentence()
    # the estimate is the median of the 15 pairwise averages of the log-ratios: that of 0.225 and 0.300
    assert s.startswith("slower: new/working 0.260 (-74.0 %; spread 0.225..0.300")
    d = v.to_dict()
    assert d["median_ratio"] == pytest.approx(math.sqrt(0.225 * 0.3)) and d["rounds_valid"] == 5
    assert d["working_median_tok_s"] == 40


def test_decide_boundaries():
    assert speed.decide(1.03, 1.0, 1.06, 0.03) == speed.ON_PAR  # both exactly at the tolerance
    assert speed.decide(1.031, 1.001, 1.06, 0.03) == speed.FASTER
    assert speed.decide(1.031, 0.999, 1.06, 0.03) == speed.TOO_NOISY
    assert speed.decide(0.96, 0.95, 0.999, 0.03) == speed.SLOWER
    with pytest.raises(ValueError):
        speed.speed_verdict([], tolerance=0)


def test_another_round_until_decided_or_the_budget_is_spent():
    more = dict(valid_rounds=5, rounds_done=5, min_rounds=5, elapsed_s=100.0, budget_s=900.0)
    assert speed.another_round([speed.TOO_NOISY, speed.ON_PAR], **more)  # one metric undecided, budget left
    assert not speed.another_round([speed.ON_PAR, speed.ON_PAR], **more)  # clear: stop early
    assert not speed.another_round([speed.SLOWER, speed.ON_PAR], **more)  # "slower" is decided too
    assert speed.another_round([speed.ON_PAR], **{**more, "rounds_done": 3, "valid_rounds": 3})  # below the minimum
    # 5 rounds took 100 s: a sixth ends at 120 s; at 890 s of 900 the next would end past the budget
    assert speed.another_round([speed.TOO_NOISY], **{**more, "elapsed_s": 880.0, "budget_s": 1056.0})
    assert not speed.another_round([speed.TOO_NOISY], **{**more, "elapsed_s": 890.0, "budget_s": 900.0})
    # no valid answers at all: more rounds of the same will not help
    assert not speed.another_round([speed.TOO_FEW], **{**more, "valid_rounds": 0})


def _sequential(ratios: list[float], *, budget_s: float, round_s: float, tolerance: float = 0.10) -> tuple[str, int]:
    """What verify-run's loop decides on a stream of round ratios, each round taking round_s."""
    done = 5
    while speed.another_round([speed.label_of(ratios[:done], tolerance)], valid_rounds=done, rounds_done=done,
                              min_rounds=5, elapsed_s=done * round_s, budget_s=budget_s):
        done += 1
    return speed.label_of(ratios[:done], tolerance), done


# The same bytes on a loaded 2-core machine: rounds scatter 0.86..1.11 around 1 (as measured).
SAME_UNDER_LOAD = [0.86, 1.11, 0.97, 1.04, 0.90, 1.08, 0.99, 0.93, 1.02, 1.10, 0.88, 1.01, 0.98, 1.05, 0.95, 1.03, 0.92,
                   1.00, 1.07, 0.96, 1.09, 0.94, 1.01, 0.99, 0.89, 1.06, 1.00, 0.97, 1.02, 0.98] * 2


# Three times the scatter on the log scale: 0.64..1.37.
WILDER = [r ** 3 for r in SAME_UNDER_LOAD]


def test_sequential_rounds_decide_a_noisy_same_build_within_the_budget():
    assert speed.label_of(SAME_UNDER_LOAD[:5], 0.10) == speed.TOO_NOISY  # what 5 fixed rounds said
    # the signed-rank interval decides after 6 rounds (the median's interval needed 8)
    assert _sequential(SAME_UNDER_LOAD, budget_s=900.0, round_s=43.0) == (speed.ON_PAR, 6)
    slowed = [r * 0.6 for r in SAME_UNDER_LOAD]  # 40 % slower under the same noise: found at once
    assert _sequential(slowed, budget_s=900.0, round_s=43.0) == (speed.SLOWER, 5)
    assert _sequential([r * 0.6 for r in WILDER], budget_s=900.0, round_s=43.0) == (speed.SLOWER, 5)
    # thrice the scatter: decided after 18 rounds (the median's interval was still too noisy at 20)
    assert _sequential(WILDER, budget_s=900.0, round_s=43.0) == (speed.ON_PAR, 18)
    assert _sequential(WILDER, budget_s=300.0, round_s=43.0) == (speed.TOO_NOISY, 6)


def test_too_noisy_names_the_budget_rounds_and_load():
    budget = speed.SpeedBudget(rounds=7, seconds=301.0, budget_s=300.0, load=9.4, cores=2)
    v = speed.speed_verdict(speed_measures([(100, 100 * r) for r in WILDER[:7]]), tolerance=0.10, budget=budget)
    assert v.label == speed.TOO_NOISY
    s = v.sentence()
    assert "7 rounds in 301 s of a 300 s budget; load average 9.4 on 2 cores" in s and "raise --speed-budget" in s
    d = v.to_dict()
    assert d["rounds_run"] == 7 and d["budget_s"] == 300.0 and d["load_average"] == 9.4
    budget = speed.SpeedBudget(rounds=6, seconds=90, budget_s=900)
    decided = speed.speed_verdict(speed_measures([(100, 100)] * 6), tolerance=0.10, budget=budget)
    assert decided.label == speed.ON_PAR and "6 rounds in 90 s of a 900 s budget" in decided.sentence()
    part = verdict.speed_part({("CPU", "decode"): decided, ("CPU", "prompt"): decided})
    assert part.ok and part.summary == "CPU decode on par 1.000 after 6 rounds; CPU prompt on par 1.000 after 6 rounds"


def _sample(rnd: int, variant: str, prompt: str, prompt_n: int, pps: float) -> Sample:
    return Sample(round=rnd, variant=variant, prompt=prompt, prompt_tok_s=pps, decode_tok_s=30.0, prompt_n=prompt_n,
                  predicted_n=64, text="", valid=True, why="")


def test_prompt_speed_is_judged_on_the_long_prompts_only():
    """A 15-token prompt whose figures swing 0.5x..2x does not decide prompt speed while a
    121-token one is on par; with no prompt that long, the short ones are all there is."""
    role_of = {"w": "working", "n": "new"}
    swings = [0.5, 2.0, 0.6, 1.8, 0.55, 1.9]
    samples = []
    for rnd, swing in enumerate(swings, start=1):
        samples += [_sample(rnd, "w", "code", 121, 100.0),
                    _sample(rnd, "n", "code", 121, 100.0 * (1 + 0.01 * (-1) ** rnd)),
                    _sample(rnd, "w", "short", 15, 100.0), _sample(rnd, "n", "short", 15, 100.0 * swing)]
    assert speed_rounds.prompt_speed_prompts(tuple(samples)) == {"code"}
    got = speed_rounds.verdicts_of(tuple(samples), role_of, device="CPU", tolerance=0.10, rounds_asked=5)
    assert got[("CPU", "prompt")].label == speed.ON_PAR and all(r.prompts == 1 for r in got[("CPU", "prompt")].ratios)
    assert all(r.prompts == 2 for r in got[("CPU", "decode")].ratios)  # decode counts every prompt
    short = tuple(x for x in samples if x.prompt == "short")
    assert speed_rounds.prompt_speed_prompts(short) == {"short"}
    got = speed_rounds.verdicts_of(short, role_of, device="CPU", tolerance=0.10, rounds_asked=5)
    assert got[("CPU", "prompt")].label == speed.TOO_NOISY


def test_geometric_mean_is_symmetric():
    up = speed.round_ratios(speed_measures([(10, 20)]))[0].ratio
    down = speed.round_ratios(speed_measures([(20, 10)]))[0].ratio
    assert math.isclose(up * down, 1.0)
