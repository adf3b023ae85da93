"""Task accuracy under load: answers right when sent alone must stay right at every concurrency level.

Reports the motivating bug's sentence ("x wrong of n at c=8, y of n serial, z of n on the
baseline", Fisher's exact test per level) and fails, in greedy mode, on any answer that
turns wrong under load, naming the request and where its answer seems to come from.
With the user's prompts in the pool they are load here; their own scorers judge them in
stressors/test_task_accuracy.py. The same loads run on the baseline (stressors/control.py): flips it shows too under the same load are
engine behaviour, and the candidate is charged only with its excess over the baseline's flip rate.
"""
from __future__ import annotations

import pytest

from spec_route_suite.stressors.accuracy.load import AccuracyUnderLoad
from spec_route_suite.stressors.pair import LoadPair

pytestmark = pytest.mark.check("accuracy")


def test_answers_right_alone_stay_right_under_load(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                   stress_references, stress_max_tokens, suite_config, stress_control,
                                                   findings):
    accuracy = AccuracyUnderLoad(LoadPair(candidate, baseline, tokenizer, policy=None, max_tokens=stress_max_tokens),
                                 stress_workload, stress_references, stress_control)   # flips need no near-tie policy
    accuracy.tally_serial()
    accuracy.send(stress_budget.levels, findings, seed=suite_config.seed)
    comparison = accuracy.comparison(stress_budget.levels)
    text, details = accuracy.summary(findings, comparison, stress_budget)
    accuracy.warnings(findings, details, alpha=suite_config.alpha)
    failure = accuracy.judge(findings, comparison, text, details)
    if failure:
        pytest.fail(failure, pytrace=False)
