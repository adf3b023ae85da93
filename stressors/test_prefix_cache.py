"""Prefix cache with speculation: a request that hits the cache must give the cold run's output.

Bug class: the second request that hits the prefix cache crashes the engine or answers
wrongly (sglang#19796, sglang#32459). Each run uses a shared prefix no cache has seen
(a fresh session nonce in the system message). The first variant is sent cold; then the
same prompt again (full hit), the other variants sharing the prefix (partial hits), all
of them again serially and in one burst (full hits, batched). Every repeat must equal the
prompt's first output; each variant's first output, computed with a warm prefix, must
equal the baseline's (an independent cold computation). The route must still be healthy.
"""
from __future__ import annotations

import secrets

import pytest

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.fixtures.routes.textlevel import same_output
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan

pytestmark = pytest.mark.check("prefix-cache")


def test_cache_hits_give_the_cold_output(candidate, baseline, sized_workload, stress_budget, stress_max_tokens,
                                         suite_config, findings):
    nonce = secrets.token_hex(3)
    variants = sized_workload(size=stress_budget.prefix_variants, seed=suite_config.seed + 7919, task_share=0.0,
                              nonce=nonce)
    mt = stress_max_tokens
    problems: list[str] = []

    def fresh(item, tag):
        return candidate.generate(item.request(max_tokens=mt, request_id=f"prefix-{nonce}-{tag}-{item.key}"))

    first = {}
    cold = variants.items[0]
    first[cold.key] = fresh(cold, "cold")
    again = fresh(cold, "full-hit")
    if again.token_ids != first[cold.key].token_ids:
        problems.append(f"{cold.key}: cold {first[cold.key].text!r}, same prompt again {again.text!r}")
    for item in variants.items[1:]:
        first[item.key] = fresh(item, "partial-hit")
    for item in reversed(variants.items):
        repeat = fresh(item, "repeat")
        if repeat.token_ids != first[item.key].token_ids:
            problems.append(f"{item.key}: first {first[item.key].text!r}, repeated {repeat.text!r}")
    subs = plan(((i.key, i.request(max_tokens=mt)) for i in variants.items), offsets=burst(len(variants.items)),
                tag=f"prefix-{nonce}-burst")
    level = stress_budget.batch(max(stress_budget.levels))
    latency = max(c.latency_s for c in first.values())
    run = drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency)
    if run.failed:
        findings.add(failure_finding(run, check="prefix-cache", route=candidate.name, what="cached-prefix burst"))
    for outcome in run.completed:
        if outcome.completion.token_ids != first[outcome.key].token_ids:
            problems.append(f"{outcome.key} in a burst of {len(subs)} at concurrency {level}: first "
                            f"{first[outcome.key].text!r}, cached {outcome.completion.text!r}")
    mismatched_baseline = []
    for item in variants.items:
        expected = baseline.generate(item.request(max_tokens=mt, request_id=f"prefix-{nonce}-base-{item.key}"))
        if not same_output(expected, first[item.key]):  # by text when the candidate's server gives no ids
            at = first_divergence(baseline=expected.token_ids, candidate=first[item.key].token_ids)
            mismatched_baseline.append(f"{item.key}: baseline {expected.text!r}, candidate with the prefix cached "
                                       f"{first[item.key].text!r} (token {at})")
    healthy = candidate.health()
    summary = (f"prefix cache: {len(variants.items)} variants sharing a {variants.prefix_tokens}-token prefix, "
               f"{2 * len(variants.items) + 1 + len(run.completed)} candidate requests; "
               f"{len(problems)} cache-dependent outputs, {len(mismatched_baseline)} differ from the baseline")
    findings.add(Finding(check="prefix-cache", severity="info", route=candidate.name, title=summary,
                         details={"nonce": nonce, "budget": stress_budget.describe()}))
    if not healthy:
        findings.add(Finding(check="prefix-cache", severity="error", route=candidate.name,
                             title=f"route unhealthy after prefix-cache requests (health check false)"))
    if mismatched_baseline:
        severity = "bug" if suite_config.greedy_policy == "strict" else "warning"
        findings.add(Finding(check="prefix-cache", severity=severity, route=candidate.name,
                             title=f"{len(mismatched_baseline)} outputs with a cached shared prefix differ from the "
                                   f"baseline: {mismatched_baseline[0]}",
                             details={"examples": mismatched_baseline[:10]}))
    if problems:
        findings.add(Finding(check="prefix-cache", severity="bug", route=candidate.name,
                             title=f"output depends on the prefix cache: {problems[0]}",
                             details={"examples": problems[:10]}))
    failing = problems + (mismatched_baseline if suite_config.greedy_policy == "strict" else [])
    if failing or not healthy:
        pytest.fail(f"candidate '{candidate.name}' vs baseline '{baseline.name}': "
                    + "; ".join(failing[:5] or ["unhealthy after cache hits"]), pytrace=False)
