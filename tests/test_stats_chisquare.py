"""Pearson chi-square pieces against scipy, and the validity of their p-values on sparse tables."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spec_route_suite.equivalence.stats.chisquare import (goodness_of_fit, goodness_of_fit_stratum, permutation_pvalue,
                                         two_sample_chisquare, two_sample_stratum)


def test_two_sample_stratum_is_scipy_without_yates():
    table = np.array([[30, 12, 8], [22, 20, 9]])
    expected = stats.chi2_contingency(table, correction=False)
    got = two_sample_stratum(table)
    assert got.statistic == pytest.approx(expected.statistic)
    assert got.df == expected.dof
    # at df 1 scipy's default applies Yates' correction, which we must not
    two_by_two = np.array([[30, 12], [22, 20]])
    assert two_sample_stratum(two_by_two).statistic == pytest.approx(
        stats.chi2_contingency(two_by_two, correction=False).statistic)


def test_empty_cells_carry_no_degrees_of_freedom_and_strata_add():
    a = np.array([[10, 0, 5], [12, 0, 3]])
    b = np.array([[40, 10], [30, 20]])
    result = two_sample_chisquare([a, b])
    assert result.df == 1 + 1
    assert result.statistic == pytest.approx(two_sample_stratum(a).statistic + two_sample_stratum(b).statistic)
    assert result.pvalue == pytest.approx(stats.chi2.sf(result.statistic, 2))
    assert two_sample_chisquare([np.array([[5, 0], [0, 0]])]).pvalue == 1.0  # one arm empty: no information


def test_goodness_of_fit_is_scipy_chisquare_when_expected_counts_are_large():
    counts = np.array([50, 30, 20])
    probs = np.array([0.5, 0.3, 0.2])
    assert goodness_of_fit_stratum(counts, probs).statistic == pytest.approx(
        stats.chisquare(counts, probs * counts.sum()).statistic)


def test_goodness_of_fit_pools_cells_by_expected_count_only():
    counts = np.array([90, 6, 2, 2])
    probs = np.array([0.9, 0.06, 0.02, 0.02])
    # n = 100: expected 90, 6, 2, 2. The two cells below 5 pool to 4, still below 5, so they join the
    # smallest remaining cell (6 -> 10): two cells, df 1.
    got = goodness_of_fit_stratum(counts, probs)
    assert got.df == 1
    assert got.statistic == pytest.approx(0.0)
    assert goodness_of_fit_stratum(np.array([80, 6, 14, 0]), probs).df == 1  # observed counts never decide


def test_goodness_of_fit_flags_support_violations():
    result = goodness_of_fit([np.array([10, 1])], [np.array([1.0, 0.0])])
    assert result.pvalue == 0.0


def _null_tables(rng, strata, n, probs):
    return [np.vstack([rng.multinomial(n, probs), rng.multinomial(n, probs)]) for _ in range(strata)]


def test_permutation_pvalue_is_valid_on_sparse_tables():
    """Expected counts ~1 per cell: the permutation p-value still rejects at most alpha of the time."""
    rng = np.random.default_rng(1)
    probs = np.full(12, 1 / 12)
    pvalues = np.array([permutation_pvalue(_null_tables(rng, 3, 12, probs), n_resamples=199, rng=rng)
                        for _ in range(400)])
    for alpha in (0.05, 0.1, 0.25):
        assert np.mean(pvalues <= alpha) <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / len(pvalues))


def test_permutation_and_chi2_agree_when_cells_are_full():
    rng = np.random.default_rng(2)
    tables = _null_tables(rng, 4, 400, np.array([0.4, 0.3, 0.2, 0.1]))
    tables[0][1] = rng.multinomial(400, [0.3, 0.3, 0.25, 0.15])
    chi2 = two_sample_chisquare(tables).pvalue
    perm = permutation_pvalue(tables, n_resamples=4999, rng=rng)
    assert perm == pytest.approx(chi2, abs=0.02 + 0.2 * chi2)


def test_chi2_pvalue_is_calibrated_with_expected_counts_at_least_five():
    rng = np.random.default_rng(3)
    probs = np.array([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])  # n = 100 per arm: smallest expected 5
    pvalues = np.array([two_sample_chisquare(_null_tables(rng, 5, 100, probs)).pvalue for _ in range(4000)])
    for alpha in (0.01, 0.05):
        assert np.mean(pvalues <= alpha) <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / len(pvalues))
