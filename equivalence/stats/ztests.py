"""Top-1 rate and log-likelihood z-tests of the candidate's tokens under the baseline's probabilities.

At each generated position the baseline gives the processed distribution p; the indicator
"token is the top-1" has mean top_mass and the token's log p has mean E_p[log p] and variance
Var_p[log p]. Summed over positions and samples, observed minus expected is a martingale, so
(sum - expected) / sqrt(sum of variances) is asymptotically N(0,1) (martingale CLT) whatever the
dependence between positions. Sharpening (e.g. a draft temperature ignored at T < 1) raises both;
flattening lowers both. Sample size: (z_{alpha/2} + z_power)^2 sigma^2 / delta^2 (planner.ztest_n).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from .positions import PositionSummary


@dataclass(frozen=True)
class ZResult:
    z: float
    pvalue: float
    observed: float
    expected: float
    n: int


class ZAccumulator:
    """Running sums of observed values, their conditional means and variances."""

    def __init__(self) -> None:
        self.observed = 0.0
        self.expected = 0.0
        self.variance = 0.0
        self.n = 0

    def add(self, observed: float, mean: float, variance: float, *, count: int = 1) -> None:
        self.observed += observed * count
        self.expected += mean * count
        self.variance += variance * count
        self.n += count

    def result(self) -> ZResult:
        if self.variance <= 0:
            return ZResult(z=0.0, pvalue=1.0, observed=self.observed, expected=self.expected, n=self.n)
        z = (self.observed - self.expected) / np.sqrt(self.variance)
        return ZResult(z=float(z), pvalue=float(2 * stats.norm.sf(abs(z))), observed=self.observed,
                       expected=self.expected, n=self.n)


class TokenZTests:
    """Both z-tests fed one (position summary, token) at a time; support violations are counted apart."""

    def __init__(self) -> None:
        self.top1 = ZAccumulator()
        self.loglik = ZAccumulator()
        self.support_violations = 0

    def add(self, summary: PositionSummary, token: int, *, count: int = 1) -> None:
        """`count` occurrences of `token` after the same prefix."""
        if not summary.supports(token):
            self.support_violations += count
            return
        top = summary.top_mass
        self.top1.add(float(token in summary.top_set), top, top * (1 - top), count=count)
        self.loglik.add(float(np.log(summary.probs[token])), summary.mean_logp, summary.var_logp, count=count)
