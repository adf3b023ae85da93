"""Task accuracy on the user's prompts (check family "task-accuracy"): right alone must stay right under load.

With `--prompts`, every prompt of the run is a task judged by its scorer (stressors/tasks/scorers.py: GSM8K's final
number, a traffic row's answer, MT-Bench turn parity with the baseline, code parity or, with execute=true, its
tests). Each is answered serially by both routes, then sent again at every load level the stressors use; the
report gets the motivating bug's sentence per level ("x wrong of n at c=8 (Fisher p vs serial), y wrong of n
serial, z wrong of m on the baseline") and per source. An answer right alone and wrong under load is a flip
and fails the route, unless the baseline flips as often under the same load (stressors/control.py). A candidate
less accurate than the baseline even serially is a warning (the greedy check owns the divergences themselves).
Without `--prompts` the run has no task prompts of the user's: the check does not run, and its row says so, "not
verified (not run: no --prompts)"; never "not applicable", which only the engine itself can make true (the fixture
corpus's own task accuracy under load is the `accuracy` stressor's).
"""
from __future__ import annotations

import pytest

from spec_route_suite.prompts.prompt_set import prompt_set
from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.stressors.control import record
from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.tasks.load import CHECK, COULD_DETECT, TaskAccuracyRun

pytestmark = pytest.mark.check("task-accuracy")
NO_TASKS = ("not run: no --prompts, so the run has no task prompts of the user's (the fixture corpus's task accuracy "
            "under load is the accuracy stressor's)")


def test_task_accuracy_serial_and_under_load(candidate, baseline, tokenizer, suite_config, findings, request):
    prompts = prompt_set(suite_config)
    if not prompts.user:
        findings.cover(CHECK, candidate.name, verified=False, reason=NO_TASKS, could_detect=COULD_DETECT)
        pytest.skip(NO_TASKS)
    fitted, budget, policy = (request.getfixturevalue(name) for name in
                              ("fitted_prompts", "stress_budget", "near_tie_policy"))
    tasks = TaskAccuracyRun(LoadPair(candidate, baseline, tokenizer, policy), alpha=suite_config.alpha)
    tasks.answer_serially(prompts.records, fitted,
                          executes=frozenset(s.name for s in suite_config.prompt_sources if s.execute))
    alone, on_baseline = tasks.sample(budget, seed=suite_config.seed)
    tasks.send(budget.levels, findings)
    tasks.class_outcomes(findings)
    comparison = tasks.comparison(budget.levels)
    details = tasks.summary(findings, comparison, budget, alone, on_baseline)
    tasks.less_accurate(findings, on_baseline, details)
    judged = record(findings, comparison, check=CHECK, control=tasks.control, candidate=candidate,
                    examples=[f.line() for f in tasks.theirs])
    flipped = tasks.flipped
    if not flipped or not judged:
        return
    title = f"{len(flipped)} task answers right when sent alone turned wrong under load ({comparison.sentence()})"
    findings.add(Finding(check=CHECK, severity="bug", route=candidate.name, prompt_id=flipped[0].key, title=title,
                         details={**details, "cause": UNDER_LOAD, "flips": [f.line() for f in flipped[:30]]}))
    pytest.fail(f"candidate '{candidate.name}': {title}\n" + "\n".join(f.line() for f in flipped[:10]), pytrace=False)
