"""The scoring design end to end on the synthetic sampler: false alarms <= alpha, power >= 0.9, every fault caught,
and a baseline whose samples do not follow its own scores sent to the two-sample test instead of failing the candidate.

These run the route suite's decision itself (equivalence/exact_verdict.py: run_distribution with bins fixed from the
exact probabilities, every family, the sequential plan, weighted Holm, the premise control after a rejection, the
two-sample fallback). Seeds are fixed, so the counts are reproducible. The bounds are the promises themselves, on
the observed rates: at most alpha x runs false alarms over 300 decisions each made at level alpha (a design whose
true rate were 2 x alpha would show more with probability 0.85), at least 0.9 x runs detections over 100 runs (a
true power of 0.8 would reach 90 with probability 0.006). The route verdict's rate over 1,000 A/A route verdicts
at the default budget is measured by `python -m benchmarks.power`.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from spec_route_suite.equivalence.distribution import GRID, SCORING, TWO_SAMPLE
from spec_route_suite.equivalence.exact_verdict import ExactBaseline, verdict
from spec_route_suite.equivalence.stats.onesample import SCORED_GATE
from spec_route_suite.equivalence.stats.synthetic import EOS, FAULTS, SyntheticModel

ALPHA = 0.01
AA_RUNS = 300
POWER_RUNS = 100
FAULT_RUNS = 5
# the grid point where each fault shows on this pair (the bonus token is reached when all k drafts are accepted,
# often only at T=0.7; top-p exists only there); one point each keeps the test short
ACTIVE = {"residual_from_p": GRID[2], "bonus_from_q": GRID[1], "soft_q_for_argmax_draft": GRID[2],
          "draft_temperature_ignored": GRID[2], "top_p_one_side": GRID[1]}
PEAKED = SyntheticModel(prompts=4, vocab=32, concentration=0.1)   # like a trained LM: a few likely tokens
FLAT = SyntheticModel(prompts=6, vocab=8, concentration=1.0)      # every first token its own bin
EXACT = {model: ExactBaseline(model, stop_ids=(EOS,)) for model in (PEAKED, FLAT)}


def _verdict(model, baseline, candidate, **kw):
    return verdict(EXACT[model], baseline, candidate, prompts=model.prompts, **kw)


def test_false_alarm_rate_of_the_scoring_design_over_300_aa_runs():
    """A correct speculative sampler judged against the exact scores: one grid setting per run (in turn), its
    whole family decided at level alpha (the route verdict runs each setting at alpha / 4), at a small budget
    (TV 0.3: 10-40 samples per prompt), where the chi-square approximation is least safe."""
    model = PEAKED
    baseline, candidate = model.arm("baseline", tokens=5), model.speculative_arm("candidate", tokens=5)
    results = [_verdict(model, baseline, candidate, detect_tv=0.3, tokens=5, seed=run, settings=[GRID[run % 4]],
                        setting_level=ALPHA)[0] for run in range(AA_RUNS)]
    alarms = sum(r.failed for r in results)
    assert all(r.design == SCORING for r in results if r.superseded is None)
    low, high = stats.binomtest(alarms, AA_RUNS).proportion_ci(0.95)
    print(f"\nscoring A/A false alarms: {alarms}/{AA_RUNS} = {alarms / AA_RUNS:.3f} (95% CI {low:.3f}-{high:.3f})")
    assert alarms <= ALPHA * AA_RUNS, f"false-alarm rate {alarms / AA_RUNS:.3f} above alpha {ALPHA}"


def test_scoring_power_at_a_five_percent_tv_shift():
    """TV 5% at the first token of every prompt, direction random per prompt, the budget planned for 5% (the
    gate alone, as with a top-K baseline: the token families can only add rejections)."""
    model = FLAT
    baseline = model.arm("baseline", tokens=3)
    hits, requests = 0, []
    for run in range(POWER_RUNS):
        candidate = model.arm("candidate", tokens=3, shift=0.05, first_only=True, shift_seed=1000 + run)
        result = _verdict(model, baseline, candidate, detect_tv=0.05, tokens=3, seed=run, settings=GRID[:1],
                          token_families=False)[0]
        hits += result.failed
        requests.append(result.requests())
    low, high = stats.binomtest(hits, POWER_RUNS).proportion_ci(0.95)
    print(f"\nscoring power at TV 5%: {hits}/{POWER_RUNS} (95% CI {low:.2f}-{high:.2f}), mean samples drawn "
          f"{np.mean(requests):.0f} (premise control and fallbacks included)")
    assert hits >= 0.9 * POWER_RUNS, f"power {hits / POWER_RUNS:.2f} below the planned 0.9"


def test_scoring_catches_every_statistical_fault_at_the_default_budget():
    """Each reference-engine fault on a peaked synthetic pair, at the budget planned for TV 0.05 and the grid point
    where it shows, in every run."""
    model = PEAKED
    baseline = model.arm("baseline", tokens=5)
    missed = {}
    for fault in FAULTS:
        candidate = model.speculative_arm("candidate", tokens=5, fault=fault)
        caught = [_verdict(model, baseline, candidate, detect_tv=0.05, tokens=5, seed=run,
                           settings=[ACTIVE[fault]])[0].failed for run in range(FAULT_RUNS)]
        if not all(caught):
            missed[fault] = caught
    assert not missed, missed


def test_a_baseline_that_ignores_its_own_scores_goes_to_the_two_sample_test():
    """Both routes sample the same distribution, 15% TV away from what the baseline's scores say (an implicit
    top-k, say): the scoring test rejects, the baseline's own samples fail it too, and the two-sample test on
    fresh samples decides (the candidate is not at fault). An honest baseline keeps the scoring verdict."""
    model = PEAKED
    skewed = dict(tokens=5, shift=0.15, shift_seed=7)
    result = _verdict(model, model.arm("baseline", **skewed), model.arm("candidate", **skewed), detect_tv=0.1,
                      tokens=5, seed=3, settings=GRID[:1])[0]
    assert result.design == TWO_SAMPLE and result.superseded is not None and result.superseded.vetoed
    assert not result.failed and result.superseded.control[SCORED_GATE] <= 0.05
    honest = _verdict(model, model.arm("baseline", tokens=5), model.arm("candidate", **skewed), detect_tv=0.1,
                      tokens=5, seed=3, settings=GRID[:1])[0]
    assert honest.design == SCORING and honest.failed and honest.control[SCORED_GATE] > 0.05
