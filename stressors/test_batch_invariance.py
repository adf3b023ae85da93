"""Batch invariance and determinism: a request's greedy (or seeded) output must not depend on its neighbours.

Three views of one property. A needle prompt run alone must give the same tokens inside
bursts of mixed companions (long and short, easy and hard to draft). N identical greedy
requests under load must give one distinct output (Thinking Machines measured 80 distinct
in 1000 on an engine without batch-invariant kernels). A seeded sampled request must give
the same tokens serially and under load. A difference at a numerical near-tie (the
baseline's teacher-forced margin within the run's tau at the first divergence) is reported as
a near-tie, not a bug, under --greedy-policy classify only (stressors/near_tie.py); engines have
switches for this (VLLM_BATCH_INVARIANT=1, SGLang --enable-deterministic-inference).
Each view runs the same requests at the same concurrency on the baseline too (stressors/control.py): a
baseline that differs under the same load makes the candidate's mismatches engine behaviour, charged only
by their excess over the baseline's rate.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.routes.base import Request
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, differing, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import Submission, burst, drive_handle, failure_finding, plan
from spec_route_suite.stressors.windows import LoadRuns
from spec_route_suite.reports.repro_spec import load_repro, repeat_repro

pytestmark = pytest.mark.check("batch-invariance")
SAMPLING_TEMPERATURE = 1.0


def test_needle_alone_equals_needle_in_mixed_batches(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                     stress_references, stress_max_tokens, suite_config,
                                                     near_tie_policy, stress_control, findings):
    workload, refs = stress_workload, stress_references
    rng = random.Random(f"needle-{suite_config.seed}")
    latency = mean_latency(refs)
    needles = [i.key for i in workload.recall() if i.length == "long"] or list(workload.keys)
    broken, checked = [], 0
    witness = LoadWitness(candidate)
    windows = LoadRuns(candidate=candidate, baseline=baseline)
    for level in stress_budget.levels:
        for b in range(stress_budget.needle_batches):
            needle = needles[b % len(needles)]
            companions = rng.sample([k for k in workload.keys if k != needle],
                                    min(stress_budget.batch(level) - 1, len(workload.items) - 1))
            order = companions + [needle]
            rng.shuffle(order)
            subs = plan(((k, workload.get(k).request(max_tokens=stress_max_tokens)) for k in order),
                        offsets=burst(len(order)), tag=f"needle-c{level}-b{b}")
            run = windows.add(witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency)),
                              subs)
            stress_control.run(subs, concurrency=level, mean_latency_s=latency)
            if run.failed:
                findings.add(failure_finding(run, check="batch-invariance", route=candidate.name, what="needle batch",
                                             repro=windows.failed(run)))
            for outcome in run.completed:
                checked += 1
                expected = refs[outcome.key]
                if outcome.completion.token_ids != expected.token_ids:
                    severity, why = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer,
                                                          prompt_ids=workload.get(outcome.key).prompt_ids,
                                                          expected=expected, got=outcome.completion,
                                                          max_tokens=stress_max_tokens)
                    broken.append((severity, outcome, order, why))
    comparison = stress_control.compare(what="differ from their output alone", candidate=Count(len(broken), checked),
                                        baseline=stress_control.differing(), where=f"at c={_levels(stress_budget)}")
    witness.cover(findings, "batch-invariance", could_detect=f"a greedy output that changes with batch composition "
                                                             f"({comparison.control_text()})")
    summary = (f"needle: {checked} outputs in {stress_budget.needle_batches} mixed batches per level "
               f"{list(stress_budget.levels)} compared with their outputs alone; {len(broken)} differ; "
               f"{comparison.control_text()}")
    findings.add(Finding(check="batch-invariance", severity="info", route=candidate.name, title=summary,
                         details={"budget": stress_budget.describe(), "load_control": comparison.as_details()}))
    if not record(findings, comparison, check="batch-invariance", control=stress_control, candidate=candidate):
        return
    for severity in ("bug", "near-tie"):
        cases = [c for c in broken if c[0] == severity]
        if not cases:
            continue
        _, outcome, order, why = cases[0]
        findings.add(Finding(
            check="batch-invariance", severity=severity, route=candidate.name, prompt_id=outcome.key,
            title=f"{len(cases)} greedy outputs changed with batch composition ({severity}; {comparison.sentence()}); "
                  f"e.g. {outcome.key}: {why}",
            details={"examples": [{"request": o.request_id, "batch": ordr, "why": w,
                                   "got": o.completion.text[:200], "alone": refs[o.key].text[:200]}
                                  for _, o, ordr, w in cases[:10]], "budget": stress_budget.describe(),
                     "load_control": comparison.as_details(), "repro": windows.repro(outcome.request_id)}))
    bugs = [c for c in broken if c[0] == "bug"]
    if bugs:
        _, outcome, order, why = bugs[0]
        pytest.fail(f"candidate '{candidate.name}': {outcome.key} alone gave {refs[outcome.key].text!r}, in batch "
                    f"{order} gave {outcome.completion.text!r} ({why}); {len(bugs)} such outputs; "
                    f"{comparison.sentence()}", pytrace=False)


def _levels(budget) -> str:
    return ",".join(map(str, budget.levels))


def test_identical_greedy_requests_agree_under_load(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                    stress_references, stress_max_tokens, near_tie_policy,
                                                    stress_control, findings):
    workload, refs = stress_workload, stress_references
    item = next(iter(workload.recall()), workload.items[0])
    level = max(stress_budget.levels)
    n = stress_budget.identical_requests
    subs = plan(((item.key, item.request(max_tokens=stress_max_tokens)) for _ in range(n)), offsets=burst(n),
                tag="identical")
    witness = LoadWitness(candidate)
    windows = LoadRuns(candidate=candidate, baseline=baseline)
    run = windows.add(witness.add(drive_handle(candidate, subs, concurrency=stress_budget.batch(level),
                                               mean_latency_s=mean_latency(refs))), subs)
    stress_control.run(subs, concurrency=stress_budget.batch(level), mean_latency_s=mean_latency(refs))
    if run.failed:
        findings.add(failure_finding(run, check="batch-invariance", route=candidate.name, what="identical requests",
                                     repro=windows.failed(run)))
    outputs = Counter(o.completion.token_ids for o in run.completed)
    reference = refs[item.key].token_ids
    comparison = stress_control.compare(what="differ from the serial output", candidate=differing(run.outcomes, refs),
                                        baseline=stress_control.differing(), where=f"at c={run.concurrency}")
    witness.cover(findings, "batch-invariance", could_detect=f"distinct outputs among {n} identical greedy requests "
                                                             f"({comparison.control_text()})")
    title = (f"determinism: {len(outputs)} distinct outputs in {len(run.completed)} identical greedy requests at "
             f"concurrency {run.concurrency}; {outputs.get(reference, 0)} equal the serial output; "
             f"{comparison.control_text()}")
    findings.add(Finding(check="batch-invariance", severity="info", route=candidate.name, title=title,
                         details={"budget": stress_budget.describe(), "prompt": item.key,
                                  "load_control": comparison.as_details()}))
    judged = record(findings, comparison, check="batch-invariance", control=stress_control, candidate=candidate)
    if not judged or (len(outputs) <= 1 and (not outputs or reference in outputs)):
        return
    splits = sorted({first_divergence(baseline=reference, candidate=o) for o in outputs if o != reference})
    judged = [near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer, prompt_ids=item.prompt_ids,
                                    expected=refs[item.key], max_tokens=stress_max_tokens,
                                    got=next(c.completion for c in run.completed if c.completion.token_ids == o))
              for o in outputs if o != reference]
    severity = "bug" if any(s == "bug" for s, _ in judged) else "near-tie"
    findings.add(Finding(check="batch-invariance", severity=severity, route=candidate.name, prompt_id=item.key,
                         title=title + f"; first split at token {splits[0] if splits else '?'} ({severity}; "
                                       f"{comparison.sentence()})",
                         details={"distinct": [{"count": c, "text": output_text(run, o)}
                                               for o, c in outputs.most_common(10)],
                                  "why": [why for _, why in judged[:10]], "serial": refs[item.key].text,
                                  "load_control": comparison.as_details(),
                                  "repro": windows.repro(next(o.request_id for o in run.completed
                                                              if o.completion.token_ids != reference))}))
    if severity == "bug":
        pytest.fail(f"candidate '{candidate.name}': {title}; {judged[0][1]}", pytrace=False)


def output_text(run, token_ids) -> str:
    return next(o.completion.text for o in run.completed if o.completion.token_ids == token_ids)[:200]


def test_seeded_sampling_same_serially_and_under_load(candidate, baseline, stress_budget, stress_workload,
                                                      stress_references, stress_max_tokens, suite_config,
                                                      stress_control, findings):
    candidate.require("seed")
    workload, refs = stress_workload, stress_references
    latency = mean_latency(refs)
    plans = _seeded_plans(workload, stress_budget, stress_max_tokens, seed=suite_config.seed)
    witness = LoadWitness(candidate)
    problems = _seeded_problems(candidate, plans, concurrency=stress_budget.batch(max(stress_budget.levels)),
                                latency=latency, witness=witness)
    controlled = stress_control.available and baseline.capabilities.seed
    theirs = (_seeded_problems(baseline, plans, concurrency=stress_budget.batch(max(stress_budget.levels)),
                               latency=latency) if controlled else None)
    comparison = stress_control.compare(
        what="seeds not reproducible", candidate=Count(len({p for p, _ in problems}), len(plans)),
        baseline=Count(len({p for p, _ in theirs}), len(plans)) if theirs is not None else None,
        where=f"(serially twice and at c={stress_budget.batch(max(stress_budget.levels))})")
    witness.cover(findings, "batch-invariance", could_detect=f"a seeded sample that changes under load "
                                                             f"({comparison.control_text()})")
    title = (f"seeded sampling: {stress_budget.seeds} seeds compared serially (twice) and under load; "
             f"{comparison.control_text()}")
    findings.add(Finding(check="batch-invariance", severity="info", route=candidate.name, title=title,
                         details={"budget": stress_budget.describe(), "temperature": SAMPLING_TEMPERATURE,
                                  "load_control": comparison.as_details()}))
    judged = record(findings, comparison, check="batch-invariance", control=stress_control, candidate=candidate,
                    examples=[line for _, line in theirs or ()])
    if not judged or not problems:
        return
    lines = [line for _, line in problems]
    findings.add(Finding(check="batch-invariance", severity="bug", route=candidate.name,
                         title=f"seeded sampling not reproducible ({comparison.sentence()}): {lines[0]}",
                         details={"problems": lines, "load_control": comparison.as_details(),
                                  "repro": _seeded_repro(problems[0], plans, candidate=candidate, baseline=baseline,
                                                         concurrency=stress_budget.batch(max(stress_budget.levels)))}))
    pytest.fail(f"candidate '{candidate.name}': " + "; ".join(lines[:5]), pytrace=False)


def _seeded_repro(problem: tuple[int, str], plans, *, candidate, baseline, concurrency: int) -> dict:
    """The seeded request sent twice (serial runs differ), or its load run replayed (it changed under load)."""
    seeded, subs = next((req, subs) for req, subs in plans if req.seed == problem[0])
    if "two serial runs differ" in problem[1]:
        return repeat_repro(seeded, candidate=candidate, baseline=baseline)
    return load_repro([(sub.request, 0, None) for sub in subs], candidate=candidate, baseline=baseline,
                      concurrency=concurrency, note=f"the seeded request {seeded.request_id} among its companions")


def _seeded_plans(workload, budget, max_tokens: int, *, seed: int) -> list[tuple[Request, list[Submission]]]:
    """Per seed: the seeded request and the load run it joins (companions and position fixed by the run seed),
    built once so the candidate and its load control get exactly the same requests."""
    rng = random.Random(f"seeded-{seed}")
    plans = []
    for s in range(budget.seeds):
        item = workload.items[s % len(workload.items)]
        seeded = item.request(max_tokens=max_tokens, temperature=SAMPLING_TEMPERATURE, seed=seed * 1000 + s,
                              request_id=f"seeded-{s}-a")
        companions = rng.sample([k for k in workload.keys if k != item.key],
                                min(budget.batch(max(budget.levels)) - 1, len(workload.items) - 1))
        subs = plan(((k, workload.get(k).request(max_tokens=max_tokens)) for k in companions),
                    offsets=burst(len(companions)), tag=f"seeded-load-{s}")
        subs.insert(rng.randrange(len(subs) + 1),
                    Submission(key=item.key, request=replace(seeded, request_id=f"seeded-{s}-load")))
        plans.append((seeded, subs))
    return plans


def _seeded_problems(route, plans, *, concurrency: int, latency: float, witness=None) -> list[tuple[int, str]]:
    """(seed, what went wrong) for each seeded request of `plans` on `route`: serially twice, then under load."""
    problems = []
    for seeded, subs in plans:
        first = route.generate(seeded)
        second = route.generate(replace(seeded, request_id=seeded.request_id[:-1] + "b"))
        if first.token_ids != second.token_ids:
            problems.append((seeded.seed, f"seed {seeded.seed}: two serial runs differ: {first.text[:60]!r} vs "
                                          f"{second.text[:60]!r}"))
            continue
        run = drive_handle(route, subs, concurrency=concurrency, mean_latency_s=latency)
        if witness is not None:
            witness.add(run)
        loaded = run.by_id().get(seeded.request_id[:-1] + "load")
        if loaded is None or not loaded.ok:
            why = loaded.error if loaded else "never sent"
            problems.append((seeded.seed, f"seed {seeded.seed}: failed under load: {why}"))
        elif loaded.completion.token_ids != first.token_ids:
            problems.append((seeded.seed, f"seed {seeded.seed}: serial {first.text[:60]!r}, under load at "
                                          f"concurrency {run.concurrency} {loaded.completion.text[:60]!r}"))
    return problems
