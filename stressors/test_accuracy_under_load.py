"""Task accuracy under load: answers right when sent alone must stay right at every concurrency level.

Reports the motivating bug's sentence ("x wrong of n at c=8, y of n serial, z of n on the
baseline", Fisher's exact test per level) and fails, in greedy mode, on any answer that
turns wrong under load, naming the request and where its answer seems to come from.
"""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.accuracy import fisher_p, flips, sentence, tally
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan, round_robin
from spec_route_suite.stressors.canary import mean_latency, renderer
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.mixing import MixingReport, probe_contexts

pytestmark = pytest.mark.check("accuracy")
MIN_SERIAL_RIGHT = 0.5  # below this the route (or its model) gets too few answers right for flips to be visible


def test_answers_right_alone_stay_right_under_load(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                   stress_references, stress_max_tokens, suite_config, findings):
    workload, refs = stress_workload, stress_references
    rng = random.Random(f"accuracy-{suite_config.seed}")
    latency = mean_latency(refs)
    serial = tally("serial", workload, ((k, c.text) for k, c in refs.items()))
    on_baseline = {item.key: baseline.generate(item.request(max_tokens=stress_max_tokens)) for item in workload.items}
    base = tally("on the baseline", workload, ((k, c.text) for k, c in on_baseline.items()))
    loaded, flipped = [], []
    witness = LoadWitness(candidate)
    for level in stress_budget.levels:
        keys = round_robin(workload.keys, len(workload.items), rng=rng)
        subs = plan(((k, workload.get(k).request(max_tokens=stress_max_tokens)) for k in keys),
                    offsets=burst(len(keys)), tag=f"acc-c{level}")
        run = witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency))
        if run.failed:
            findings.add(failure_finding(run, check="accuracy", route=candidate.name, what="accuracy load"))
        loaded.append(tally(f"at c={level}", workload, ((o.key, o.completion.text) for o in run.completed)))
        found = flips(workload=workload, serial=refs, outcomes=run.outcomes, references=refs)
        probed = probe_contexts(MixingReport(checked=len(found), mismatches=tuple(f.attribution for f in found)),
                                workload=workload, outcomes=run.outcomes, generate=candidate.generate,
                                render=renderer(tokenizer), max_tokens=stress_max_tokens)
        flipped += [replace(f, attribution=a) for f, a in zip(found, probed.mismatches)]
    witness.cover(findings, "accuracy", could_detect="an answer right alone that turns wrong under load")
    text = sentence(loaded=loaded, serial=serial, baseline=base)
    details = {"sentence": text, "budget": stress_budget.describe(), "prompts": len(workload.items),
               "levels": {t.label: {"wrong": t.wrong, "n": t.n, "fisher_p_vs_serial": fisher_p(t, serial),
                                    "wrong_keys": list(t.wrong_keys)} for t in loaded},
               "serial_wrong_keys": list(serial.wrong_keys), "baseline_wrong_keys": list(base.wrong_keys)}
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
    if not flipped:
        return
    title = (f"{len(flipped)} answers right when sent alone turned wrong under load: {text}")
    findings.add(Finding(check="accuracy", severity="bug", route=candidate.name, prompt_id=flipped[0].key,
                         title=title, details={**details, "flips": [f.line() for f in flipped[:30]]}))
    pytest.fail(f"candidate '{candidate.name}': {title}\n" + "\n".join(f.line() for f in flipped[:10]), pytrace=False)
