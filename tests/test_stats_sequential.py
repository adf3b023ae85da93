"""The sequential plan: valid under the null at any stopping, power >= 0.9 within 1.25x the fixed-n bound."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spec_route_suite.equivalence.stats.planner import required_noncentrality
from spec_route_suite.equivalence.stats.sequential import PairBettingTest, SequentialHypothesis, SequentialPlan

PLAN = SequentialPlan()
GATE_LEVEL = 0.01 / 3 * 0.8  # alpha .01, three grid settings, gate weight .8 (distribution.gate_level)


def test_look_sizes_are_increasing_and_end_at_the_budget():
    assert PLAN.look_sizes(800) == (100, 200, 400, 800)
    assert PLAN.look_sizes(3) == (1, 2, 3, 4)  # tiny budgets grow to one new sample per look
    for total in (1, 5, 17, 1000):
        sizes = PLAN.look_sizes(total)
        assert all(a < b for a, b in zip(sizes, sizes[1:])) and sizes[-1] >= total


def test_a_rejection_needs_the_previous_look_failing_too():
    hyp = SequentialHypothesis("h", 0.01, PLAN)
    hyp.update(1e-9)     # look 1 fails badly, but nothing came before it
    assert hyp.sequential_pvalue == 1.0
    hyp.update(1e-9)     # look 2 confirms on fresh samples: p / spend = 1e-7
    assert hyp.sequential_pvalue == pytest.approx(1e-7) and hyp.deciding_look == 1
    quiet = SequentialHypothesis("q", 0.0027, PLAN)
    for p in (0.5, 1e-9, 0.5, 1e-9):  # each failure follows a quiet look (half-look screen .3): never confirmed
        quiet.update(p)
    assert quiet.sequential_pvalue == 1.0
    late = SequentialHypothesis("l", 0.0027, PLAN)
    for p in (0.5, 0.5, 0.2, 0.001):  # half-budget screen at 110 x .0027 = .3 passes, final decides
        late.update(p)
    assert late.sequential_pvalue == pytest.approx(0.001 / 0.95) and late.screening(2)


def _brownian_pvalues(rng, runs, looks, drift=0.0):
    """One-sided z-test p-values of a cumulative sum observed at the plan's looks (correlated looks)."""
    steps = np.diff(np.concatenate(([0.0], looks)))
    paths = np.cumsum(rng.normal(drift * steps, np.sqrt(steps), size=(runs, len(looks))), axis=1)
    return stats.norm.sf(paths / np.sqrt(looks))


def test_sequential_pvalue_is_valid_at_any_stopping():
    rng = np.random.default_rng(0)
    pvalues = _brownian_pvalues(rng, 40000, np.array(PLAN.looks))
    level = 0.01
    seq = []
    for row in pvalues:
        hyp = SequentialHypothesis("h", level, PLAN)
        for p in row:
            hyp.update(p)
        seq.append(hyp.sequential_pvalue)
    seq = np.array(seq)
    for x in (0.001, 0.01, 0.05):
        assert np.mean(seq <= x) <= x + 3 * np.sqrt(x / len(seq))


def _simulate_design(rng, *, prompts, n, tv, level, runs):
    """The summed two-sample chi-square under the plan, on multinomial counts (10 equal bins, TV `tv` in
    every prompt, direction random per prompt). Returns (power, mean samples used per arm per prompt)."""
    cells = 10
    p0 = np.full(cells, 1 / cells)
    signs = rng.permuted(np.tile(np.r_[np.ones(cells // 2), -np.ones(cells // 2)], (runs, prompts, 1)), axis=2)
    p1 = p0 + signs * (2 * tv / cells)
    sizes = np.diff(np.concatenate(([0], PLAN.look_sizes(n))))
    a = np.zeros((runs, prompts, cells))
    b = np.zeros((runs, prompts, cells))
    alive, rejected, used = np.ones(runs, bool), np.zeros(runs, bool), np.zeros(runs)
    previous = np.ones(runs)
    for look, m in enumerate(sizes):
        a += rng.multinomial(m, np.broadcast_to(p0, p1.shape))
        b += rng.multinomial(m, p1)
        used[alive] += m
        e = (a + b) / 2
        with np.errstate(divide="ignore", invalid="ignore"):
            statistic = np.where(e > 0, 2 * (a - e) ** 2 / e, 0).sum(axis=(1, 2))
        df = ((a + b > 0).sum(axis=2) - 1).sum(axis=1)
        p = stats.chi2.sf(statistic, df)
        eligible = previous <= PLAN.screen_level(look - 1, level) if look else np.zeros(runs, bool)
        now = alive & eligible & (p <= level * PLAN.spend[look])
        rejected |= now
        alive &= ~now
        if look == PLAN.screen_look:
            alive &= p <= PLAN.screen_level(look, level)
        previous = p
    return rejected.mean(), used.mean()


@pytest.mark.parametrize("prompts", [1, 20])
def test_design_power_and_samples_against_the_fixed_n_bound(prompts):
    """At the plan's inflation x the fixed-n size, power >= .9 and the mean sample is <= 1.25 x the bound."""
    rng = np.random.default_rng(prompts)
    tv, df = 0.05, 9 * prompts
    bound = required_noncentrality(df, 0.01, 0.9) / (2 * prompts * tv ** 2)     # the table, alpha .01
    fixed = required_noncentrality(df, GATE_LEVEL * PLAN.spend[-1], 0.9) / (2 * prompts * tv ** 2)
    n = int(np.ceil(PLAN.inflation * fixed))
    runs = 1500
    power, used = _simulate_design(rng, prompts=prompts, n=n, tv=tv, level=GATE_LEVEL, runs=runs)
    assert power >= 0.9 - 2 * np.sqrt(0.09 / runs)
    assert used / bound <= 1.25
    false_alarms, used_null = _simulate_design(rng, prompts=prompts, n=n, tv=0.0, level=GATE_LEVEL, runs=runs)
    assert false_alarms <= GATE_LEVEL + 3 * np.sqrt(GATE_LEVEL / runs)
    assert used_null / n <= 0.7  # the futility stop: a correct route costs ~65% of the budget


def test_betting_is_anytime_valid_and_fast_on_gross_shifts():
    rng = np.random.default_rng(3)
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    wrong = np.array([0.1, 0.2, 0.3, 0.4])
    hits = 0
    for _ in range(300):
        test = PairBettingTest(4)
        for x, y in zip(rng.choice(4, 400, p=probs), rng.choice(4, 400, p=probs)):
            test.update(int(x), int(y))
        hits += test.pvalue <= 0.05
    assert hits / 300 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 300)
    test = PairBettingTest(4)
    for x, y in zip(rng.choice(4, 400, p=probs), rng.choice(4, 400, p=wrong)):
        test.update(int(x), int(y))
    assert test.pvalue < 1e-4
