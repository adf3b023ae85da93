"""Group-sequential looks with early stopping, a confirmation on fresh samples, and a futility stop.

The budget is drawn in chunks; after each chunk ("look") every test is recomputed on all samples so
far. A hypothesis with level a may be rejected at look k only if
  - p_k <= a * SPEND[k]  (Bonferroni over looks: the SPEND shares sum to 1, so the false-alarm
    probability is <= a whatever the correlation between looks), and
  - it was already failing at look k-1 (p_{k-1} <= the screen level of look k-1): every rejection
    is confirmed by a look that adds fresh samples. Early looks screen at the next look's reporting
    level (fail twice in a row); the half-budget look screens at `screen_factor` x the level (0.29
    for the gate at alpha 0.01), so the final look decides on all samples, as a fixed-n test would.
At the half-budget look the run stops and passes when no hypothesis screens positive (futility):
a correct route costs ~65% of the budget. A grossly wrong route fails at the 1/4 look.

Why not testing by betting for the gate: an e-process over P prompts pays a learning cost per
prompt (about (cells-1)/2 log n nats each, hundreds of nats at P=100) before its wealth can grow,
so at 5% shifts it needs several times the fixed-n chi-square bound; `PairBettingTest` below is the
betting test for one prompt with large shifts, where it shines, and is used as such.

Each hypothesis' sequential p-value min_k p_k / SPEND[k] (over eligible looks) is a valid p-value
(union bound), so weighted Holm across hypotheses applies to it unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SequentialPlan:
    """Look schedule and level spending; `inflation` is the budget factor over the fixed-n bound.

    Defaults chosen by simulating the summed chi-square at the gate's level (alpha .01 over three
    grid settings x gate weight .8 = .0027; tests/test_stats_sequential.py re-checks them): with
    1.07 x the fixed-n sample size at the final look's level, power is 0.90-0.92 from 1 to 20 prompts,
    the mean sample used under a 5% shift is 1.18-1.24 x the docs/statistics.md bound (alpha .01, one
    test) and at most 1.27 x, and a correct route stops at ~65% of the budget. `screen_factor` 110
    puts the gate's half-budget screen at p <= 0.29; 75 (p <= .2) loses ~2% power.
    """

    looks: tuple[float, ...] = (1 / 8, 1 / 4, 1 / 2, 1.0)
    spend: tuple[float, ...] = (0.0, 0.01, 0.04, 0.95)
    screen_look: int = 2
    screen_factor: float = 110.0
    inflation: float = 1.07

    def __post_init__(self) -> None:
        if len(self.looks) != len(self.spend) or abs(sum(self.spend) - 1.0) > 1e-9:
            raise ValueError("one spend share per look, summing to 1")
        if self.spend[0] != 0.0:
            raise ValueError("the first look cannot report: nothing before it to confirm")

    def look_sizes(self, total: int) -> tuple[int, ...]:
        """Cumulative samples per arm at each look: strictly increasing, the last one `total`."""
        sizes: list[int] = []
        for fraction in self.looks:
            size = max(int(math.ceil(fraction * total)), (sizes[-1] + 1) if sizes else 1)
            sizes.append(size)
        sizes[-1] = max(total, sizes[-2] + 1 if len(sizes) > 1 else total)
        return tuple(sizes)

    def screen_level(self, look: int, level: float) -> float:
        """Threshold below which look `look` counts as failing (so that the next look may report)."""
        if look < self.screen_look:
            return level * self.spend[look + 1]
        if look == self.screen_look:
            return min(1.0, self.screen_factor * level)
        return level * self.spend[min(look + 1, len(self.spend) - 1)]


# A fixed-n design with a confirmation: half the budget screens (no futility), the full budget decides.
SINGLE_LOOK = SequentialPlan(looks=(0.5, 1.0), spend=(0.0, 1.0), screen_look=0, screen_factor=math.inf, inflation=1.0)


@dataclass
class SequentialHypothesis:
    """One hypothesis followed across looks."""

    name: str
    level: float
    plan: SequentialPlan
    pvalues: list[float] = field(default_factory=list)
    details: list[dict] = field(default_factory=list)

    def update(self, pvalue: float, details: dict | None = None) -> None:
        self.pvalues.append(float(pvalue))
        self.details.append(details or {})

    def eligible(self, look: int) -> bool:
        return look >= 1 and self.pvalues[look - 1] <= self.plan.screen_level(look - 1, self.level)

    @property
    def sequential_pvalue(self) -> float:
        """min over eligible looks of p_k / SPEND[k]; 1 when no look was eligible."""
        best = 1.0
        for look, p in enumerate(self.pvalues):
            if self.plan.spend[look] > 0 and self.eligible(look):
                best = min(best, p / self.plan.spend[look])
        return min(1.0, best)

    @property
    def deciding_look(self) -> int | None:
        """The eligible look that gives the sequential p-value (None when none was eligible)."""
        best, where = 1.0, None
        for look, p in enumerate(self.pvalues):
            if self.plan.spend[look] > 0 and self.eligible(look) and p / self.plan.spend[look] < best:
                best, where = p / self.plan.spend[look], look
        return where

    def screening(self, look: int) -> bool:
        return self.pvalues[look] <= self.plan.screen_level(look, self.level)


class PairBettingTest:
    """Testing by betting for two samples of one categorical variable (anytime-valid, Ville).

    Samples arrive in pairs (x from the baseline, y from the candidate). Under the null the labels of
    a pair are exchangeable, so P(this labelling | {x, y}) = 1/2 and betting
        W <- W * 2 * pi, pi = predicted probability of the observed labelling,
    is a nonnegative martingale with mean 1: P(sup W >= 1/alpha) <= alpha. pi comes from add-half
    (Krichevsky-Trofimov) counts of earlier pairs only, shrunk toward 1/2 by half so one bad bet
    costs at most a factor 2 of wealth.
    """

    def __init__(self, cells: int) -> None:
        self.counts = np.full((2, cells), 0.5)
        self.log_wealth = 0.0
        self.max_log_wealth = 0.0
        self.pairs = 0

    def update(self, x: int, y: int) -> None:
        if x != y:
            pa = self.counts[0] / self.counts[0].sum()
            pb = self.counts[1] / self.counts[1].sum()
            observed = pa[x] * pb[y]
            swapped = pa[y] * pb[x]
            pi = 0.5 * 0.5 + 0.5 * observed / (observed + swapped)
            self.log_wealth += math.log(2 * pi)
            self.max_log_wealth = max(self.max_log_wealth, self.log_wealth)
        self.counts[0, x] += 1
        self.counts[1, y] += 1
        self.pairs += 1

    @property
    def pvalue(self) -> float:
        """Anytime-valid p-value 1 / sup W."""
        return float(min(1.0, math.exp(-self.max_log_wealth)))
