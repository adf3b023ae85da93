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

import pytest

from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.invariance import (CHECK, IdenticalRequests, NeedleBatches, seeded_budget_note,
                                                   seeded_count, seeded_plans, seeded_problems, seeded_repro,
                                                   seeded_top_up)
from spec_route_suite.stressors.pair import LoadPair

pytestmark = pytest.mark.check("batch-invariance")


def test_needle_alone_equals_needle_in_mixed_batches(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                     stress_references, stress_max_tokens, suite_config,
                                                     near_tie_policy, stress_control, findings):
    needles = NeedleBatches(LoadPair(candidate, baseline, tokenizer, near_tie_policy, stress_max_tokens),
                            stress_workload, stress_references, stress_control)
    needles.send(stress_budget, findings, seed=suite_config.seed)
    comparison = needles.comparison(stress_budget)
    needles.summary(findings, comparison, stress_budget)
    if not record(findings, comparison, check=CHECK, control=stress_control, candidate=candidate):
        return
    needles.changed(findings, comparison, stress_budget)
    if needles.bugs:
        _, outcome, order, why = needles.bugs[0]
        pytest.fail(f"candidate '{candidate.name}': {outcome.key} alone gave {stress_references[outcome.key].text!r}, "
                    f"in batch {order} gave {outcome.completion.text!r} ({why}); {len(needles.bugs)} such outputs; "
                    f"{comparison.sentence()}", pytrace=False)


def test_identical_greedy_requests_agree_under_load(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                    stress_references, stress_max_tokens, near_tie_policy,
                                                    stress_control, findings):
    identical = IdenticalRequests(LoadPair(candidate, baseline, tokenizer, near_tie_policy, stress_max_tokens),
                                  stress_workload, stress_references, stress_control)
    identical.send(stress_budget, findings)
    comparison = identical.comparison()
    title = identical.summary(findings, comparison, stress_budget)
    judged = record(findings, comparison, check=CHECK, control=stress_control, candidate=candidate)
    if not judged or identical.agree():
        return
    severity, why = identical.split(findings, comparison, title)
    if severity == "bug":
        pytest.fail(f"candidate '{candidate.name}': {title}; {why}", pytrace=False)


def test_seeded_sampling_same_serially_and_under_load(candidate, baseline, stress_budget, stress_workload,
                                                      stress_references, stress_max_tokens, suite_config,
                                                      stress_control, findings):
    candidate.require("seed")
    plans = seeded_plans(stress_workload, stress_budget, stress_max_tokens, seed=suite_config.seed)
    level, latency = stress_budget.batch(max(stress_budget.levels)), mean_latency(stress_references)
    witness = LoadWitness(candidate)
    problems = seeded_problems(candidate, plans, concurrency=level, latency=latency, witness=witness)
    controlled = stress_control.available and baseline.capabilities.seed
    theirs = seeded_problems(baseline, plans, concurrency=level, latency=latency) if controlled else None
    comparison = stress_control.compare(
        what="seeds not reproducible", candidate=seeded_count(problems, plans),
        baseline=seeded_count(theirs, plans) if theirs is not None else None,
        where=f"(serially twice and at c={level})",
        top_up=seeded_top_up(candidate, stress_workload, stress_budget, stress_max_tokens, seed=suite_config.seed,
                             concurrency=level, latency=latency))
    witness.cover(findings, CHECK,
                  could_detect=f"a seeded sample that changes under load ({comparison.control_text()})")
    findings.add(seeded_budget_note(candidate, stress_budget, comparison))
    judged = record(findings, comparison, check=CHECK, control=stress_control, candidate=candidate,
                    examples=[line for _, line, _ in theirs or ()])
    if not judged or not problems:
        return
    lines = [line for _, line, _ in problems]
    findings.add(Finding(check=CHECK, severity="bug", route=candidate.name,
                         title=f"seeded sampling not reproducible ({comparison.sentence()}): {lines[0]}",
                         details={"cause": UNDER_LOAD, "problems": lines, "load_control": comparison.as_details(),
                                  "repro": seeded_repro(problems[0], plans, candidate=candidate, baseline=baseline,
                                                        concurrency=level)}))
    pytest.fail(f"candidate '{candidate.name}': " + "; ".join(lines[:5]), pytrace=False)
