"""Near-tie flips per token: does the candidate leave the baseline's top-1 more often than the baseline leaves its own?

Why: a verifier at another precision (another kernel, bf16 against fp32) picks the runner-up token where the
baseline's top two are close. Each such split is excused one by one as a near-tie under --greedy-policy classify;
only their rate tells a noisier verifier from the noise the baseline itself has.

A *flip* is a position of a greedy answer whose token is not the baseline's one-pass top-1 for the same prefix:
the whole answer is teacher-forced through the baseline (one scoring request per answer) and every position is
compared, not only the first divergence. Both sides of the comparison are counted the same way on the same
requests (every greedy prompt of the run, the greedy check's own requests):
- A/A: the baseline's own greedy answers (incremental decoding against one-pass scoring, the "decode vs score"
  condition of the calibration, equivalence/calibration.py), M tokens, a flips;
- A/B: the candidate's answers to the same requests, N tokens, b flips.
Flips within tau (the calibrated margin) are near-ties and make the rate; flips above tau are counted apart (the
greedy check judges them as bugs).

The test is exact for two Poisson rates: given K = a + b flips, b ~ Binomial(K, N / (N + M)) when the rates are
equal; one-sided (the candidate flips more), at the run's alpha. Its power at a candidate rate r1 against the
A/A rate r0 sums over K ~ Poisson(r1 N + r0 M); the *minimum detectable rate* is the r1 reached with power 0.9,
taking r0 as the A/A count measured (a baseline that never flipped: r0 = 0). The family claims an excess of
DETECT_EXCESS flips per token over the baseline's own rate: a run whose exposure cannot see that is "not
verified", and the coverage row says the excess it could see.
Environment: none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from spec_route_suite.equivalence.calibration import argmax_flips, near_tie_excess
from spec_route_suite.equivalence.greedy_judge import SPLIT_ATTEMPTS
from spec_route_suite.routes.base import Completion
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import parity_repro

DETECT_EXCESS = 0.02   # claimed: two near-tie flips more per 100 tokens than the baseline's own rate
POWER = 0.9
TOP_K = 5
COULD_DETECT = "a candidate leaving the baseline's top-1 at near-ties more often than the baseline does itself"


@dataclass(frozen=True)
class Flips:
    """One side's exposure: tokens teacher-forced, flips within tau (near-ties), flips above tau."""

    tokens: int = 0
    near_ties: int = 0
    large: int = 0

    def __add__(self, other: "Flips") -> "Flips":
        return Flips(self.tokens + other.tokens, self.near_ties + other.near_ties, self.large + other.large)

    @property
    def rate(self) -> float:
        return self.near_ties / self.tokens if self.tokens else 0.0

    def phrase(self) -> str:
        return f"{self.near_ties} near-tie flip(s) in {self.tokens} tokens" + (
            f" (+{self.large} above tau)" if self.large else "")


def flips_of(*, tokens: Sequence[int], scored, tau: float) -> Flips:
    """Count flips of `tokens` against the baseline's teacher-forced top lists (`scored`, one per token)."""
    margins = [margin for _, margin in argmax_flips(tokens=tokens, scored=scored)]
    near = sum(1 for margin in margins if margin <= tau)
    return Flips(tokens=min(len(tokens), len(scored)), near_ties=near, large=len(margins) - near)


def answer_flips(baseline, prompt_ids: Sequence[int], answer: Completion, *, tau: float) -> Flips:
    """Teacher-force one greedy answer through `baseline` (a RouteHandle) and count its flips."""
    if not answer.token_ids:
        return Flips()
    scored = baseline.score(tuple(prompt_ids), tuple(answer.token_ids), TOP_K)
    return flips_of(tokens=answer.token_ids, scored=scored, tau=tau)


@dataclass
class Exposure:
    """Both sides' flips over a run's greedy requests, the answers left out, and the requests the candidate split on."""

    aa: Flips = Flips()
    candidate: Flips = Flips()
    text_level: int = 0                          # answers without token ids: re-tokenized text, not chosen tokens
    splits: list = field(default_factory=list)   # (request, baseline answer, candidate answer) with a near-tie flip

    def add(self, baseline, req, expected: Completion, actual: Completion, *, tau: float) -> None:
        """One greedy request's two answers (each route's own), teacher-forced through `baseline`."""
        if expected.text_level or actual.text_level:
            self.text_level += 1
            return
        self.aa += answer_flips(baseline, req.prompt_ids, expected, tau=tau)
        flips = answer_flips(baseline, req.prompt_ids, actual, tau=tau)
        self.candidate += flips
        if flips.near_ties:
            self.splits.append((req, expected, actual))


def excess_pvalue(*, candidate: Flips, aa: Flips) -> float | None:
    """One-sided exact p-value that the candidate's near-tie rate exceeds the A/A rate; None without exposure."""
    return near_tie_excess(ab_near_ties=candidate.near_ties, ab_tokens=candidate.tokens, aa_near_ties=aa.near_ties,
                           aa_tokens=aa.tokens)


def power(*, candidate_rate: float, aa_rate: float, candidate_tokens: int, aa_tokens: int, alpha: float) -> float:
    """Probability that the test rejects at `alpha` when the candidate flips at `candidate_rate` per token and the
    baseline at `aa_rate`, over these exposures (Poisson counts)."""
    import numpy as np
    from scipy import stats
    if candidate_tokens <= 0 or aa_tokens <= 0:
        return 0.0
    lam_b, lam_a = candidate_rate * candidate_tokens, aa_rate * aa_tokens
    lam = lam_a + lam_b
    if lam <= 0:
        return 0.0
    share = candidate_tokens / (candidate_tokens + aa_tokens)
    totals = np.arange(int(stats.poisson.isf(1e-12, lam)) + 2)
    critical = stats.binom.isf(alpha, totals, share)       # reject when the candidate's count exceeds it
    return float(np.sum(stats.poisson.pmf(totals, lam) * stats.binom.sf(critical, totals, lam_b / lam)))


def min_detectable_rate(*, aa_rate: float, candidate_tokens: int, aa_tokens: int, alpha: float,
                        target: float = POWER) -> float:
    """The smallest candidate near-tie rate per token seen with power `target` (inf without exposure)."""
    from scipy.optimize import brentq
    if candidate_tokens <= 0 or aa_tokens <= 0:
        return math.inf

    def short_of_target(rate: float) -> float:   # rises with the rate: the Poisson sums are smooth in it
        return power(candidate_rate=rate, aa_rate=aa_rate, candidate_tokens=candidate_tokens, aa_tokens=aa_tokens,
                     alpha=alpha) - target
    if short_of_target(1.0) < 0:
        return math.inf
    return float(brentq(short_of_target, aa_rate, 1.0, xtol=1e-7)) + 1e-7   # the side where power >= target


@dataclass(frozen=True)
class RateVerdict:
    """The comparison of one candidate with the baseline's A/A exposure at the run's alpha."""

    candidate: Flips
    aa: Flips
    alpha: float
    p_value: float | None
    detectable_excess: float   # the excess over the A/A rate this exposure sees with POWER (inf: none)

    @classmethod
    def of(cls, *, candidate: Flips, aa: Flips, alpha: float) -> "RateVerdict":
        rate = min_detectable_rate(aa_rate=aa.rate, candidate_tokens=candidate.tokens, aa_tokens=aa.tokens,
                                   alpha=alpha)
        return cls(candidate=candidate, aa=aa, alpha=alpha, p_value=excess_pvalue(candidate=candidate, aa=aa),
                   detectable_excess=rate - aa.rate)

    @property
    def powered(self) -> bool:
        """This exposure sees the claimed excess with POWER."""
        return self.detectable_excess <= DETECT_EXCESS

    @property
    def excess(self) -> bool:
        return self.p_value is not None and self.p_value < self.alpha

    def could_detect(self) -> str:
        seen = ("no excess (no exposure)" if not math.isfinite(self.detectable_excess) else
                f"an excess of {1000 * self.detectable_excess:.1f} near-tie flips per 1000 tokens")
        return (f"a candidate leaving the baseline's top-1 at near-ties more often than the baseline does itself (a "
                f"verifier at another precision): {seen} over the baseline's own rate ({self.aa.phrase()}), power "
                f"{POWER:g} at alpha {self.alpha:g}, with {self.candidate.tokens} candidate tokens")

    def shortfall(self) -> str:
        """Why the run does not verify the family ('' when it does)."""
        if self.powered:
            return ""
        if not self.candidate.tokens or not self.aa.tokens:
            return (f"no exposure: {self.candidate.tokens} candidate tokens and {self.aa.tokens} baseline tokens "
                    f"teacher-forced")
        return (f"the exposure ({self.candidate.tokens} candidate tokens, {self.aa.tokens} baseline tokens) sees an "
                f"excess of {1000 * self.detectable_excess:.1f} near-tie flips per 1000 tokens with power {POWER:g}, "
                f"above the {1000 * DETECT_EXCESS:g} per 1000 this family claims (more greedy prompts, or longer "
                f"answers, give it more)")


def record_rates(findings, rates: RateVerdict, exposure: Exposure, *, calibration, baseline: str,
                 candidate: str) -> None:
    """The near-tie test's records: its coverage row, the rates, the calibration they rest on and the p-value."""
    aa, ab, text_level = exposure.aa, exposure.candidate, exposure.text_level
    shortfall = rates.shortfall() + (f"; {text_level} answer(s) without token ids (text-level) not counted"
                                     if text_level else "")
    findings.cover("near-tie", candidate, verified=rates.powered,
                   ran={"candidate tokens teacher-forced": ab.tokens, "baseline tokens teacher-forced": aa.tokens},
                   could_detect=rates.could_detect(), reason=shortfall if not rates.powered else "")
    findings.measure("near_tie_rate", route=candidate, baseline=baseline, tau=calibration.tau,
                     candidate_tokens=ab.tokens, candidate_near_ties=ab.near_ties, candidate_large_flips=ab.large,
                     aa_tokens=aa.tokens, aa_near_ties=aa.near_ties, aa_large_flips=aa.large, p_value=rates.p_value,
                     detectable_excess=rates.detectable_excess, claimed_excess=DETECT_EXCESS, alpha=rates.alpha,
                     text_level_answers=text_level)
    findings.measure("calibration", route=baseline, tau=calibration.tau, noise=calibration.noise,
                     logprob_tol=calibration.logprob_tol, compared=calibration.compared,
                     aa_flips=calibration.aa_flips, aa_tokens=calibration.aa_tokens,
                     seconds=calibration.seconds, notes=list(calibration.notes), candidate=candidate)
    if rates.p_value is not None and ab.near_ties + aa.near_ties > 0:
        findings.measure("p_value", p_value=rates.p_value,
                         name="near-tie excess (candidate vs the baseline's own flips)")


def excess_finding(rates: RateVerdict, exposure: Exposure, *, calibration, policy: str, baseline,
                   candidate) -> Finding | None:
    """The finding of a candidate that flips at near-ties more often than the baseline does itself (None without an
    excess): a bug under --greedy-policy classify, where the greedy checks excuse each near-tie and this rate is the
    only sign left; a warning under strict, where every split already fails."""
    if not rates.excess:
        return None
    aa, ab, splits = exposure.aa, exposure.candidate, exposure.splits
    title = (f"candidate '{candidate.name}' leaves the baseline's top-1 at near-ties more often than baseline "
             f"'{baseline.name}' does itself: {ab.near_ties} in {ab.tokens} tokens vs {aa.near_ties} in {aa.tokens} "
             f"(exact test p={rates.p_value:.2g})")
    return Finding(
        check="near-tie", severity="bug" if policy == "classify" else "warning", route=candidate.name, title=title,
        details={"diff": f"candidate: {ab.phrase()}; baseline against itself: {aa.phrase()}",
                 "p_value": rates.p_value, "alpha": rates.alpha, "calibration": calibration.describe(),
                 "could_detect": rates.could_detect(), "policy": policy,
                 "hint": "the verifier may run at a different precision or kernel than the baseline",
                 "repro": parity_repro([r for r, _, _ in splits[:3]], candidate=candidate, baseline=baseline,
                                       expected=[e for _, e, _ in splits[:3]], actual=[a for _, _, a in splits[:3]],
                                       attempts=SPLIT_ATTEMPTS) if splits else None})
