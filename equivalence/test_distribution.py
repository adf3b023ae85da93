"""Sampled outputs: the candidate must draw from the baseline's distribution at every grid setting.

One test per sampling setting (equivalence/distribution.py GRID), each at alpha / len(GRID), so
the route's false-alarm rate over the grid is <= alpha. Where the baseline's scores give the
setting's probabilities exactly, the scoring test samples the candidate alone against them (a
quarter of the two-sample requests); elsewhere both routes sample (equivalence/distribution_plan.py);
the coverage row and every finding say which test decided and why. A failure is reported only after
a further look confirms it (cumulative samples); the finding also carries the gate's p-value on the
fresh samples alone, the baseline's own p-value under the scoring test, the prompts BH points at,
their bins and counts, and the smallest TV shift this budget could have seen (also recorded when it
passes).
The grid point with min_p probes it first on both routes; when either refuses it, the point runs
without min_p and the coverage table's `distribution: min_p` row says "not supported by this route"
(the candidate refused) or "not verified" (the baseline did), never a pass. On
a candidate with capability `n`, half its samples come from n=4 requests pooled with the single
ones (equivalence/distribution_routes.py RouteArm); a usage.completion_tokens that is not the sum over
the choices is a finding, unless the baseline bills the same request the same way (an engine note).
What the run's result says (findings, coverage rows, the failure's message) is judged in
equivalence/distribution_verdict.py.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.distribution import GRID, run_distribution, setting_alpha
from spec_route_suite.equivalence.distribution_plan import plan_route_run
from spec_route_suite.equivalence.distribution_routes import min_p_supported
from spec_route_suite.equivalence.distribution_verdict import judge_setting, usage_summed
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.prompts.prompt_set import run_prompts

pytestmark = pytest.mark.check("distribution")

PLAN = SequentialPlan()


@pytest.mark.parametrize("setting", GRID, ids=[s.name for s in GRID])
def test_sampling_distribution(setting: SamplingSetting, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                               findings, shared_dir):
    records = run_prompts(suite_config)
    setting, min_p_refusal = min_p_supported(setting, baseline, candidate, fitted_prompts.ids(records[0], 1))
    run = plan_route_run(baseline=baseline, candidate=candidate, records=records, encode=fitted_prompts.ids,
                         tokenizer=tokenizer, suite_config=suite_config, setting=setting, plan=PLAN, shared=shared_dir)
    arms = run.arms(baseline, candidate, tokenizer=tokenizer)
    result = run_distribution(baseline=arms["baseline"], candidate=arms["candidate"], prompts=len(run.prompt_ids),
                              setting=setting, alpha=setting_alpha(suite_config.alpha), seed=suite_config.seed,
                              two_sample=run.budget, scoring=run.scoring(setting, suite_config.seed),
                              oracle=run.oracle(setting), plan=PLAN)
    verdict = judge_setting(run, result, arms["candidate"], setting=setting, records=records,
                            min_p_refusal=min_p_refusal, seed=suite_config.seed, detect_tv=suite_config.detect_tv,
                            baseline=baseline, candidate=candidate, decode=tokenizer.decode)
    verdict.record_evidence(findings)
    # n-choice answers' usage, judged against the baseline's answer to the same request (it may fail the test)
    usage_summed(arms["candidate"], setting, findings, baseline=baseline, candidate=candidate)
    for finding in verdict.findings:
        findings.add(finding)
    if verdict.failure:
        pytest.fail(verdict.failure, pytrace=False)
