"""One route verdict of the distribution check against a baseline with exact scores, either design.

The calibration self-tests and the power benchmark judge arms of the synthetic sampler (or routes) whose
baseline is an exact `Scorer` (stats/oracle.py): this is the route suite's decision for them, setting
by setting (each at alpha / len(GRID) unless told), stopping at the first failing setting as a run
reports it. `design` picks the scoring test (with its premise control and two-sample fallback) or
the two-sample test alone, at budgets planned for `detect_tv` (or `samples` per prompt) at power 0.9.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from spec_route_suite.equivalence.distribution import (GRID, SCORING, CheckResult, run_check, run_distribution,
                                                        setting_alpha)
from spec_route_suite.equivalence.distribution_plan import budget_for, scoring_builder
from spec_route_suite.equivalence.stats.onesample import SCORED_GATE, scored_weights
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.equivalence.stats.warp import SamplingSetting


@dataclass
class ExactBaseline:
    """An exact scorer's oracles per setting, shared by every run (they depend on the scorer and setting only)."""

    scorer: object
    stop_ids: tuple[int, ...] = ()
    _oracles: dict = field(default_factory=dict)

    def oracle(self, setting: SamplingSetting) -> ProbabilityOracle:
        if setting not in self._oracles:
            self._oracles[setting] = ProbabilityOracle(self.scorer, setting)
        return self._oracles[setting]


def verdict(exact: ExactBaseline, baseline, candidate, *, prompts: int, tokens: int, seed: int,
            detect_tv: float = 0.05, samples: int | None = None, settings: Sequence[SamplingSetting] = GRID,
            design: str = SCORING, token_families: bool = True, alpha: float = 0.01,
            setting_level: float | None = None, plan: SequentialPlan = SequentialPlan()) -> list[CheckResult]:
    """The settings' results, up to the first that fails. `samples`: per prompt for the scoring design (the
    two-sample design gets twice as many per arm: the same TV), overriding `detect_tv`."""
    weight = scored_weights(token_families=token_families)[SCORED_GATE]
    common = dict(detect_tv=detect_tv, alpha=alpha, prompts=prompts, tokens=tokens, plan=plan)
    scoring = budget_for(**common, one_sample=True, weight=weight, override=samples)
    two_sample = budget_for(**common, override=2 * samples if samples else None)
    level = setting_level or setting_alpha(alpha)
    results = []
    for setting in settings:
        oracle = exact.oracle(setting)
        if design == SCORING:
            build = scoring_builder(oracle, oracle=oracle if token_families else None, setting=setting,
                                    prompts=prompts, tokens=tokens, budget=scoring, stop_ids=exact.stop_ids, seed=seed)
            result = run_distribution(baseline=baseline, candidate=candidate, prompts=prompts, setting=setting,
                                      alpha=level, seed=seed, two_sample=two_sample, scoring=build, oracle=oracle,
                                      plan=plan)
        else:
            result = run_check(baseline=baseline, candidate=candidate, prompts=prompts, setting=setting,
                               budget=two_sample, alpha=level, seed=seed, oracle=oracle, plan=plan)
        results.append(result)
        if result.failed:
            break
    return results
