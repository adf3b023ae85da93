"""KV pressure (stressors/pressure.py): outputs of preempted requests equal their serial references.

A burst of short-prompt, long-output greedy requests (ignore_eos) at the run's highest concurrency level,
sized to offer more KV tokens than the engine's pool holds. Every answer must equal the same request served
alone (strict, or near-ties excused under --greedy-policy classify), the engine must stay healthy, and its
own preemption counter says whether anything was preempted: "verified" only when it rose. The same burst
runs on the baseline when it batches (stressors/control.py): what it loses under the same load too is
engine behaviour, and only the candidate's excess is charged.
"""
from __future__ import annotations

import random

import pytest

from spec_route_suite.fixtures.prompts.prompt_set import prompt_pool
from spec_route_suite.routes.base import Request
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import LoadControl, differing, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan, round_robin
from spec_route_suite.stressors.pressure import (SHORT_PROMPTS, PreemptionCounter, kv_capacity, plan_pressure,
                                                 stated_slots)
from spec_route_suite.stressors.windows import LoadRuns

pytestmark = pytest.mark.check("kv-pressure")
COULD = "outputs of requests preempted or retracted mid-draft that differ from their serial output (draft state lost)"


def test_outputs_survive_kv_pressure(candidate, baseline, tokenizer, fitted_prompts, context_fit, stress_budget,
                                     suite_config, near_tie_policy, findings):
    if not candidate.capabilities.concurrency:
        findings.cover("kv-pressure", candidate.name, verified=False, could_detect=COULD,
                       reason="the route serialises requests (capability concurrency=False): its KV never fills")
        pytest.skip(f"not verified: '{candidate.name}' serialises requests: no KV pressure")
    records = sorted(prompt_pool(suite_config), key=lambda r: len(fitted_prompts.ids(r)))[:SHORT_PROMPTS]
    prompts = {r.id: fitted_prompts.ids(r) for r in records}
    room = None if context_fit.limit is None else context_fit.limit - max(map(len, prompts.values())) - 1
    inventory = candidate.inventory()
    pressure = plan_pressure(capacity=kv_capacity(inventory, candidate.spec), concurrency=max(stress_budget.levels),
                             prompt_tokens=[len(p) for p in prompts.values()], room=room,
                             requests=stress_budget.pressure_requests, slots=stated_slots(inventory))
    if pressure.why_not:
        findings.cover("kv-pressure", candidate.name, verified=False, could_detect=COULD, reason=pressure.why_not)
        pytest.skip(f"not verified: {pressure.why_not}")
    requests = {key: Request(prompt_ids=ids, max_tokens=pressure.max_tokens, ignore_eos=True, request_id=f"kv-{key}")
                for key, ids in prompts.items()}
    references = {key: candidate.generate(req) for key, req in requests.items()}
    keys = round_robin(list(requests), pressure.requests, rng=random.Random(f"kv-{suite_config.seed}"))
    subs = plan(((k, requests[k]) for k in keys), offsets=burst(len(keys)), tag="kv")
    counter, witness = PreemptionCounter(candidate), LoadWitness(candidate)
    windows = LoadRuns(candidate=candidate, baseline=baseline)
    run = windows.add(witness.add(drive_handle(candidate, subs, concurrency=pressure.concurrency,
                                               mean_latency_s=mean_latency(references))), subs)
    preempted = counter.since()
    control = LoadControl(baseline, {k: baseline.generate(r) for k, r in requests.items()}
                          if baseline.capabilities.concurrency else None, alpha=suite_config.alpha)
    control.run(subs, concurrency=pressure.concurrency, mean_latency_s=mean_latency(references))
    broken = []
    for outcome in run.completed:
        expected = references[outcome.key]
        if outcome.completion.token_ids != expected.token_ids:
            severity, why = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer,
                                                  prompt_ids=requests[outcome.key].prompt_ids, expected=expected,
                                                  got=outcome.completion, max_tokens=pressure.max_tokens)
            broken.append((severity, outcome, why))
    findings.measure("kv_pressure", route=candidate.name, preemptions=preempted, requests=len(run.outcomes),
                     capacity=pressure.capacity, offered=pressure.offered, concurrency=pressure.concurrency,
                     max_tokens=pressure.max_tokens, mismatches=len(broken), failed=len(run.failed))
    comparison = control.compare(what="differ from their serial output", candidate=differing(run.outcomes, references),
                                 baseline=control.differing(), where=f"at c={pressure.concurrency} under KV pressure")
    verified, why, ran = witness.verdict()
    evidence = (f"{preempted} preemption(s) by the engine's own counter" if preempted is not None else
                "the engine states no preemption counter")
    findings.cover("kv-pressure", candidate.name, verified=verified and bool(preempted),
                   ran={**ran, "preemptions": preempted or 0}, could_detect=f"{COULD} ({pressure.describe()})",
                   reason="" if verified and preempted else
                   (why if not verified else f"no request was proven preempted: {evidence} ({pressure.describe()})"))
    findings.add(Finding(check="kv-pressure", severity="info", route=candidate.name,
                         title=f"kv-pressure: {run.describe()}; {evidence}; {comparison.control_text()}",
                         details={"plan": pressure.describe(), "preemptions": preempted,
                                  "load_control": comparison.as_details()}))
    problems = []
    if run.failed:
        problems.append(findings.add(failure_finding(run, check="kv-pressure", route=candidate.name,
                                                     what="KV-pressure burst", repro=windows.failed(run))).title)
    if not candidate.health():
        problems.append(findings.add(Finding(check="kv-pressure", severity="error", route=candidate.name,
                                             title=f"route unhealthy after the KV-pressure burst ({evidence})")).title)
    judged = record(findings, comparison, check="kv-pressure", control=control, candidate=candidate)
    bugs = [b for b in broken if b[0] == "bug"]
    if bugs and judged:
        _, outcome, why = bugs[0]
        title = (f"{len(bugs)} of {len(run.completed)} outputs under KV pressure differ from their serial output "
                 f"({evidence}; {comparison.sentence()}); e.g. {outcome.request_id}: {why}")
        findings.add(Finding(check="kv-pressure", severity="bug", route=candidate.name, prompt_id=outcome.key,
                             title=title, details={
                                 "examples": [{"request": o.request_id, "why": w, "got": o.completion.text[:200],
                                               "alone": references[o.key].text[:200]} for _, o, w in bugs[:10]],
                                 "plan": pressure.describe(), "preemptions": preempted,
                                 "load_control": comparison.as_details(),
                                 "repro": windows.whole(outcome.request_id, note="replayed under the same KV "
                                                                                "pressure")}))
        problems.append(title)
    if problems:
        pytest.fail(f"candidate '{candidate.name}' under KV pressure: " + " | ".join(problems[:3]), pytrace=False)

