"""Pearson chi-square tests summed over strata (prompts): two-sample homogeneity and goodness of fit.

Summing the per-prompt statistics adds their degrees of freedom and their noncentralities, so a
shift whose direction changes from prompt to prompt still accumulates (docs/statistics.md: the pooled
statistic found it in .95-1.0 of runs where the best BH-adjusted single prompt found it in .03-.05).
p-values: the chi-square approximation, valid because the bins keep expected counts >= 5 (see
partition.py for the two-sample bins and `MIN_EXPECTED` below for goodness of fit), and an exact
Monte Carlo permutation p-value for any table, sparse or not, reported beside it as a check.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

# Cochran's rule for the chi-square approximation: every expected count at least 5.
MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class StratumStat:
    statistic: float
    df: int

    @property
    def pvalue(self) -> float:
        return chi2_pvalue(self.statistic, self.df)


@dataclass(frozen=True)
class ChiSquareResult:
    """The summed statistic, its df and p-value, and each stratum's share (for BH pointing)."""

    statistic: float
    df: int
    pvalue: float
    strata: tuple[StratumStat, ...]

    def stratum_pvalues(self) -> np.ndarray:
        return np.array([s.pvalue for s in self.strata])


def chi2_pvalue(statistic: float, df: int) -> float:
    if df <= 0:
        return 1.0
    if not np.isfinite(statistic):
        return 0.0
    return float(stats.chi2.sf(statistic, df))


def _combine(strata: list[StratumStat]) -> ChiSquareResult:
    statistic = float(sum(s.statistic for s in strata))
    df = int(sum(s.df for s in strata))
    return ChiSquareResult(statistic=statistic, df=df, pvalue=chi2_pvalue(statistic, df), strata=tuple(strata))


def two_sample_stratum(table: np.ndarray) -> StratumStat:
    """Pearson's statistic of one 2 x cells table (rows: arms). Empty cells carry no df.

    No Yates correction (scipy's chi2_contingency applies it at df 1 unless told not to).
    """
    table = np.asarray(table, dtype=np.float64)
    table = table[:, table.sum(axis=0) > 0]
    rows = table.sum(axis=1)
    if table.shape[1] < 2 or np.any(rows == 0):
        return StratumStat(0.0, 0)
    expected = np.outer(rows, table.sum(axis=0)) / table.sum()
    return StratumStat(float(((table - expected) ** 2 / expected).sum()), table.shape[1] - 1)


def two_sample_chisquare(tables: Sequence[np.ndarray]) -> ChiSquareResult:
    """Homogeneity of the two arms, summed over strata; each table is 2 x cells (baseline, candidate)."""
    return _combine([two_sample_stratum(t) for t in tables])


def permutation_pvalue(tables: Sequence[np.ndarray], *, n_resamples: int, rng: np.random.Generator) -> float:
    """Exact-conditional Monte Carlo p-value of the summed two-sample statistic.

    Under the null the arm labels are exchangeable within a stratum, so given each stratum's column
    totals the first arm's counts are multivariate hypergeometric. The (1 + hits) / (1 + B) form is
    a valid p-value for any B; its resolution is 1 / (1 + B).
    """
    observed = two_sample_chisquare(tables).statistic
    null = np.zeros(n_resamples)
    for table in tables:
        table = np.asarray(table, dtype=np.int64)
        table = table[:, table.sum(axis=0) > 0]
        rows = table.sum(axis=1)
        if table.shape[1] < 2 or np.any(rows == 0):
            continue
        columns = table.sum(axis=0)
        first = rng.multivariate_hypergeometric(columns, int(rows[0]), size=n_resamples).astype(np.float64)
        second = columns - first
        total = float(columns.sum())
        e_first = rows[0] * columns / total
        e_second = rows[1] * columns / total
        null += ((first - e_first) ** 2 / e_first).sum(axis=1) + ((second - e_second) ** 2 / e_second).sum(axis=1)
    hits = int(np.sum(null >= observed - 1e-9 * max(1.0, observed)))
    return (1 + hits) / (1 + n_resamples)


def goodness_of_fit_stratum(counts: np.ndarray, probs: np.ndarray, *, min_expected: float = MIN_EXPECTED) -> StratumStat:
    """Pearson's statistic of observed counts against exact cell probabilities.

    Cells whose expected count is below `min_expected` are pooled (the pooling looks only at the
    expected counts, never at the observed ones). A count in a cell of probability zero is a
    support violation: statistic infinite.
    """
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    n = counts.sum()
    if n == 0:
        return StratumStat(0.0, 0)
    if np.any((probs <= 0) & (counts > 0)):
        return StratumStat(float("inf"), max(1, int(np.sum(probs > 0)) - 1))
    keep = probs > 0
    counts, probs = counts[keep], probs[keep] / probs[keep].sum()
    expected = n * probs
    small = expected < min_expected
    if small.any():
        pooled_count, pooled_expected = counts[small].sum(), expected[small].sum()
        counts, expected = list(counts[~small]), list(expected[~small])
        if pooled_expected >= min_expected or not counts:
            counts.append(pooled_count)
            expected.append(pooled_expected)
        else:
            smallest = int(np.argmin(expected))
            counts[smallest] += pooled_count
            expected[smallest] += pooled_expected
        counts, expected = np.array(counts), np.array(expected)
    if len(counts) < 2:
        return StratumStat(0.0, 0)
    return StratumStat(float(((counts - expected) ** 2 / expected).sum()), len(counts) - 1)


def goodness_of_fit(counts: Sequence[np.ndarray], probs: Sequence[np.ndarray]) -> ChiSquareResult:
    """The candidate's counts against the baseline's exact probabilities, summed over strata."""
    return _combine([goodness_of_fit_stratum(c, p) for c, p in zip(counts, probs)])
