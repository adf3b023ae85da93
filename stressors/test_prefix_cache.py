"""Prefix cache with speculation: a request that hits the cache must give the cold run's output.

Bug class: the second request that hits the prefix cache crashes the engine or answers
wrongly (sglang#19796, sglang#32459). Each run uses a shared prefix no cache has seen
(a fresh session nonce in the system message). The first variant is sent cold; then the
same prompt again (full hit), the other variants sharing the prefix (partial hits), all
of them again serially and in one burst (full hits, batched). Every repeat must equal the
prompt's first output; each variant's first output, computed with a warm prefix, must
equal the baseline's (an independent cold computation). The route must still be healthy.
A baseline that batches runs the same sequence (stressors/control.py): its first outputs are the parity
reference, and repeats that differ on it too make the candidate's cache-dependent outputs engine behaviour,
charged only by their excess.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import pytest

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.routes.textlevel import same_output
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.control import Count, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import LoadRun, burst, drive_handle, failure_finding, plan
from spec_route_suite.stressors.windows import window_repro
from spec_route_suite.reports.repro_spec import load_repro, parity_repro

pytestmark = pytest.mark.check("prefix-cache")


@dataclass
class CacheRun:
    """One route's pass over the prefix-cache sequence: each variant's first output and what repeated differently."""

    first: dict
    answers: list
    burst: LoadRun
    changed: list = field(default_factory=list)   # (item, first output, repeat output, label)
    compared: int = 0
    burst_plan: list = field(default_factory=list)   # the burst's submissions


def cache_sequence(route, variants, *, nonce: str, max_tokens: int, concurrency: int) -> CacheRun:
    """Cold, the same prompt again (full hit), the other variants (partial hits), all again serially in reverse,
    then all in one burst at `concurrency` (batched full hits); every repeat compared with the prompt's first."""
    answers = []

    def fresh(item, tag):
        answer = route.generate(item.request(max_tokens=max_tokens, request_id=f"prefix-{nonce}-{tag}-{item.key}"))
        answers.append(answer)
        return answer

    first, changed, compared = {}, [], 0

    def repeat(item, got, label: str) -> None:
        nonlocal compared
        compared += 1
        if got.token_ids != first[item.key].token_ids:
            changed.append((item, first[item.key], got, label))

    cold = variants.items[0]
    first[cold.key] = fresh(cold, "cold")
    again = fresh(cold, "full-hit")
    repeat(cold, again, f"{cold.key}: cold {first[cold.key].text!r}, same prompt again {again.text!r}")
    for item in variants.items[1:]:
        first[item.key] = fresh(item, "partial-hit")
    for item in reversed(variants.items):
        got = fresh(item, "repeat")
        repeat(item, got, f"{item.key}: first {first[item.key].text!r}, repeated {got.text!r}")
    subs = plan(((i.key, i.request(max_tokens=max_tokens)) for i in variants.items), offsets=burst(len(variants.items)),
                tag=f"prefix-{nonce}-burst")
    run = drive_handle(route, subs, concurrency=concurrency,
                       mean_latency_s=max(c.latency_s for c in first.values()))
    for outcome in run.completed:
        repeat(variants.get(outcome.key), outcome.completion,
               f"{outcome.key} in a burst of {len(subs)} at concurrency {concurrency}: first "
               f"{first[outcome.key].text!r}, cached {outcome.completion.text!r}")
    return CacheRun(first=first, answers=answers, burst=run, changed=changed, compared=compared, burst_plan=subs)


def test_cache_hits_give_the_cold_output(candidate, baseline, tokenizer, sized_workload, stress_budget, stress_max_tokens,
                                         suite_config, near_tie_policy, stress_control, findings):
    nonce = secrets.token_hex(3)
    variants = sized_workload(size=stress_budget.prefix_variants, seed=suite_config.seed + 7919, task_share=0.0,
                              nonce=nonce)
    mt = stress_max_tokens
    level = stress_budget.batch(max(stress_budget.levels))
    witness = LoadWitness(candidate)
    ours = cache_sequence(candidate, variants, nonce=nonce, max_tokens=mt, concurrency=level)
    witness.add(ours.burst)
    theirs = (cache_sequence(baseline, variants, nonce=nonce, max_tokens=mt, concurrency=level)
              if stress_control.available else None)
    first, run = ours.first, ours.burst
    cover_cache_hits(findings, candidate, [*ours.answers, *(o.completion for o in run.completed)], witness)
    if run.failed:
        first_failed = min(run.failed, key=lambda o: o.ended_s).request_id
        findings.add(failure_finding(run, check="prefix-cache", route=candidate.name, what="cached-prefix burst",
                                     repro=window_repro(run, ours.burst_plan, first_failed, candidate=candidate,
                                                        baseline=baseline)))
    comparison = stress_control.compare(what="repeats differ from the prompt's first output",
                                        candidate=Count(len(ours.changed), ours.compared),
                                        baseline=Count(len(theirs.changed), theirs.compared) if theirs else None,
                                        where=f"(serial hits and a burst at c={level})")
    judged = record(findings, comparison, check="prefix-cache", control=stress_control, candidate=candidate,
                    examples=[label for *_, label in theirs.changed] if theirs else [])
    problems: list[str] = []
    ties: list[str] = []
    for item, expected, got, label in (ours.changed if judged else ()):
        severity, why = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer, prompt_ids=item.prompt_ids,
                                              expected=expected, got=got, max_tokens=mt)
        (problems if severity == "bug" else ties).append(f"{label} ({why})")
    mismatched_baseline = []
    for item in variants.items:
        expected = theirs.first[item.key] if theirs else baseline.generate(
            item.request(max_tokens=mt, request_id=f"prefix-{nonce}-base-{item.key}"))
        if not same_output(expected, first[item.key]):  # by text when the candidate's server gives no ids
            at = first_divergence(baseline=expected.token_ids, candidate=first[item.key].token_ids)
            severity, why = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer, prompt_ids=item.prompt_ids,
                                                  expected=expected, got=first[item.key], max_tokens=mt)
            mismatched_baseline.append((severity, f"{item.key}: baseline {expected.text!r}, candidate with the prefix "
                                                  f"cached {first[item.key].text!r} (token {at}; {why})"))
    healthy = candidate.health()
    # each variant alone (the first warms the cache), then all of them at once: the repeats must not change
    cache_repro = load_repro([(i.request(max_tokens=mt), 0, None) for i in variants.items], candidate=candidate,
                             baseline=baseline, concurrency=level, note="variants sharing one prefix: first alone "
                                                                        "(cache warm-up), then together")
    summary = (f"prefix cache: {len(variants.items)} variants sharing a {variants.prefix_tokens}-token prefix, "
               f"{2 * len(variants.items) + 1 + len(run.completed)} candidate requests; "
               f"{len(ours.changed)} cache-dependent outputs, {len(mismatched_baseline)} differ from the baseline; "
               f"{comparison.control_text()}")
    findings.add(Finding(check="prefix-cache", severity="info", route=candidate.name, title=summary,
                         details={"nonce": nonce, "budget": stress_budget.describe(),
                                  "load_control": comparison.as_details()}))
    if not healthy:
        findings.add(Finding(check="prefix-cache", severity="error", route=candidate.name,
                             title=f"route unhealthy after prefix-cache requests (health check false)"))
    for severity in ("bug", "near-tie"):
        lines = [line for s, line in mismatched_baseline if s == severity]
        if lines:
            findings.add(Finding(check="prefix-cache", severity=severity, route=candidate.name,
                                 title=f"{len(lines)} outputs with a cached shared prefix differ from the "
                                       f"baseline ({severity}): {lines[0]}",
                                 details={"examples": lines[:10], "repro": parity_repro(
                                     [i.request(max_tokens=mt) for i in variants.items], candidate=candidate,
                                     baseline=baseline)}))
    if ties:
        findings.add(Finding(check="prefix-cache", severity="near-tie", route=candidate.name,
                             title=f"{len(ties)} cache-dependent outputs at a numerical near-tie: {ties[0]}",
                             details={"examples": ties[:10], "repro": cache_repro}))
    if problems:
        findings.add(Finding(check="prefix-cache", severity="bug", route=candidate.name,
                             title=f"output depends on the prefix cache ({comparison.sentence()}): {problems[0]}",
                             details={"examples": problems[:10], "repro": cache_repro}))
    failing = problems + [line for s, line in mismatched_baseline if s == "bug"]
    if failing or not healthy:
        pytest.fail(f"candidate '{candidate.name}' vs baseline '{baseline.name}': "
                    + "; ".join(failing[:5] or ["unhealthy after cache hits"]), pytrace=False)


def cover_cache_hits(findings, candidate, completions, witness: LoadWitness) -> None:
    """Verified only when the cache was really hit (usage.prompt_tokens_details.cached_tokens) and the
    burst really shared engine steps; not applicable when the engine says it has no prefix cache."""
    reported = [c.cached_tokens for c in completions if c.cached_tokens is not None]
    hits = sum(reported)
    has_cache = (candidate.inventory().extra or {}).get("prefix_cache")
    ran = {"requests": len(completions), "cached prompt tokens": hits}
    could = "an output that changes when its prefix comes from the cache"
    if has_cache is False:
        findings.cover("prefix-cache", candidate.name, verified=False, applicable=False, ran=ran, could_detect=could,
                       reason="the engine has no prefix cache (its inventory says so): the bug class cannot occur")
        return
    batched, why, _ = witness.verdict()
    if hits <= 0:
        reason = ("zero prefix-cache hits reported" if reported else
                  "the route reports no cached tokens (no usage.prompt_tokens_details.cached_tokens)")
        findings.cover("prefix-cache", candidate.name, verified=False, ran=ran, could_detect=could,
                       reason=f"{reason}: a cache that was never hit cannot be judged")
        return
    findings.cover("prefix-cache", candidate.name, verified=batched, ran=ran,
                   could_detect=f"{could} ({hits} cached prompt tokens)", reason="" if batched else why)
