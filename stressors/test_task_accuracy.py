"""Task accuracy on the user's prompts (check family "task-accuracy"): right alone must stay right under load.

With `--prompts`, every prompt of the run is a task judged by its scorer (stressors/scorers.py: GSM8K's final
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

import random

import pytest

from spec_route_suite.fixtures.prompts.prompt_set import prompt_set
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.accuracy import Tally, fisher_p, sentence
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, LoadControl, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan, round_robin
from spec_route_suite.stressors.task_accuracy import Judge, by_source, task_flips, task_items, tally

pytestmark = pytest.mark.check("task-accuracy")
CHECK = "task-accuracy"
COULD_DETECT = "a task answer right alone that turns wrong under load; accuracy below the baseline's"
NO_TASKS = ("not run: no --prompts, so the run has no task prompts of the user's (the fixture corpus's task accuracy "
            "under load is the accuracy stressor's)")


def test_task_accuracy_serial_and_under_load(candidate, baseline, tokenizer, suite_config, findings, request):
    prompts = prompt_set(suite_config)
    if not prompts.user:
        findings.cover(CHECK, candidate.name, verified=False, reason=NO_TASKS, could_detect=COULD_DETECT)
        pytest.skip(NO_TASKS)
    fitted, budget, policy = (request.getfixturevalue(name) for name in
                              ("fitted_prompts", "stress_budget", "near_tie_policy"))
    items = task_items(prompts.records, fitted, baseline_answer=lambda item: baseline.generate(item.request))
    by_key = {item.key: item for item in items}
    references = {item.key: baseline.generate(item.request) for item in items}
    serial = {item.key: candidate.generate(item.request) for item in items}

    def near_tie(item, expected, got) -> bool:
        return policy.judge(baseline=baseline, tokenizer=tokenizer, prompt_ids=item.request.prompt_ids,
                            expected=expected, got=got, max_tokens=item.request.max_tokens)[0] == "near-tie"
    judge = Judge(references=references, executes=frozenset(s.name for s in suite_config.prompt_sources if s.execute),
                  near_tie=near_tie)
    # every task under load, or a seeded sample of them within the stressors' budget; the serial tally that Fisher's
    # test compares a load level with is over the same tasks
    sent = round_robin([item.key for item in items], min(len(items), budget.mixing_requests),
                       rng=random.Random(f"task-{suite_config.seed}"))
    alone = tally("serial", judge, by_key, ((k, serial[k]) for k in dict.fromkeys(sent)))
    on_baseline = tally("on the baseline", judge, by_key, references.items(), own_reference=True)
    control = LoadControl(baseline, references, alpha=suite_config.alpha)
    witness, loaded, flipped, theirs, checked = LoadWitness(candidate), [], [], [], 0
    latency = mean_latency(serial)
    for level in budget.levels:
        subs = plan(((key, by_key[key].request) for key in sent), offsets=burst(len(sent)), tag=f"task-c{level}")
        run = witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency))
        if run.failed:
            findings.add(failure_finding(run, check=CHECK, route=candidate.name, what="task accuracy load"))
        checked += len(run.completed)
        loaded.append(tally(f"at c={level}", judge, by_key, ((o.key, o.completion) for o in run.completed)))
        flipped += task_flips(judge, by_key, serial, run.outcomes)
        base_run = control.run(subs, concurrency=level, mean_latency_s=latency)
        if base_run is not None:
            theirs += task_flips(judge, by_key, references, base_run.outcomes)
    _class_outcomes(findings, candidate.name, judge, items, serial, flipped)
    comparison = control.compare(what="task answers right alone turned wrong", candidate=Count(len(flipped), checked),
                                 baseline=Count(len(theirs), sum(len(r.completed) for r in control.runs))
                                 if control.available else None, where=f"at c={','.join(map(str, budget.levels))}")
    witness.cover(findings, CHECK, could_detect=f"{COULD_DETECT} ({comparison.control_text()})",
                  counts={"task answers": len(items)})
    text = sentence(loaded=loaded, serial=alone, baseline=on_baseline) + f"; {comparison.control_text()}"
    sources = {source: tally(source, judge, by_key, ((k, a) for k, a in serial.items()
                                                     if by_key[k].record.source == source))
               for source in dict.fromkeys(item.record.source for item in items)}
    details = {"sentence": text, "serial_by_source": by_source(sources), "tasks": len(items), "sent_per_level": len(sent),
               "budget": budget.describe(), "serial_wrong": list(alone.wrong_keys),
               "baseline_wrong": list(on_baseline.wrong_keys), "load_control": comparison.as_details(),
               "levels": {t.label: {"wrong": t.wrong, "n": t.n, "fisher_p_vs_serial": fisher_p(t, alone),
                                    "wrong_keys": list(t.wrong_keys)} for t in loaded}}
    findings.add(Finding(check=CHECK, severity="info", route=candidate.name, details=details,
                         title=f"task accuracy: {text}; serially by source: {by_source(sources)}"))
    _less_accurate(findings, candidate, baseline, judge, by_key, serial, on_baseline, suite_config.alpha, details)
    judged = record(findings, comparison, check=CHECK, control=control, candidate=candidate,
                    examples=[f.line() for f in theirs])
    if not flipped or not judged:
        return
    title = f"{len(flipped)} task answers right when sent alone turned wrong under load ({comparison.sentence()})"
    findings.add(Finding(check=CHECK, severity="bug", route=candidate.name, prompt_id=flipped[0].key, title=title,
                         details={**details, "flips": [f.line() for f in flipped[:30]]}))
    pytest.fail(f"candidate '{candidate.name}': {title}\n" + "\n".join(f.line() for f in flipped[:10]), pytrace=False)


def _less_accurate(findings, candidate, baseline, judge, by_key, serial, on_baseline: Tally, alpha: float,
                   details: dict) -> None:
    """A warning when the candidate's serial answers are right less often than the baseline's, on the items the
    baseline can be scored on (gold answers, executed tests)."""
    mine = tally("serial", judge, by_key, ((k, a) for k, a in serial.items() if not judge.by_reference(by_key[k])))
    if mine.wrong > on_baseline.wrong and fisher_p(mine, on_baseline) < alpha:
        findings.add(Finding(check=CHECK, severity="warning", route=candidate.name, details=details,
                             title=f"candidate '{candidate.name}' is less accurate than baseline '{baseline.name}' "
                                   f"even serially: {mine.phrase()} vs {on_baseline.phrase()}"))


def _class_outcomes(findings, route: str, judge, items, serial, flipped) -> None:
    """Each task's outcome under its class: right or wrong alone, and flipped when it turned wrong under load."""
    flips = {f.key for f in flipped}
    for item in items:
        record = item.record
        outcome = ("flipped under load" if item.key in flips else
                   "right" if judge.right(item, serial[item.key]) else "wrong")
        findings.measure("class_outcome", check=CHECK, route=route, prompt_id=item.key, source=record.source,
                         category=record.category, outcome=outcome)
