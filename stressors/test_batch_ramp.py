"""Batch-size ramp: the same canary workload at odd batch sizes up to the route's slots and back down.

Why: engines take other code paths at other batch sizes: CUDA graphs captured for 1, 2, 4, 8... pad a batch of
7 with a padding row (vllm#43682), a dynamic draft length switches past a batch threshold (vllm#47014, on
vLLM's CPU backend). The existing stressors run at a few fixed levels; here the batch steps through 1, 3, 7,
15, 31 ... (one less than a power of two: the most padding) up to the slots the route states (capped at the
run's highest --concurrency) and back down, one burst of exactly that many requests per step. Every output
must equal its serial reference (strict, or near-ties excused under --greedy-policy classify), and the engine
must answer its health check after every step. The same bursts run on the baseline when it batches
(stressors/control.py): only the candidate's excess over the baseline's mismatches is charged.
"""
from __future__ import annotations

import random

import pytest

from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan
from spec_route_suite.stressors.pressure import stated_slots
from spec_route_suite.stressors.windows import LoadRuns

pytestmark = pytest.mark.check("batch-ramp")
COULD = "a greedy output that changes at some batch size (padding rows, a batch-size threshold), or a crash there"


def ramp_sizes(top: int) -> list[int]:
    """1, 3, 7, 15, ... up to `top` (and `top` itself when odd), then back down: every size once, the top twice."""
    up, size = [], 1
    while size <= top:
        up.append(size)
        size = 2 * size + 1
    if top % 2 and up[-1] != top:
        up.append(top)
    return up + up[-2::-1]


def test_outputs_equal_serial_through_a_batch_size_ramp(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                        stress_references, stress_max_tokens, suite_config,
                                                        near_tie_policy, stress_control, findings):
    if not candidate.capabilities.concurrency:
        findings.cover("batch-ramp", candidate.name, verified=False, could_detect=COULD,
                       reason="the route serialises requests (capability concurrency=False): every batch has one row")
        pytest.skip(f"not verified: '{candidate.name}' serialises requests: no batch sizes to ramp through")
    workload, refs = stress_workload, stress_references
    slots = stated_slots(candidate.inventory())
    top = min(slots or max(stress_budget.levels), max(stress_budget.levels))
    sizes = ramp_sizes(top)
    rng, latency = random.Random(f"ramp-{suite_config.seed}"), mean_latency(refs)
    witness, broken, checked, problems = LoadWitness(candidate), [], 0, []
    windows = LoadRuns(candidate=candidate, baseline=baseline)
    for step, size in enumerate(sizes):
        keys = [workload.keys[(step * 7 + i) % len(workload.keys)] for i in range(size)]
        rng.shuffle(keys)
        subs = plan(((k, workload.get(k).request(max_tokens=stress_max_tokens)) for k in keys), offsets=burst(size),
                    tag=f"ramp-{step}-b{size}")
        run = windows.add(witness.add(drive_handle(candidate, subs, concurrency=size, mean_latency_s=latency)), subs)
        stress_control.run(subs, concurrency=size, mean_latency_s=latency)
        if run.failed:
            problems.append(findings.add(failure_finding(run, check="batch-ramp", route=candidate.name,
                                                         what=f"ramp step {step} (batch {size})",
                                                         repro=windows.failed(run))).title)
        for outcome in run.completed:
            checked += 1
            if outcome.completion.token_ids != refs[outcome.key].token_ids:
                severity, why = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer,
                                                      prompt_ids=workload.get(outcome.key).prompt_ids,
                                                      expected=refs[outcome.key], got=outcome.completion,
                                                      max_tokens=stress_max_tokens)
                broken.append((severity, size, outcome, why))
        if not candidate.health():
            problems.append(findings.add(Finding(
                check="batch-ramp", severity="error", route=candidate.name,
                title=f"route unhealthy after ramp step {step} (a burst of {size}; sizes {sizes})")).title)
            break
    comparison = stress_control.compare(what="differ from their output alone", candidate=Count(len(broken), checked),
                                        baseline=stress_control.differing(), where=f"at batch sizes {sizes}")
    witness.cover(findings, "batch-ramp", could_detect=f"{COULD}; sizes {sizes} "
                                                       f"({'slots stated: ' + str(slots) if slots else 'no slots stated'})",
                  counts={"outputs compared": checked})
    findings.add(Finding(check="batch-ramp", severity="info", route=candidate.name,
                         title=f"batch-ramp: {checked} outputs at batch sizes {sizes}, {len(broken)} differ from their "
                               f"output alone; {comparison.control_text()}",
                         details={"sizes": sizes, "slots": slots, "load_control": comparison.as_details()}))
    judged = record(findings, comparison, check="batch-ramp", control=stress_control, candidate=candidate)
    bugs = [b for b in broken if b[0] == "bug"]
    if bugs and judged:
        by_size = sorted({size for _, size, _, _ in bugs})
        _, size, outcome, why = bugs[0]
        title = (f"{len(bugs)} greedy outputs differ from their output alone at batch sizes {by_size} of the ramp "
                 f"{sizes} ({comparison.sentence()}); e.g. {outcome.request_id} at batch {size}: {why}")
        findings.add(Finding(check="batch-ramp", severity="bug", route=candidate.name, prompt_id=outcome.key,
                             title=title, details={
                                 "sizes": sizes, "failing_sizes": by_size, "load_control": comparison.as_details(),
                                 "examples": [{"request": o.request_id, "batch": s, "why": w, "got": o.completion.text[:200],
                                               "alone": refs[o.key].text[:200]} for _, s, o, w in bugs[:10]],
                                 "repro": windows.repro(outcome.request_id)}))
        problems.append(title)
    if problems:
        pytest.fail(f"candidate '{candidate.name}' through the batch-size ramp: " + " | ".join(problems[:3]),
                    pytrace=False)
