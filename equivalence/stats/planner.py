"""Sample sizes from the power formulas of docs/statistics.md, and the smallest shift a budget can see.

Pearson chi-square with noncentrality lambda: for two arms of n samples, lambda = (n/2) sum
(p1 - p0)^2 / p0 >= 2 n d^2 at TV distance d (Cauchy-Schwarz: (sum |D|)^2 <= sum D^2/p0 * sum p0,
equality when |D| is proportional to p0, i.e. the bound is the worst direction of shift); one
sample against exact probabilities, lambda >= 4 n d^2. Summed over P prompts, df and lambda add.
The required lambda is the one at which the noncentral chi-square exceeds the level-alpha critical
value with the target power.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from scipy import optimize, stats

from .partition import MAX_CELLS


@lru_cache(maxsize=4096)
def required_noncentrality(df: int, alpha: float, power: float) -> float:
    """lambda such that P(ncx2(df, lambda) > chi2 critical value at alpha) = power."""
    critical = stats.chi2.isf(alpha, df)
    return float(optimize.brentq(lambda lam: stats.ncx2.sf(critical, df, lam) - power, 1e-9, 1e7, xtol=1e-10))


def chisquare_power(df: int, alpha: float, noncentrality: float) -> float:
    return float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, noncentrality))


def two_sample_chisquare_n(tv: float, *, alpha: float, power: float, prompts: int = 1, cells: int = MAX_CELLS) -> int:
    """Samples per arm per prompt for the summed two-sample chi-square to see TV shift `tv` in every prompt."""
    lam = required_noncentrality((cells - 1) * prompts, alpha, power)
    return math.ceil(lam / (2 * prompts * tv ** 2))


def goodness_of_fit_n(tv: float, *, alpha: float, power: float, prompts: int = 1, cells: int = MAX_CELLS) -> int:
    """Candidate samples per prompt for the summed goodness of fit against exact probabilities."""
    lam = required_noncentrality((cells - 1) * prompts, alpha, power)
    return math.ceil(lam / (4 * prompts * tv ** 2))


def ztest_n(delta: float, sigma: float, *, alpha: float, power: float) -> int:
    """Observations for a two-sided z-test to see a mean shift delta: (z_{a/2} + z_power)^2 sigma^2 / delta^2."""
    z = stats.norm.isf(alpha / 2) + stats.norm.isf(1 - power)
    return math.ceil(z ** 2 * sigma ** 2 / delta ** 2)


def ks_n(deviation: float, *, alpha: float, power: float, two_sample: bool = False) -> int:
    """Kolmogorov-Smirnov samples (per arm when two_sample) for a CDF deviation D.

    The statistic is about D + B(t)/sqrt(n) with Var B(t) <= 1/4 at the deviation's location, so
    power needs sqrt(n) D >= K_alpha + z_power / 2 (K_alpha: Kolmogorov distribution quantile);
    two samples of n each behave like one of n/2.
    """
    k = stats.kstwobign.isf(alpha) + stats.norm.isf(1 - power) / 2
    n = (k / deviation) ** 2
    return math.ceil(2 * n if two_sample else n)


def min_detectable_tv(samples: int, *, alpha: float, power: float, prompts: int, cells: int = MAX_CELLS,
                      inflation: float = 1.0, two_sample: bool = True) -> float:
    """Smallest TV shift (in every prompt, worst direction) seen with `power` at this budget."""
    if samples <= 0:
        return float("inf")
    lam = required_noncentrality((cells - 1) * prompts, alpha, power)
    per_sample = 2 if two_sample else 4
    return math.sqrt(inflation * lam / (per_sample * prompts * samples))


@dataclass(frozen=True)
class Budget:
    """What a run samples and what it can see: quoted in every distribution finding."""

    samples_per_prompt: int   # per arm (the candidate's alone when one-sample), per prompt, per sampling setting
    prompts: int
    tokens: int               # generated tokens per sample
    level: float              # the gate's share of alpha at its final look
    power: float
    detect_tv: float          # the shift the budget was planned for
    min_detectable_tv: float  # the shift it can actually see with `power`
    limited_by: str           # "detect-tv", "samples-per-prompt" or "serial route cap"
    one_sample: bool = False  # sized for the candidate's samples against exact probabilities (no baseline arm)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def plan_budget(*, detect_tv: float, level: float, power: float, prompts: int, tokens: int, inflation: float,
                override: int | None = None, cap: int | None = None, cells: int = MAX_CELLS,
                one_sample: bool = False) -> Budget:
    """Samples per prompt for `detect_tv` (times the sequential design's inflation), an override, or a cap.

    `one_sample`: the candidate's samples against exact probabilities (no baseline arm), else per arm of two."""
    size = goodness_of_fit_n if one_sample else two_sample_chisquare_n
    planned = math.ceil(inflation * size(detect_tv, alpha=level, power=power, prompts=prompts, cells=cells))
    samples, limited_by = planned, "detect-tv"
    if override is not None:
        samples, limited_by = override, "samples-per-prompt"
    elif cap is not None and cap < planned:
        samples, limited_by = cap, "serial route cap"
    mdtv = min_detectable_tv(samples, alpha=level, power=power, prompts=prompts, cells=cells, inflation=inflation,
                             two_sample=not one_sample)
    return Budget(samples_per_prompt=samples, prompts=prompts, tokens=tokens, level=level, power=power,
                  detect_tv=detect_tv, min_detectable_tv=mdtv, limited_by=limited_by, one_sample=one_sample)
