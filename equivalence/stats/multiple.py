"""Multiple testing: weighted Holm across the test families of a run, Benjamini-Hochberg to point at prompts.

Holm controls the family-wise error (the route's verdict: "any family rejects" is a false alarm
with probability <= alpha). Weights let the gate (the pooled chi-square, the only test that sees
every fault) keep most of alpha while the diagnostic families share the rest; with equal weights
it is Holm (1979). BH (scipy's `false_discovery_control`) only names the prompts that carry a
rejection; it never decides the verdict.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats


def holm(pvalues: Sequence[float], *, alpha: float, weights: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted Holm step-down: returns (rejected, adjusted p-values), in input order.

    Step j takes the hypotheses in order of p/w and rejects while p/w <= alpha / (sum of the weights
    not yet rejected). Adjusted p-values are the running maximum of p/w times that weight sum.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=np.float64)
    if np.any(w <= 0):
        raise ValueError("Holm weights must be positive")
    w = w / w.sum()
    order = np.argsort(p / w, kind="stable")
    remaining = w[order][::-1].cumsum()[::-1]  # weight of the hypotheses from step j on
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate(p[order] / w[order] * remaining))
    adjusted = np.empty_like(p)
    adjusted[order] = adjusted_sorted
    return adjusted <= alpha, adjusted


def benjamini_hochberg(pvalues: Sequence[float], *, q: float) -> tuple[np.ndarray, np.ndarray]:
    """BH at false discovery rate q: returns (discoveries, adjusted p-values)."""
    p = np.asarray(pvalues, dtype=np.float64)
    if len(p) == 0:
        return np.zeros(0, dtype=bool), p
    adjusted = stats.false_discovery_control(p, method="bh")
    return adjusted <= q, adjusted
