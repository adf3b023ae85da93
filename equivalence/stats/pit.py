"""Randomised PIT values tested against Uniform(0,1) with Kolmogorov-Smirnov and Anderson-Darling.

For a token x drawn from the processed distribution p (vocabulary ranked by p), u = F(x-) + V p(x)
with V ~ U(0,1) independent is exactly Uniform(0,1), and successive positions of one sequence are
independent (Rosenblatt): the sum over positions is a martingale, so pooling every generated
token of every sample keeps the Brownian-bridge limit even though EOS makes lengths random.
Sharpening piles u near 0, flattening spreads it toward 1; a direction that flips from context to
context cancels out, which is why these tests are not the gate (docs/statistics.md).

Why not scipy for AD: `scipy.stats.anderson` has no uniform case, `goodness_of_fit` is Monte Carlo
(p floored at 1/(B+1)). The fully specified case has a closed-form limit law; Marsaglia & Marsaglia
(2004, J. Stat. Software 9(2)) give it with a finite-n correction, accurate to ~1e-6 absolute.
The KS p-value is scipy's (exact for small n, asymptotic otherwise): PIT values are continuous, so
the "KS assumes continuous data" pitfall does not apply here, unlike raw token ids or lengths.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

# log(0) guard: a PIT of exactly 0 or 1 has probability zero under the null (a support violation
# gives u = 1); clipping to 1e-12 keeps the statistic finite and still overwhelming (ln 1e-12 = -27.6).
CLIP = 1e-12


@dataclass(frozen=True)
class UniformityResult:
    n: int
    ks_statistic: float
    ks_pvalue: float
    ad_statistic: float
    ad_pvalue: float
    mean: float


def ks_uniform(u: Sequence[float]) -> tuple[float, float]:
    if len(u) == 0:
        return 0.0, 1.0
    result = stats.kstest(np.asarray(u, dtype=np.float64), "uniform")
    return float(result.statistic), float(result.pvalue)


def anderson_darling_statistic(u: Sequence[float]) -> float:
    """A^2 against Uniform(0,1): -n - mean over i of (2i-1)(ln u_(i) + ln(1 - u_(n+1-i)))."""
    x = np.sort(np.clip(np.asarray(u, dtype=np.float64), CLIP, 1 - CLIP))
    n = len(x)
    i = np.arange(1, n + 1)
    return float(-n - np.sum((2 * i - 1) * (np.log(x) + np.log1p(-x[::-1]))) / n)


def _adinf_sf(z: float) -> float:
    """Limit survival function of A^2 (Marsaglia & Marsaglia 2004; the z >= 2 branch via expm1, so tiny
    p-values keep their digits)."""
    if z <= 0:
        return 1.0
    if z < 2.0:
        return float(1.0 - np.exp(-1.2337141 / z) / np.sqrt(z)
                     * (2.00012 + (0.247105 - (0.0649821 - (0.0347962 - (0.011672 - 0.00168691 * z) * z) * z) * z) * z))
    return float(-np.expm1(-np.exp(1.0776 - (2.30695 - (0.43424 - (0.082433 - (0.008056 - 0.0003146 * z) * z) * z) * z) * z)))


def _errfix(n: int, x: float) -> float:
    """Finite-n correction to the limit CDF value x (Marsaglia & Marsaglia 2004)."""
    if x > 0.8:
        return (-130.2137 + (745.2337 - (1705.091 - (1950.646 - (1116.360 - 255.7844 * x) * x) * x) * x) * x) / n
    c = 0.01265 + 0.1757 / n
    if x < c:
        t = x / c
        t = np.sqrt(t) * (1.0 - t) * (49 * t - 102)
        return float(t * (0.0037 / (n * n) + 0.00078 / n + 0.00006) / n)
    t = (x - c) / (0.8 - c)
    t = -0.00022633 + (6.54034 - (14.6538 - (14.458 - (8.259 - 1.91864 * t) * t) * t) * t) * t
    return float(t * (0.04213 + 0.01365 / n) / n)


def anderson_darling_pvalue(statistic: float, n: int) -> float:
    """P(A^2 >= statistic) for n uniforms. The fitted finite-n correction does not vanish at the far
    tail: it leaves a conservative floor of 6e-4 / n (below 1e-6 at the thousands of tokens a run has)."""
    if n == 0:
        return 1.0
    sf = _adinf_sf(statistic)
    return float(min(1.0, max(0.0, sf - _errfix(n, 1.0 - sf))))


def uniformity(u: Sequence[float]) -> UniformityResult:
    """KS and AD of PIT values against Uniform(0,1)."""
    u = np.asarray(u, dtype=np.float64)
    ks_stat, ks_p = ks_uniform(u)
    ad = anderson_darling_statistic(u) if len(u) else 0.0
    return UniformityResult(n=len(u), ks_statistic=ks_stat, ks_pvalue=ks_p, ad_statistic=ad,
                            ad_pvalue=anderson_darling_pvalue(ad, len(u)), mean=float(u.mean()) if len(u) else 0.5)

