"""Batch invariance and determinism: a request's greedy (or seeded) output must not depend on its neighbours.

Three views of one property. A needle prompt run alone must give the same tokens inside
bursts of mixed companions (long and short, easy and hard to draft). N identical greedy
requests under load must give one distinct output (Thinking Machines measured 80 distinct
in 1000 on an engine without batch-invariant kernels). A seeded sampled request must give
the same tokens serially and under load. A difference at a numerical near-tie (the
baseline's teacher-forced margin within the run's tau at the first divergence) is reported as
a near-tie, not a bug, under --greedy-policy classify only (stressors/near_tie.py); engines have
switches for this (VLLM_BATCH_INVARIANT=1, SGLang --enable-deterministic-inference).
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import Submission, burst, drive_handle, failure_finding, plan

pytestmark = pytest.mark.check("batch-invariance")
SAMPLING_TEMPERATURE = 1.0


def test_needle_alone_equals_needle_in_mixed_batches(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                     stress_references, stress_max_tokens, suite_config,
                                                     near_tie_policy, findings):
    workload, refs = stress_workload, stress_references
    rng = random.Random(f"needle-{suite_config.seed}")
    latency = mean_latency(refs)
    needles = [i.key for i in workload.recall() if i.length == "long"] or list(workload.keys)
    broken, checked = [], 0
    witness = LoadWitness(candidate)
    for level in stress_budget.levels:
        for b in range(stress_budget.needle_batches):
            needle = needles[b % len(needles)]
            companions = rng.sample([k for k in workload.keys if k != needle],
                                    min(stress_budget.batch(level) - 1, len(workload.items) - 1))
            order = companions + [needle]
            rng.shuffle(order)
            subs = plan(((k, workload.get(k).request(max_tokens=stress_max_tokens)) for k in order),
                        offsets=burst(len(order)), tag=f"needle-c{level}-b{b}")
            run = witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency))
            if run.failed:
                findings.add(failure_finding(run, check="batch-invariance", route=candidate.name, what="needle batch"))
            for outcome in run.completed:
                checked += 1
                expected = refs[outcome.key]
                if outcome.completion.token_ids != expected.token_ids:
                    severity, why = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer,
                                                          prompt_ids=workload.get(outcome.key).prompt_ids,
                                                          expected=expected, got=outcome.completion,
                                                          max_tokens=stress_max_tokens)
                    broken.append((severity, outcome, order, why))
    witness.cover(findings, "batch-invariance", could_detect="a greedy output that changes with batch composition")
    summary = (f"needle: {checked} outputs in {stress_budget.needle_batches} mixed batches per level "
               f"{list(stress_budget.levels)} compared with their outputs alone; {len(broken)} differ")
    findings.add(Finding(check="batch-invariance", severity="info", route=candidate.name, title=summary,
                         details={"budget": stress_budget.describe()}))
    for severity in ("bug", "near-tie"):
        cases = [c for c in broken if c[0] == severity]
        if not cases:
            continue
        _, outcome, order, why = cases[0]
        findings.add(Finding(
            check="batch-invariance", severity=severity, route=candidate.name, prompt_id=outcome.key,
            title=f"{len(cases)} greedy outputs changed with batch composition ({severity}); e.g. {outcome.key}: {why}",
            details={"examples": [{"request": o.request_id, "batch": ordr, "why": w,
                                   "got": o.completion.text[:200], "alone": refs[o.key].text[:200]}
                                  for _, o, ordr, w in cases[:10]], "budget": stress_budget.describe()}))
    bugs = [c for c in broken if c[0] == "bug"]
    if bugs:
        _, outcome, order, why = bugs[0]
        pytest.fail(f"candidate '{candidate.name}': {outcome.key} alone gave {refs[outcome.key].text!r}, in batch "
                    f"{order} gave {outcome.completion.text!r} ({why}); {len(bugs)} such outputs", pytrace=False)


def test_identical_greedy_requests_agree_under_load(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                    stress_references, stress_max_tokens, near_tie_policy, findings):
    workload, refs = stress_workload, stress_references
    item = next(iter(workload.recall()), workload.items[0])
    level = max(stress_budget.levels)
    n = stress_budget.identical_requests
    subs = plan(((item.key, item.request(max_tokens=stress_max_tokens)) for _ in range(n)), offsets=burst(n),
                tag="identical")
    witness = LoadWitness(candidate)
    run = witness.add(drive_handle(candidate, subs, concurrency=stress_budget.batch(level),
                                   mean_latency_s=mean_latency(refs)))
    witness.cover(findings, "batch-invariance", could_detect=f"distinct outputs among {n} identical greedy requests")
    if run.failed:
        findings.add(failure_finding(run, check="batch-invariance", route=candidate.name, what="identical requests"))
    outputs = Counter(o.completion.token_ids for o in run.completed)
    reference = refs[item.key].token_ids
    title = (f"determinism: {len(outputs)} distinct outputs in {len(run.completed)} identical greedy requests at "
             f"concurrency {run.concurrency}; {outputs.get(reference, 0)} equal the serial output")
    findings.add(Finding(check="batch-invariance", severity="info", route=candidate.name, title=title,
                         details={"budget": stress_budget.describe(), "prompt": item.key}))
    if len(outputs) <= 1 and (not outputs or reference in outputs):
        return
    splits = sorted({first_divergence(baseline=reference, candidate=o) for o in outputs if o != reference})
    judged = [near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer, prompt_ids=item.prompt_ids,
                                    expected=refs[item.key], max_tokens=stress_max_tokens,
                                    got=next(c.completion for c in run.completed if c.completion.token_ids == o))
              for o in outputs if o != reference]
    severity = "bug" if any(s == "bug" for s, _ in judged) else "near-tie"
    findings.add(Finding(check="batch-invariance", severity=severity, route=candidate.name, prompt_id=item.key,
                         title=title + f"; first split at token {splits[0] if splits else '?'} ({severity})",
                         details={"distinct": [{"count": c, "text": output_text(run, o)}
                                               for o, c in outputs.most_common(10)],
                                  "why": [why for _, why in judged[:10]], "serial": refs[item.key].text}))
    if severity == "bug":
        pytest.fail(f"candidate '{candidate.name}': {title}; {judged[0][1]}", pytrace=False)


def output_text(run, token_ids) -> str:
    return next(o.completion.text for o in run.completed if o.completion.token_ids == token_ids)[:200]


def test_seeded_sampling_same_serially_and_under_load(candidate, stress_budget, stress_workload, stress_references,
                                                      stress_max_tokens, suite_config, findings):
    candidate.require("seed")
    workload, refs = stress_workload, stress_references
    rng = random.Random(f"seeded-{suite_config.seed}")
    level = max(stress_budget.levels)
    latency = mean_latency(refs)
    problems = []
    witness = LoadWitness(candidate)
    for s in range(stress_budget.seeds):
        item = workload.items[s % len(workload.items)]
        seeded = item.request(max_tokens=stress_max_tokens, temperature=SAMPLING_TEMPERATURE,
                              seed=suite_config.seed * 1000 + s, request_id=f"seeded-{s}-a")
        first = candidate.generate(seeded)
        second = candidate.generate(replace(seeded, request_id=f"seeded-{s}-b"))
        if first.token_ids != second.token_ids:
            problems.append(f"seed {seeded.seed} on {item.key}: two serial runs differ: {first.text[:60]!r} vs "
                            f"{second.text[:60]!r}")
            continue
        companions = rng.sample([k for k in workload.keys if k != item.key],
                                min(stress_budget.batch(level) - 1, len(workload.items) - 1))
        subs = plan(((k, workload.get(k).request(max_tokens=stress_max_tokens)) for k in companions),
                    offsets=burst(len(companions)), tag=f"seeded-load-{s}")
        subs.insert(rng.randrange(len(subs) + 1),
                    Submission(key=item.key, request=replace(seeded, request_id=f"seeded-{s}-load")))
        run = witness.add(drive_handle(candidate, subs, concurrency=stress_budget.batch(level), mean_latency_s=latency))
        loaded = run.by_id().get(f"seeded-{s}-load")
        if loaded is None or not loaded.ok:
            why = loaded.error if loaded else "never sent"
            problems.append(f"seed {seeded.seed} on {item.key}: failed under load: {why}")
        elif loaded.completion.token_ids != first.token_ids:
            problems.append(f"seed {seeded.seed} on {item.key}: serial {first.text[:60]!r}, under load at "
                            f"concurrency {run.concurrency} {loaded.completion.text[:60]!r}")
    witness.cover(findings, "batch-invariance", could_detect="a seeded sample that changes under load")
    title = f"seeded sampling: {stress_budget.seeds} seeds compared serially (twice) and under load"
    findings.add(Finding(check="batch-invariance", severity="info", route=candidate.name, title=title,
                         details={"budget": stress_budget.describe(), "temperature": SAMPLING_TEMPERATURE}))
    if problems:
        findings.add(Finding(check="batch-invariance", severity="bug", route=candidate.name,
                             title=f"seeded sampling not reproducible: {problems[0]}", details={"problems": problems}))
        pytest.fail(f"candidate '{candidate.name}': " + "; ".join(problems[:5]), pytrace=False)
