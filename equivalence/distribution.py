"""Sampling-distribution check: does the candidate sample from the baseline's distribution?

Two designs decide one sampling setting, each sampling in looks (chunks) with independent seed
streams, recomputing every test family after each look; weighted Holm decides, and the sequential
plan (stats/sequential.py) stops early when a failure is confirmed on fresh samples or when nothing
is suspicious at half the budget:
- scoring (`run_scored_check`), where the baseline can score: the candidate's samples alone against
  the baseline's exact probabilities (stats/onesample.py), a quarter of the two-sample requests;
- two-sample (`run_check`): both routes sample, their counts are compared (stats/families.py).
`run_distribution` runs the scoring design when it is given one and falls back to the two-sample
design when the baseline's own samples show that its scores do not describe its sampler. The loops
see only `Arm`s (draw n samples), so the same code runs on routes (distribution_routes.py) and on
the synthetic sampler in the calibration self-tests and the power benchmark.

The scoring design's premise is that the baseline samples what its scores say under warp.py's
conventions (transformers' hidden default top_k=50 once broke it). A candidate rejection stands only
when the baseline's own samples, CONTROL_MULTIPLE times as many per prompt on fresh seeds, do not fail
the same family at CONTROL_VETO; otherwise the setting is judged again by the two-sample design on
fresh samples, and both results are reported. With a true premise this costs nothing on a correct
route (the control is drawn only after a rejection), 95% of a fault's rejections stand at once and
the rest go to the two-sample design; a fault then costs about as many requests as two-sample
sampling would (control included). With a broken premise a correct candidate is failed at most
0.6-1.0% of the time per setting (the worst size of departure: noncentral chi-square at the gate's
level, df 18-180), where the unguarded one-sample test would fail it up to always.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from spec_route_suite.equivalence.stats.families import GATE, Evidence, family_weights
from spec_route_suite.equivalence.stats.multiple import holm
from spec_route_suite.equivalence.stats.onesample import SCORED_GATE, ScoredEvidence
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.planner import Budget
from spec_route_suite.equivalence.stats.sequential import SequentialHypothesis, SequentialPlan
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.progress import track

# The sampling grid: plain sampling; the truncated setting where top-k/top-p bugs live; a high
# temperature, where temperature-handling bugs are largest and a sharp model still has entropy to
# show (on the embedded pair, "draft ignores temperature" moves 6-15% TV per prompt at T=1.5 and
# 1-5% at T=0.7); and min_p with a small top_k at a high temperature, the only place the pair's tail
# is heavy enough for them to act (at T=1.0 min_p 0.05 and top_k 20 drop < 0.1% of the first
# token's mass, at T=1.5 2.6% and 1.0%). min_p is a request feature, probed per route; a route that
# refuses it runs this point without it (equivalence/test_distribution.py).
GRID = (SamplingSetting("T1.0", 1.0), SamplingSetting("T0.7-p0.9-k50", 0.7, top_p=0.9, top_k=50),
        SamplingSetting("T1.5", 1.5), SamplingSetting("T1.6-k20-m0.05", 1.6, top_k=20, min_p=0.05))
POWER = 0.9
ARM_KEYS = {"baseline": 1, "candidate": 2, "pit": 3, "control": 4, "fallback": 5}
MAX_SEED = 2 ** 63 - 1
SCORING, TWO_SAMPLE = "scoring", "two-sample"
# The premise control after a scoring rejection: the baseline's own samples, this many times the
# candidate's per prompt; a rejected family whose control p-value is <= CONTROL_VETO is vetoed.
CONTROL_MULTIPLE = 3
CONTROL_VETO = 0.05


class Arm(Protocol):
    """One side of the comparison: draws samples of a prompt at a setting with a given seed (an arm may also
    offer `draw_many(setting, [(prompt, n, seed), ...])`, the same draws taken together: `draw_look`)."""

    name: str
    serial: bool

    def draw(self, prompt: int, setting: SamplingSetting, n: int, seed: int) -> list[tuple[int, ...]]: ...


def stream_seed(run_seed: int, *keys: int) -> int:
    """An independent 63-bit seed per (arm, setting, prompt, look): SeedSequence spawn keys."""
    state = np.random.SeedSequence(run_seed, spawn_key=tuple(int(k) for k in keys)).generate_state(2, np.uint64)
    return int(state[0]) & MAX_SEED


def draw_look(arm: Arm, setting: SamplingSetting, prompts: int, n: int, *, seed: int, arm_key: int,
              look: int) -> list[list[tuple[int, ...]]]:
    """One look's n samples per prompt from one arm, each prompt on its own seed stream; an arm that can
    (`draw_many`) draws every prompt in one go, so they share its engine's batch."""
    jobs = [(prompt, n, stream_seed(seed, arm_key, setting_key(setting), prompt, look)) for prompt in range(prompts)]
    draw_many = getattr(arm, "draw_many", None)
    if draw_many is not None:
        return draw_many(setting, jobs)
    return [arm.draw(prompt, setting, size, job_seed) for prompt, size, job_seed in jobs]


def setting_key(setting: SamplingSetting) -> int:
    return zlib.crc32(setting.name.encode())


def setting_alpha(alpha: float) -> float:
    """Each grid setting is its own test module item: Bonferroni across the grid."""
    return alpha / len(GRID)


@dataclass
class CheckResult:
    """Everything a finding needs: per-family p-values by look, Holm decisions, budget, samples, design."""

    setting: SamplingSetting
    budget: Budget
    plan: SequentialPlan
    alpha: float
    weights: dict[str, float]
    hypotheses: dict[str, SequentialHypothesis]
    adjusted: dict[str, float]
    rejected: dict[str, bool]
    look_sizes: tuple[int, ...]
    looks_done: int
    stopped: str
    evidence: Evidence | ScoredEvidence = field(repr=False)
    design: str = TWO_SAMPLE
    gate: str = GATE
    control: dict[str, float] = field(default_factory=dict)   # scoring: the baseline's own p-values after a rejection
    control_samples: int = 0                                  # per prompt
    vetoed: bool = False           # every rejection vetoed by the control: the scores do not describe the baseline
    superseded: "CheckResult | None" = None                   # the scoring result a two-sample fallback replaced

    @property
    def failed(self) -> bool:
        return any(self.rejected.values()) and not self.vetoed

    def standing(self) -> list[str]:
        """The rejected families the premise control did not veto (all rejected ones under two-sample)."""
        return [n for n, r in self.rejected.items() if r and self.control.get(n, 1.0) > CONTROL_VETO]

    @property
    def samples_used(self) -> int:
        """Per arm, per prompt."""
        return self.look_sizes[self.looks_done - 1] if self.looks_done else 0

    @property
    def arms(self) -> int:
        return 1 if self.design == SCORING else 2

    def requests(self) -> int:
        """Samples drawn for this verdict (both arms, the control, and a superseded scoring run)."""
        own = self.arms * self.samples_used * self.budget.prompts + self.control_samples * self.budget.prompts
        return own + (self.superseded.requests() if self.superseded is not None else 0)

    def family_report(self, name: str) -> dict:
        hyp = self.hypotheses[name]
        look = hyp.deciding_look
        return {
            "level": hyp.level, "pvalues_by_look": hyp.pvalues, "sequential_p": hyp.sequential_pvalue,
            "holm_adjusted": self.adjusted[name], "rejected": self.rejected[name],
            "screen_p": hyp.pvalues[look - 1] if look else None, "confirm_p": hyp.pvalues[look] if look else None,
            "deciding_look": look, "details": hyp.details[-1] if hyp.details else {},
            **({"baseline_control_p": self.control[name]} if name in self.control else {}),
        }

    def fresh_gate_pvalue(self) -> float | None:
        """The gate on the samples drawn after the screening look only (fresh, independent of the screen)."""
        look = self.hypotheses[self.gate].deciding_look
        return None if look is None else self.evidence.gate(since=look)[0].pvalue


def _sequential(*, weights: dict[str, float], alpha: float, plan: SequentialPlan, sizes: tuple[int, ...],
                draw: Callable[[int, int], None], evaluate: Callable[[], dict]) -> dict:
    """The look loop both designs share: draw, recompute every family, weighted Holm, stop rules."""
    hypotheses = {name: SequentialHypothesis(name, alpha * w, plan) for name, w in weights.items()}
    names = list(weights)
    adjusted = {n: 1.0 for n in names}
    rejected = {n: False for n in names}
    stopped, done, drawn = "budget exhausted", 0, 0
    for look, size in enumerate(sizes):
        draw(look, size - drawn)
        drawn, done = size, look + 1
        for name, result in evaluate().items():
            hypotheses[name].update(result.pvalue, result.details)
        flags, adj = holm([hypotheses[n].sequential_pvalue for n in names], alpha=alpha,
                          weights=[weights[n] for n in names])
        adjusted = dict(zip(names, map(float, adj)))
        rejected = dict(zip(names, map(bool, flags)))
        if any(rejected.values()):
            stopped = f"rejected at look {done} of {len(sizes)}"
            break
        if look == plan.screen_look and not any(h.screening(look) for h in hypotheses.values()):
            stopped = f"passed at look {done} of {len(sizes)} (nothing suspicious: futility stop)"
            break
    return dict(hypotheses=hypotheses, adjusted=adjusted, rejected=rejected, looks_done=done, stopped=stopped)


def run_check(*, baseline: Arm, candidate: Arm, prompts: int, setting: SamplingSetting, budget: Budget,
              alpha: float, seed: int, oracle: ProbabilityOracle | None = None,
              plan: SequentialPlan = SequentialPlan()) -> CheckResult:
    """The two-sample design: both arms sample in looks until a confirmed rejection, futility, or the budget's end."""
    weights = family_weights(scored=oracle is not None)
    evidence = Evidence(prompts=prompts, tokens=budget.tokens, oracle=oracle,
                        rng=np.random.default_rng(stream_seed(seed, ARM_KEYS["pit"], setting_key(setting))))
    sizes = plan.look_sizes(budget.samples_per_prompt)
    with track(f"distribution {setting.name} (at most)", 2 * prompts * sizes[-1]) as progress:
        def draw(look: int, n: int) -> None:
            a = draw_look(baseline, setting, prompts, n, seed=seed, arm_key=ARM_KEYS["baseline"], look=look)
            b = draw_look(candidate, setting, prompts, n, seed=seed, arm_key=ARM_KEYS["candidate"], look=look)
            progress.advance(2 * prompts * n)
            for prompt in range(prompts):
                evidence.add(prompt, look, a[prompt], b[prompt])
        state = _sequential(weights=weights, alpha=alpha, plan=plan, sizes=sizes, draw=draw, evaluate=evidence.evaluate)
    return CheckResult(setting=setting, budget=budget, plan=plan, alpha=alpha, weights=weights, look_sizes=sizes,
                       evidence=evidence, **state)


def run_scored_check(*, baseline: Arm, candidate: Arm, evidence: ScoredEvidence, setting: SamplingSetting,
                     budget: Budget, alpha: float, seed: int, plan: SequentialPlan = SequentialPlan()) -> CheckResult:
    """The scoring design: the candidate alone samples in looks, judged against the baseline's probabilities;
    a rejection is then put to the premise control (the baseline's own samples, `baseline` arm)."""
    prompts = len(evidence.bins)
    weights = evidence.weights
    sizes = plan.look_sizes(budget.samples_per_prompt)
    with track(f"distribution {setting.name} (at most)", prompts * sizes[-1]) as progress:
        def draw(look: int, n: int) -> None:
            for prompt, samples in enumerate(draw_look(candidate, setting, prompts, n, seed=seed,
                                                       arm_key=ARM_KEYS["candidate"], look=look)):
                evidence.add(prompt, look, samples)
            progress.advance(prompts * n)
        state = _sequential(weights=weights, alpha=alpha, plan=plan, sizes=sizes, draw=draw, evaluate=evidence.evaluate)
    result = CheckResult(setting=setting, budget=budget, plan=plan, alpha=alpha, weights=weights, look_sizes=sizes,
                         evidence=evidence, design=SCORING, gate=SCORED_GATE, **state)
    if any(result.rejected.values()):
        _premise_control(result, baseline, seed=seed)
    return result


def _premise_control(result: CheckResult, baseline: Arm, *, seed: int) -> None:
    """The baseline's own samples through the same families: a rejected family they fail too is vetoed."""
    n = CONTROL_MULTIPLE * result.samples_used
    setting, evidence = result.setting, result.evidence
    drawn = [baseline.draw(prompt, setting, n, stream_seed(seed, ARM_KEYS["control"], setting_key(setting), prompt))
             for prompt in range(len(evidence.bins))]
    own = evidence.control(drawn)
    result.control = {name: own[name].pvalue for name in result.rejected if name in own}
    result.control_samples = n
    result.vetoed = not result.standing()


def run_distribution(*, baseline: Arm, candidate: Arm, prompts: int, setting: SamplingSetting, alpha: float,
                     seed: int, two_sample: Budget, plan: SequentialPlan = SequentialPlan(),
                     scoring: "Callable[[], tuple[ScoredEvidence, Budget]] | None" = None,
                     oracle: ProbabilityOracle | None = None) -> CheckResult:
    """One setting's verdict: the scoring design when `scoring()` gives its evidence and budget, the two-sample
    design otherwise or when the premise control vetoed the scoring design's rejection (then on fresh seeds)."""
    if scoring is not None:
        evidence, budget = scoring()
        result = run_scored_check(baseline=baseline, candidate=candidate, evidence=evidence, setting=setting,
                                  budget=budget, alpha=alpha, seed=seed, plan=plan)
        if not result.vetoed:
            return result
        fallback = run_check(baseline=baseline, candidate=candidate, prompts=prompts, setting=setting,
                             budget=two_sample, alpha=alpha, seed=stream_seed(seed, ARM_KEYS["fallback"]),
                             oracle=oracle, plan=plan)
        fallback.superseded = result
        return fallback
    return run_check(baseline=baseline, candidate=candidate, prompts=prompts, setting=setting, budget=two_sample,
                     alpha=alpha, seed=seed, oracle=oracle, plan=plan)
