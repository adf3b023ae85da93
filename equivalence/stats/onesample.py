"""One-sample evidence: the candidate's samples against the baseline's exact probabilities (no baseline arm).

Where the baseline can score, its processed next-token distributions are known exactly, so the
candidate need not be compared with a second sample: per prompt, its counts in prefix bins fixed
from those probabilities (partition.probability_partition) are tested against the cells' exact
probabilities (Pearson goodness of fit), and the statistics are summed over prompts, so df and
noncentrality add and a shift whose direction changes from prompt to prompt still accumulates, as
in the two-sample gate. Per prompt the noncentrality is n sum (p1 - p0)^2 / p0 >= 4 n d^2 where the
two-sample gate has 2 n d^2 per arm (planner.py): half the candidate samples and no baseline arm, a
quarter of the requests for the same TV, alpha and power (docs/statistics.md: 2.6k vs 5.2k per arm).

Families (weighted Holm, as families.py): the gate `goodness_of_fit` keeps GATE_WEIGHT of alpha; with
whole-vocabulary scores the token families (randomised PIT by KS and AD, top-1 rate and log-likelihood
z-tests, stats/pit.py and stats/ztests.py) share the rest: pooled over tokens they see a consistent
sharpening or flattening (a temperature off by a few percent) at sizes where no per-prompt bin does,
and they never replace the per-prefix gate (they nearly miss direction-changing shifts).

The premise: the baseline samples exactly the distribution its scores describe under warp.py's
conventions. `control` runs the same families on the baseline's own samples, which
equivalence/distribution.py draws only after a rejection (see CONTROL_VETO there).
"""
from __future__ import annotations

from typing import Callable, Iterable, Protocol, Sequence

import numpy as np

from .chisquare import ChiSquareResult, goodness_of_fit, goodness_of_fit_stratum
from .families import GATE_WEIGHT, ArmSamples, FamilyResult, TokenStats, most_significant_prompts
from .partition import Partition, probability_partition

SCORED_GATE = "goodness_of_fit"
TOKEN_FAMILIES = ("pit_ks", "pit_ad", "top1_rate", "loglik_z")
# A cell is formed when its expected count at the final look is >= this (>= 5 at the half-budget screen);
# smaller expected counts are pooled at each look by the goodness of fit itself (chisquare.py).
MIN_CELL_EXPECTED = 10


class ExactSource(Protocol):
    """The baseline's exact processed probabilities: ProbabilityOracle, or a top-K source where it is exact."""

    def next_probs(self, prompt: int, prefix: Sequence[int]) -> np.ndarray: ...

    def prefix_prob(self, prompt: int, prefix: Sequence[int]) -> float: ...


def scored_weights(*, token_families: bool) -> dict[str, float]:
    """Holm weights of the one-sample design: the gate alone, or the gate and the token families."""
    if not token_families:
        return {SCORED_GATE: 1.0}
    return {SCORED_GATE: GATE_WEIGHT, **{n: (1 - GATE_WEIGHT) / len(TOKEN_FAMILIES) for n in TOKEN_FAMILIES}}


class ScoredArm:
    """One arm's samples of every prompt, counted in the fixed bins, with its token statistics."""

    def __init__(self, prompts: int) -> None:
        self.samples = [ArmSamples() for _ in range(prompts)]
        self.tokens = TokenStats()


class ScoredEvidence:
    """The candidate's samples of one setting, judged against the baseline's exact probabilities.

    `bins[i]` and `cell_probs[i]` are prompt i's fixed bins and their exact probabilities; `oracle`
    (a ProbabilityOracle over whole-vocabulary rows) enables the token families, None leaves the gate.
    """

    def __init__(self, *, bins: Sequence[Partition], cell_probs: Sequence[np.ndarray], oracle=None,
                 rng: np.random.Generator):
        self.bins = list(bins)
        self.cell_probs = [np.asarray(p, dtype=np.float64) for p in cell_probs]
        self.oracle = oracle
        self.rng = rng
        self.candidate = ScoredArm(len(self.bins))
        self.baseline_inconsistent: dict[str, float] = {}   # the two-sample Evidence's field: never set here

    @property
    def weights(self) -> dict[str, float]:
        return scored_weights(token_families=self.oracle is not None)

    def add(self, prompt: int, look: int, candidate: Sequence[Sequence[int]]) -> None:
        self._add(self.candidate, prompt, look, candidate)

    def _add(self, arm: ScoredArm, prompt: int, look: int, samples: Sequence[Sequence[int]]) -> None:
        kept = arm.samples[prompt]
        kept.sequences += [tuple(s) for s in samples]
        kept.looks += [look] * len(samples)
        if self.oracle is not None:
            self.oracle.ensure(prompt, samples)
            arm.tokens.add(self.oracle, prompt, samples, self.rng)

    def gate(self, *, since: int = 0) -> tuple[ChiSquareResult, list[Partition], list[np.ndarray]]:
        return self._gate(self.candidate, since=since)

    def _gate(self, arm: ScoredArm, *, since: int = 0) -> tuple[ChiSquareResult, list[Partition], list[np.ndarray]]:
        counts = [part.counts(s.since(since)) for part, s in zip(self.bins, arm.samples)]
        return goodness_of_fit(counts, self.cell_probs), self.bins, counts

    def evaluate(self) -> dict[str, FamilyResult]:
        return self._families(self.candidate)

    def control(self, samples: Sequence[Sequence[Sequence[int]]]) -> dict[str, FamilyResult]:
        """The same families on another arm's samples (per prompt): the baseline's own, to test the premise."""
        arm = ScoredArm(len(self.bins))
        for prompt, drawn in enumerate(samples):
            self._add(arm, prompt, 0, drawn)
        return self._families(arm)

    def _families(self, arm: ScoredArm) -> dict[str, FamilyResult]:
        gate, _, counts = self._gate(arm)
        out = {SCORED_GATE: FamilyResult(gate.pvalue, {"statistic": gate.statistic, "df": gate.df,
                                                       "samples": int(sum(c.sum() for c in counts))})}
        if self.oracle is None:
            return out
        out.update(arm.tokens.results())
        return out

    def prompt_report(self, *, decode: Callable[[Sequence[int]], str] | None, prompt_ids: Sequence[str],
                      limit: int = 5) -> list[dict]:
        """Per prompt: goodness-of-fit p-value, BH-adjusted p, flag, bins, counts and expected counts."""
        gate, bins, counts = self.gate()
        rows = []
        for i, shared in most_significant_prompts(gate.stratum_pvalues(), prompt_ids, limit):
            observed, probs = counts[i], self.cell_probs[i]
            n = max(int(observed.sum()), 1)
            stratum = goodness_of_fit_stratum(observed, probs)
            rows.append({
                **shared, "statistic": stratum.statistic, "df": stratum.df,
                "observed_tv": float(0.5 * np.abs(observed / n - probs).sum()),
                "bins": bins[i].describe(decode), "expected_counts": [round(float(p * n), 1) for p in probs],
                "candidate_counts": observed.tolist(),
            })
        return rows


def scored_evidence(source: ExactSource, *, prompts: int, tokens: int, samples: int, stop_ids: Iterable[int],
                    rng: np.random.Generator, oracle=None) -> "ScoredEvidence":
    """Fixed bins for every prompt, grown from `source` before any sample (`samples`: the final look's size)."""
    bins, probs = [], []
    stops = tuple(stop_ids)
    for prompt in range(prompts):
        part = probability_partition(lambda prefix, p=prompt: source.next_probs(p, prefix), max_depth=tokens,
                                     min_prob=MIN_CELL_EXPECTED / max(samples, 1), stop_ids=stops)
        bins.append(part)
        probs.append(part.probabilities(lambda prefix, p=prompt: source.prefix_prob(p, prefix)))
    return ScoredEvidence(bins=bins, cell_probs=probs, oracle=oracle, rng=rng)
