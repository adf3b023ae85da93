"""The whole distribution check, end to end on the synthetic sampler: false alarms <= alpha, power >= 0.9.

These run `equivalence.distribution.run_check` itself (every family, every grid setting, the
sequential plan, weighted Holm), on the vectorised synthetic sampler so hundreds of runs fit in
a minute. Seeds are fixed: the counts are reproducible. The bounds are the promises themselves, on the
observed rates: at most alpha x runs false alarms (300 runs: a check whose true rate were 2 x alpha would
show more with probability 0.85) and at least 0.9 x runs detections (100 runs: a true power of 0.8 would
reach 90 with probability 0.006).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spec_route_suite.equivalence.distribution import GRID, run_check, setting_alpha
from spec_route_suite.equivalence.distribution_plan import gate_level
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.planner import plan_budget
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.equivalence.stats.synthetic import FAULTS, SyntheticModel

ALPHA = 0.01
PLAN = SequentialPlan()
AA_RUNS = 300
POWER_RUNS = 100


def _budget(*, detect_tv: float, prompts: int, tokens: int = 5):
    return plan_budget(detect_tv=detect_tv, level=gate_level(ALPHA, PLAN), power=0.9, prompts=prompts,
                       tokens=tokens, inflation=PLAN.inflation)


def _route_fails(model, baseline, candidate, *, budget, seed: int, scored: bool) -> tuple[bool, int]:
    """One route verdict: every grid setting at alpha / len(GRID). Returns (failed, samples used)."""
    failed, used = False, 0
    for setting in GRID:
        result = run_check(baseline=baseline, candidate=candidate, prompts=budget.prompts, setting=setting,
                           budget=budget, alpha=setting_alpha(ALPHA), seed=seed, plan=PLAN,
                           oracle=ProbabilityOracle(model, setting) if scored else None)
        failed |= result.failed
        used += result.samples_used
    return failed, used


def test_false_alarm_rate_of_the_whole_family_over_300_aa_runs():
    """A correct speculative sampler against the plain AR sampler: the route verdict's false-alarm rate."""
    model = SyntheticModel(prompts=4, vocab=32, concentration=0.1)
    budget = _budget(detect_tv=0.15, prompts=4)
    baseline = model.arm("baseline", tokens=budget.tokens)
    candidate = model.speculative_arm("candidate", tokens=budget.tokens)
    alarms = sum(_route_fails(model, baseline, candidate, budget=budget, seed=run, scored=True)[0]
                 for run in range(AA_RUNS))
    low, high = stats.binomtest(alarms, AA_RUNS).proportion_ci(0.95)
    print(f"\nA/A false alarms: {alarms}/{AA_RUNS} = {alarms / AA_RUNS:.3f} (95% CI {low:.3f}-{high:.3f}), alpha {ALPHA}")
    assert alarms <= ALPHA * AA_RUNS, f"false-alarm rate {alarms / AA_RUNS:.3f} above alpha {ALPHA}"


def test_power_at_a_five_percent_tv_shift():
    """TV 5% at the first token of every prompt, direction random per prompt; the budget planned for 5%.

    Eight first tokens, so every one is a bin and the binned shift is the whole 5%. Only the gate and
    the length test run (no scorer): the scored families can only add rejections, so this is a lower
    bound on the full family's power.
    """
    model = SyntheticModel(prompts=6, vocab=8, concentration=1.0)
    budget = _budget(detect_tv=0.05, prompts=6, tokens=3)
    baseline = model.arm("baseline", tokens=3)
    hits, used = 0, []
    for run in range(POWER_RUNS):
        candidate = model.arm("candidate", tokens=3, shift=0.05, first_only=True, shift_seed=1000 + run)
        result = run_check(baseline=baseline, candidate=candidate, prompts=6, setting=GRID[0], budget=budget,
                           alpha=setting_alpha(ALPHA), seed=run, plan=PLAN)
        hits += result.failed
        used.append(result.samples_used)
    low, high = stats.binomtest(hits, POWER_RUNS).proportion_ci(0.95)
    print(f"\npower at TV 5%: {hits}/{POWER_RUNS} (95% CI {low:.2f}-{high:.2f}); mean samples per arm per prompt "
          f"{np.mean(used):.0f} of {budget.samples_per_prompt}")
    assert hits >= 0.9 * POWER_RUNS, f"power {hits / POWER_RUNS:.2f} below the planned 0.9"


@pytest.mark.parametrize("fault", FAULTS)
def test_every_statistical_fault_is_caught_at_the_default_budget(fault):
    """Each reference-engine fault, emulated on a peaked synthetic pair (like a trained LM), 10 of 10 runs."""
    model = SyntheticModel(prompts=4, vocab=32, concentration=0.1)
    budget = _budget(detect_tv=0.05, prompts=4)
    baseline = model.arm("baseline", tokens=budget.tokens)
    candidate = model.speculative_arm("candidate", tokens=budget.tokens, fault=fault)
    caught = [_route_fails(model, baseline, candidate, budget=budget, seed=run, scored=False)[0] for run in range(10)]
    assert all(caught)


def test_a_baseline_that_ignores_its_own_parameters_disables_the_score_based_families():
    """Both arms sample the same distribution, 15% TV away from what the baseline's scores say (an
    implicit top-k, say): the candidate is not at fault, so the verdict must not fail it; the check
    names the baseline instead. A baseline that follows its scores is never flagged (A/A above)."""
    model = SyntheticModel(prompts=4, vocab=32, concentration=0.1)
    budget = _budget(detect_tv=0.1, prompts=4)
    skewed = dict(tokens=budget.tokens, shift=0.15, shift_seed=7)
    result = run_check(baseline=model.arm("baseline", **skewed), candidate=model.arm("candidate", **skewed),
                       prompts=4, setting=GRID[0], budget=budget, alpha=setting_alpha(ALPHA), seed=3, plan=PLAN,
                       oracle=ProbabilityOracle(model, GRID[0]))
    assert result.evidence.baseline_inconsistent, "the baseline's departure from its own scores went unseen"
    assert not result.failed
    honest = run_check(baseline=model.arm("baseline", tokens=budget.tokens),
                       candidate=model.arm("candidate", **skewed), prompts=4, setting=GRID[0], budget=budget,
                       alpha=setting_alpha(ALPHA), seed=3, plan=PLAN, oracle=ProbabilityOracle(model, GRID[0]))
    assert not honest.evidence.baseline_inconsistent and honest.failed
