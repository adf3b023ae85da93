"""The planner reproduces docs/statistics.md's sample-size table, and the minimum detectable TV inverts it."""
from __future__ import annotations

import math

import pytest

from spec_route_suite.equivalence.stats import planner

ALPHA, POWER = 0.01, 0.9


@pytest.mark.parametrize("df, table", [(1, 14.9), (4, 20.7), (9, 26.1), (19, 33.3), (49, 47.0), (900, 165)])
def test_required_noncentrality_matches_the_table(df, table):
    assert planner.required_noncentrality(df, ALPHA, POWER) == pytest.approx(table, rel=0.01)


@pytest.mark.parametrize("tv, prompts, table", [
    (0.05, 1, 5200), (0.02, 1, 32700),      # one prompt, top-9 + other
    (0.05, 100, 330), (0.02, 100, 2100),    # summed over 100 prompts
])
def test_two_sample_chisquare_sample_sizes(tv, prompts, table):
    assert planner.two_sample_chisquare_n(tv, alpha=ALPHA, power=POWER, prompts=prompts) == pytest.approx(table, rel=0.02)


@pytest.mark.parametrize("tv, table", [(0.05, 2600), (0.02, 16300)])
def test_goodness_of_fit_sample_sizes(tv, table):
    assert planner.goodness_of_fit_n(tv, alpha=ALPHA, power=POWER) == pytest.approx(table, rel=0.01)


def test_ztest_and_ks_rules_of_thumb():
    # 14.9 sigma^2 / delta^2; about 5 / D^2 (one sample) and 10 / D^2 per arm (two samples)
    assert planner.ztest_n(0.01, 1.0, alpha=ALPHA, power=POWER) == pytest.approx(14.9e4, rel=0.01)
    assert planner.ks_n(0.01, alpha=ALPHA, power=POWER) == pytest.approx(5e4, rel=0.05)
    assert planner.ks_n(0.01, alpha=ALPHA, power=POWER, two_sample=True) == pytest.approx(10e4, rel=0.05)


def test_the_bound_is_attained_power_check_by_noncentral_chisquare():
    n = planner.two_sample_chisquare_n(0.05, alpha=ALPHA, power=POWER, prompts=10)
    lam = 2 * 10 * n * 0.05 ** 2
    assert planner.chisquare_power(90, ALPHA, lam) >= POWER
    assert planner.chisquare_power(90, ALPHA, 2 * 10 * (n - 5) * 0.05 ** 2) < POWER


@pytest.mark.parametrize("prompts", [1, 7, 100])
def test_min_detectable_tv_inverts_the_sample_size(prompts):
    n = planner.two_sample_chisquare_n(0.05, alpha=ALPHA, power=POWER, prompts=prompts)
    assert planner.min_detectable_tv(n, alpha=ALPHA, power=POWER, prompts=prompts) == pytest.approx(0.05, rel=0.01)
    assert planner.min_detectable_tv(0, alpha=ALPHA, power=POWER, prompts=prompts) == math.inf


def test_plan_budget_reports_what_limited_it():
    planned = planner.plan_budget(detect_tv=0.05, level=ALPHA, power=POWER, prompts=100, tokens=5, inflation=1.1)
    assert planned.limited_by == "detect-tv"
    assert planned.samples_per_prompt == pytest.approx(1.1 * 330, rel=0.01)  # the design's inflation x the bound
    assert planned.min_detectable_tv == pytest.approx(0.05, rel=0.01)
    capped = planner.plan_budget(detect_tv=0.05, level=ALPHA, power=POWER, prompts=2, tokens=5, inflation=1.1, cap=192)
    assert (capped.samples_per_prompt, capped.limited_by) == (192, "serial route cap")
    assert capped.min_detectable_tv > 0.15
    forced = planner.plan_budget(detect_tv=0.05, level=ALPHA, power=POWER, prompts=2, tokens=5, inflation=1.1,
                                 override=50, cap=192)
    assert (forced.samples_per_prompt, forced.limited_by) == (50, "samples-per-prompt")
