"""Task accuracy under load: answers right when sent alone must stay right at every concurrency level.

Reports the motivating bug's sentence ("x wrong of n at c=8, y of n serial, z of n on the
baseline", Fisher's exact test per level) and fails, in greedy mode, on any answer that
turns wrong under load, naming the request and where its answer seems to come from.
With the user's prompts in the pool they are load here; their own scorers judge them in
stressors/test_task_accuracy.py. The same loads run on the baseline (stressors/control.py): flips it shows too under the same load are
engine behaviour, and the candidate is charged only with its excess over the baseline's flip rate.
"""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.accuracy import fisher_p, flips, sentence, tally
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan, round_robin
from spec_route_suite.stressors.windows import LoadRuns
from spec_route_suite.stressors.canary import mean_latency, renderer
from spec_route_suite.stressors.control import Count, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.mixing import MixingReport, probe_contexts

pytestmark = pytest.mark.check("accuracy")
MIN_SERIAL_RIGHT = 0.5  # below this the route (or its model) gets too few answers right for flips to be visible


def test_answers_right_alone_stay_right_under_load(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                   stress_references, stress_max_tokens, suite_config, stress_control,
                                                   findings):
    workload, refs = stress_workload, stress_references
    rng = random.Random(f"accuracy-{suite_config.seed}")
    latency = mean_latency(refs)
    serial = tally("serial", workload, ((k, c.text) for k, c in refs.items()))
    on_baseline = {item.key: baseline.generate(item.request(max_tokens=stress_max_tokens)) for item in workload.items
                   if item.checkable}
    base = tally("on the baseline", workload, ((k, c.text) for k, c in on_baseline.items()))
    loaded, flipped, theirs, checked = [], [], [], 0
    witness = LoadWitness(candidate)
    windows = LoadRuns(candidate=candidate, baseline=baseline)
    for level in stress_budget.levels:
        keys = round_robin(workload.keys, len(workload.items), rng=rng)
        subs = plan(((k, workload.get(k).request(max_tokens=stress_max_tokens)) for k in keys),
                    offsets=burst(len(keys)), tag=f"acc-c{level}")
        run = windows.add(witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency)), subs)
        checked += _scored(workload, run.completed)
        control = stress_control.run(subs, concurrency=level, mean_latency_s=latency)
        if control is not None:
            base_refs = stress_control.references
            theirs += flips(workload=workload, serial=base_refs, outcomes=control.outcomes, references=base_refs)
        if run.failed:
            findings.add(failure_finding(run, check="accuracy", route=candidate.name, what="accuracy load",
                                         repro=windows.failed(run)))
        loaded.append(tally(f"at c={level}", workload, ((o.key, o.completion.text) for o in run.completed)))
        found = flips(workload=workload, serial=refs, outcomes=run.outcomes, references=refs)
        probed = probe_contexts(MixingReport(checked=len(found), mismatches=tuple(f.attribution for f in found)),
                                workload=workload, outcomes=run.outcomes, generate=candidate.generate,
                                render=renderer(tokenizer), max_tokens=stress_max_tokens)
        flipped += [replace(f, attribution=a) for f, a in zip(found, probed.mismatches)]
    comparison = stress_control.compare(
        what="answers right alone turned wrong", candidate=Count(len(flipped), checked),
        baseline=Count(len(theirs), sum(_scored(workload, r.completed) for r in stress_control.runs))
        if stress_control.available
        else None, where=f"at c={','.join(map(str, stress_budget.levels))}")
    witness.cover(findings, "accuracy", could_detect=f"an answer right alone that turns wrong under load "
                                                     f"({comparison.control_text()})")
    text = sentence(loaded=loaded, serial=serial, baseline=base) + f"; {comparison.control_text()}"
    details = {"sentence": text, "budget": stress_budget.describe(),
               "prompts": sum(item.checkable for item in workload.items),
               "levels": {t.label: {"wrong": t.wrong, "n": t.n, "fisher_p_vs_serial": fisher_p(t, serial),
                                    "wrong_keys": list(t.wrong_keys)} for t in loaded},
               "serial_wrong_keys": list(serial.wrong_keys), "baseline_wrong_keys": list(base.wrong_keys),
               "load_control": comparison.as_details()}
    findings.add(Finding(check="accuracy", severity="info", route=candidate.name, title=f"accuracy: {text}",
                         details=details))
    if serial.n - serial.wrong < MIN_SERIAL_RIGHT * serial.n:
        findings.add(Finding(check="accuracy", severity="warning", route=candidate.name, details=details,
                             title=f"accuracy under load weakly verified: only {serial.n - serial.wrong} of "
                                   f"{serial.n} answers right serially, so few can turn wrong under load"))
    if serial.wrong > base.wrong and fisher_p(serial, base) < suite_config.alpha:
        findings.add(Finding(check="accuracy", severity="warning", route=candidate.name, details=details,
                             title=f"candidate '{candidate.name}' is less accurate than baseline '{baseline.name}' "
                                   f"even serially: {serial.phrase()} vs {base.phrase()}"))
    judged = record(findings, comparison, check="accuracy", control=stress_control, candidate=candidate,
                    examples=[f.line() for f in theirs])
    if not flipped or not judged:
        return
    title = (f"{len(flipped)} answers right when sent alone turned wrong under load ({comparison.sentence()}): {text}")
    findings.add(Finding(check="accuracy", severity="bug", route=candidate.name, prompt_id=flipped[0].key,
                         title=title, details={**details, "flips": [f.line() for f in flipped[:30]],
                                               "repro": windows.repro(flipped[0].attribution.victim_request)}))
    pytest.fail(f"candidate '{candidate.name}': {title}\n" + "\n".join(f.line() for f in flipped[:10]), pytrace=False)


def _scored(workload, completed) -> int:
    """Answers this check judges: the canary and corpus task items (the user's prompts are load around them)."""
    return sum(workload.get(o.key).checkable for o in completed)
