"""The test families of one sampling setting, computed from both arms' samples after each look.

Families and what they are for (docs/statistics.md):
- two_sample_chisquare (the gate): summed per-prompt chi-square on prefix bins; sees any shift.
- goodness_of_fit: candidate counts against the baseline's exact bin probabilities (needs scoring).
- pit_ks, pit_ad: randomised PIT of every candidate token against Uniform(0,1).
- top1_rate, loglik_z: z-tests for sharpening/flattening.
- length_two_sample, loglik_two_sample: sequence-level two-sample tests.
The gate keeps GATE_WEIGHT of the run's alpha in the weighted Holm; the others share the rest, so a
diagnostic family can add a finding but costs the gate only ~10% in sample size.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .chisquare import ChiSquareResult, goodness_of_fit, two_sample_chisquare, two_sample_stratum
from .multiple import benjamini_hochberg
from .oracle import ProbabilityOracle
from .partition import MAX_CELLS, MIN_POOLED_COUNT, Partition, build_partition
from .pit import uniformity
from .twosample import length_test, loglik_ks
from .ztests import TokenZTests

GATE = "two_sample_chisquare"
ALWAYS = (GATE, "length_two_sample")
SCORED = ("goodness_of_fit", "pit_ks", "pit_ad", "top1_rate", "loglik_z", "loglik_two_sample")
# Most of alpha to the gate, the one family that catches every fault; at 0.8 the gate's sample size
# grows by ~10% over a gate alone at the same alpha (planner.required_noncentrality ratio).
GATE_WEIGHT = 0.8
# GoF bins are built from the baseline arm alone: a count >= 10 keeps n * p0 near >= 10 per bin.
GOF_MIN_COUNT = MIN_POOLED_COUNT
# BH level for naming the prompts that carry a rejection (a pointer, not a verdict).
POINTER_FDR = 0.1
# The baseline's own samples must pass each score-based family at this level for that family to be
# trusted on the candidate: a baseline warning on a correct engine has probability ~5 x .001 per run.
BASELINE_CHECK_LEVEL = 0.001


def most_significant_prompts(pvalues: np.ndarray, prompt_ids: Sequence[str], limit: int) -> list[tuple[int, dict]]:
    """The `limit` prompts with the smallest p-values, most significant first: (index, the report row's fields
    every design shares: prompt id, p-value, BH-adjusted p and its flag at POINTER_FDR)."""
    flagged, adjusted = benjamini_hochberg(pvalues, q=POINTER_FDR)
    return [(i, {"prompt_id": prompt_ids[i], "pvalue": float(pvalues[i]), "bh_adjusted": float(adjusted[i]),
                 "flagged": bool(flagged[i])})
            for i in np.argsort(pvalues, kind="stable")[:limit]]


def family_weights(*, scored: bool) -> dict[str, float]:
    """Holm weights of the families a run can compute."""
    others = [n for n in (*ALWAYS, *(SCORED if scored else ())) if n != GATE]
    return {GATE: GATE_WEIGHT, **{n: (1 - GATE_WEIGHT) / len(others) for n in others}}


@dataclass(frozen=True)
class FamilyResult:
    pvalue: float
    details: dict


@dataclass
class ArmSamples:
    """One arm's samples of one prompt, with the look each sample came from."""

    sequences: list[tuple[int, ...]] = field(default_factory=list)
    looks: list[int] = field(default_factory=list)
    logliks: list[float] = field(default_factory=list)

    def since(self, look: int) -> list[tuple[int, ...]]:
        return [s for s, k in zip(self.sequences, self.looks) if k >= look]


class TokenStats:
    """One arm's randomised PIT values and z-test sums, judged against the baseline's probabilities."""

    def __init__(self) -> None:
        self.pit: list[float] = []
        self.ztests = TokenZTests()

    def add(self, oracle: ProbabilityOracle, prompt: int, sequences: Sequence[Sequence[int]],
            rng: np.random.Generator) -> None:
        # Work per distinct (prefix, token) pair, weighted by its count: samples repeat a lot.
        pairs: Counter[tuple[tuple[int, ...], int]] = Counter()
        for seq, count in Counter(tuple(s) for s in sequences).items():
            for t, token in enumerate(seq):
                pairs[(seq[:t], token)] += count
        for (prefix, token), count in pairs.items():
            summary = oracle.summary(prompt, prefix)
            self.ztests.add(summary, token, count=count)
            self.pit.extend(summary.mass_before[token] + rng.random(count) * summary.probs[token])


    def results(self) -> dict[str, "FamilyResult"]:
        """The token families: PIT by KS and AD, the top-1 rate and log-likelihood z-tests."""
        uniform = uniformity(self.pit)
        top1, loglik = self.ztests.top1.result(), self.ztests.loglik.result()
        violations = {"support_violations": self.ztests.support_violations}
        return {
            "pit_ks": FamilyResult(uniform.ks_pvalue, {"statistic": uniform.ks_statistic, "tokens": uniform.n,
                                                       "mean_pit": uniform.mean, **violations}),
            "pit_ad": FamilyResult(uniform.ad_pvalue, {"statistic": uniform.ad_statistic, "tokens": uniform.n,
                                                       **violations}),
            "top1_rate": FamilyResult(top1.pvalue, {"z": top1.z, "observed": top1.observed,
                                                    "expected": top1.expected, "tokens": top1.n}),
            "loglik_z": FamilyResult(loglik.pvalue, {"z": loglik.z, "observed": loglik.observed,
                                                     "expected": loglik.expected, "tokens": loglik.n}),
        }


class Evidence:
    """Both arms' samples of every prompt of one setting, and both arms' per-token statistics.

    The score-based families assume the baseline samples exactly the processed distribution computed
    from its logprobs (temperature, top-k, top-p as the Request says). The baseline's own samples test
    that assumption, independently of the candidate's: when they fail it at BASELINE_CHECK_LEVEL, the
    score-based families are not evaluated (p = 1) and `baseline_inconsistent` names what failed,
    since a candidate that matches such a baseline would be flagged for the baseline's fault.
    """

    def __init__(self, *, prompts: int, tokens: int, oracle: ProbabilityOracle | None, rng: np.random.Generator):
        self.tokens = tokens
        self.oracle = oracle
        self.rng = rng
        self.baseline = [ArmSamples() for _ in range(prompts)]
        self.candidate = [ArmSamples() for _ in range(prompts)]
        self.candidate_tokens = TokenStats()
        self.baseline_tokens = TokenStats()
        self.baseline_inconsistent: dict[str, float] = {}
        self._logliks: dict[tuple[int, tuple[int, ...]], float] = {}

    def add(self, prompt: int, look: int, baseline: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]]) -> None:
        base, cand = self.baseline[prompt], self.candidate[prompt]
        base.sequences += [tuple(s) for s in baseline]
        base.looks += [look] * len(baseline)
        cand.sequences += [tuple(s) for s in candidate]
        cand.looks += [look] * len(candidate)
        if self.oracle is None:
            return
        self.oracle.ensure(prompt, [*candidate, *baseline])
        self.candidate_tokens.add(self.oracle, prompt, candidate, self.rng)
        self.baseline_tokens.add(self.oracle, prompt, baseline, self.rng)
        cand.logliks += [self._loglik(prompt, tuple(s)) for s in candidate]
        base.logliks += [self._loglik(prompt, tuple(s)) for s in baseline]

    def _loglik(self, prompt: int, seq: tuple[int, ...]) -> float:
        key = (prompt, seq)
        if key not in self._logliks:
            self._logliks[key] = self.oracle.raw_loglik(prompt, seq)
        return self._logliks[key]

    def gate_partitions(self) -> list[Partition]:
        """Label-blind bins: each prompt's pooled samples with the arm labels dropped."""
        return [build_partition(b.sequences + c.sequences, max_depth=self.tokens)
                for b, c in zip(self.baseline, self.candidate)]

    def gate(self, *, since: int = 0) -> tuple[ChiSquareResult, list[Partition], list[np.ndarray]]:
        partitions = self.gate_partitions() if since == 0 else [
            build_partition(b.since(since) + c.since(since), max_depth=self.tokens)
            for b, c in zip(self.baseline, self.candidate)]
        tables = []
        for part, b, c in zip(partitions, self.baseline, self.candidate):
            tables.append(np.vstack([part.counts(b.since(since)), part.counts(c.since(since))]))
        return two_sample_chisquare(tables), partitions, tables

    def evaluate(self) -> dict[str, FamilyResult]:
        gate, _, _ = self.gate()
        lengths = length_test([[len(s) for s in b.sequences] for b in self.baseline],
                              [[len(s) for s in c.sequences] for c in self.candidate])
        out = {
            GATE: FamilyResult(gate.pvalue, {"statistic": gate.statistic, "df": gate.df}),
            "length_two_sample": FamilyResult(lengths.pvalue, {"statistic": lengths.statistic, "df": lengths.df}),
        }
        if self.oracle is not None:
            out.update(self._scored())
        return out

    def _scored(self) -> dict[str, FamilyResult]:
        ll_stat, ll_p = loglik_ks([x for b in self.baseline for x in b.logliks],
                                  [x for c in self.candidate for x in c.logliks], rng=self.rng)
        out = {"loglik_two_sample": FamilyResult(ll_p, {"statistic": ll_stat})}
        check = self._against_probabilities(self.baseline_tokens, tested=self.baseline, bins_from=self.candidate)
        self.baseline_inconsistent = {name: r.pvalue for name, r in check.items() if r.pvalue <= BASELINE_CHECK_LEVEL}
        tested = self._against_probabilities(self.candidate_tokens, tested=self.candidate, bins_from=self.baseline)
        if self.baseline_inconsistent:
            note = {"not_evaluated": "the baseline's own samples fail this family",
                    "baseline_pvalues": self.baseline_inconsistent}
            tested = {name: FamilyResult(1.0, {**r.details, **note}) for name, r in tested.items()}
        return {**out, **tested}

    def _against_probabilities(self, tokens: TokenStats, *, tested: list[ArmSamples],
                               bins_from: list[ArmSamples]) -> dict[str, FamilyResult]:
        """One arm's samples against the baseline's exact probabilities; GoF bins come from the other arm."""
        oracle = self.oracle
        counts, probs = [], []
        for prompt, (ref, arm) in enumerate(zip(bins_from, tested)):
            part = build_partition(ref.sequences, max_depth=self.tokens, min_count=GOF_MIN_COUNT, max_cells=MAX_CELLS)
            oracle.ensure(prompt, [node for node, _, _ in part.nodes if node])
            probs.append(part.probabilities(lambda prefix, p=prompt: oracle.prefix_prob(p, prefix)))
            counts.append(part.counts(arm.sequences))
        gof = goodness_of_fit(counts, probs)
        return {"goodness_of_fit": FamilyResult(gof.pvalue, {"statistic": gof.statistic, "df": gof.df}),
                **tokens.results()}

    def prompt_report(self, *, decode: Callable[[Sequence[int]], str] | None, prompt_ids: Sequence[str],
                      limit: int = 5) -> list[dict]:
        """Per prompt: gate p-value, BH-adjusted p, flag, bins and counts; most significant first."""
        gate, partitions, tables = self.gate()
        rows = []
        for i, shared in most_significant_prompts(gate.stratum_pvalues(), prompt_ids, limit):
            table = tables[i]
            totals = table.sum(axis=1, keepdims=True).clip(min=1)
            stratum = two_sample_stratum(table)
            rows.append({
                **shared, "statistic": stratum.statistic, "df": stratum.df,
                "observed_tv": float(0.5 * np.abs(table[0] / totals[0] - table[1] / totals[1]).sum()),
                "bins": partitions[i].describe(decode), "baseline_counts": table[0].tolist(),
                "candidate_counts": table[1].tolist(),
            })
        return rows
