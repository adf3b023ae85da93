"""Sequence-level two-sample tests: generated length, and log-likelihood under the target.

Length is discrete with heavy ties (most samples hit max_tokens), so KS would be very conservative
(docs/statistics.md pitfalls): lengths are binned label-blind like the token bins (each length with a
pooled count >= 10 is a cell, the rest pooled) and tested by the summed chi-square.
Log-likelihood ties whenever two samples are the same sequence; ties are broken by an independent
uniform jitter far below the gap between distinct values, which makes the pooled values continuous
and exchangeable under the null, so `ks_2samp` is valid. Prompts are pooled with equal sample
counts per arm, so both arms draw from the same mixture (stratified, hence KS is conservative).
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
from scipy import stats

from .chisquare import ChiSquareResult, two_sample_chisquare
from .partition import MIN_POOLED_COUNT

# Jitter amplitude for tie-breaking: far below any real difference in float64 log-likelihoods (> 1e-7).
JITTER = 1e-9


def length_tables(baseline: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]],
                  *, min_count: int = MIN_POOLED_COUNT) -> list[np.ndarray]:
    """Per stratum, a 2 x cells table over the lengths frequent in both arms pooled (labels ignored)."""
    tables = []
    for a, b in zip(baseline, candidate):
        pooled = Counter(list(a) + list(b))
        cells = sorted(length for length, count in pooled.items() if count >= min_count)
        index = {length: i for i, length in enumerate(cells)}
        table = np.zeros((2, len(cells) + 1), dtype=np.int64)
        for row, lengths in enumerate((a, b)):
            for length in lengths:
                table[row, index.get(length, len(cells))] += 1
        tables.append(table)
    return tables


def length_test(baseline: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]]) -> ChiSquareResult:
    """Summed two-sample chi-square on lengths, one stratum per prompt."""
    return two_sample_chisquare(length_tables(baseline, candidate))


def loglik_ks(baseline: Sequence[float], candidate: Sequence[float], *, rng: np.random.Generator) -> tuple[float, float]:
    """Two-sample KS on log-likelihoods with random tie-breaking; returns (statistic, p-value)."""
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    if len(a) == 0 or len(b) == 0:
        return 0.0, 1.0
    a = a + rng.uniform(0, JITTER, size=len(a))
    b = b + rng.uniform(0, JITTER, size=len(b))
    result = stats.ks_2samp(a, b)
    return float(result.statistic), float(result.pvalue)
