"""The prefix-cache sequence (check family "prefix-cache"): cold, full hits, partial hits, a burst of hits.

Each run's variants share a prefix no cache has seen (a fresh nonce in the system message). `cache_sequence`
sends them in the order that makes the cache hit; every repeat must equal the prompt's first output, each
variant's first output (computed with a warm prefix) must equal the baseline's first output for it, and the route
must stay healthy. A baseline that batches runs the same sequence (stressors/control.py): its first outputs are the
parity reference, and its own cache-dependent repeats make the candidate's engine behaviour. The reference is cold
for the first variant, and for the others only where the baseline has no prefix cache (`reference_kind` says
which, in the summary finding). Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.reports.findings import UNHEALTHY, Finding
from spec_route_suite.reports.repro_spec import load_repro, parity_repro
from spec_route_suite.routes.textlevel import same_output
from spec_route_suite.stressors.control import Count, LoadComparison, LoadControl
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import LoadRun, burst, drive_handle, failure_finding, plan
from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.windows import window_repro

CHECK = "prefix-cache"


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


def reference_kind(baseline) -> str:
    """What the parity reference is: the baseline's first output for each variant, cold only where it has no cache."""
    cache = (baseline.inventory().extra or {}).get("prefix_cache")
    if cache is False:
        return "cold: the baseline states it has no prefix cache, so each of its first outputs is computed cold"
    state = "has a prefix cache" if cache else "does not state whether it has a prefix cache"
    return (f"cold for the first variant only: the baseline {state}, and its first outputs for the other variants "
            f"come after the shared prefix was sent to it (a cache bug both engines share is not seen here)")


def cover_cache_hits(findings, candidate, completions, witness: LoadWitness) -> None:
    """Verified only when the cache was really hit (usage.prompt_tokens_details.cached_tokens) and the
    burst really shared engine steps; not applicable when the engine says it has no prefix cache."""
    reported = [c.cached_tokens for c in completions if c.cached_tokens is not None]
    hits = sum(reported)
    has_cache = (candidate.inventory().extra or {}).get("prefix_cache")
    ran = {"requests": len(completions), "cached prompt tokens": hits}
    could = "an output that changes when its prefix comes from the cache"
    if has_cache is False:
        findings.cover(CHECK, candidate.name, verified=False, applicable=False, ran=ran, could_detect=could,
                       reason="the engine has no prefix cache (its inventory says so): the bug class cannot occur")
        return
    batched, why, _ = witness.verdict()
    if hits <= 0:
        reason = ("zero prefix-cache hits reported" if reported else
                  "the route reports no cached tokens (no usage.prompt_tokens_details.cached_tokens)")
        findings.cover(CHECK, candidate.name, verified=False, ran=ran, could_detect=could,
                       reason=f"{reason}: a cache that was never hit cannot be judged")
        return
    findings.cover(CHECK, candidate.name, verified=batched, ran=ran,
                   could_detect=f"{could} ({hits} cached prompt tokens)", reason="" if batched else why)


@dataclass
class PrefixCacheCheck:
    """The sequence on the candidate (and on the baseline when it batches), and what differed."""

    pair: LoadPair
    variants: object
    nonce: str
    level: int
    control: LoadControl
    ours: CacheRun | None = None
    theirs: CacheRun | None = None
    problems: list[str] = field(default_factory=list)   # cache-dependent outputs beyond a near-tie
    ties: list[str] = field(default_factory=list)
    vs_baseline: list = field(default_factory=list)     # (severity, line): first outputs that differ from the baseline

    def send(self, findings) -> None:
        """Both sequences, the coverage row, and the burst's failed requests."""
        candidate, baseline, mt = self.pair.candidate, self.pair.baseline, self.pair.max_tokens
        witness = LoadWitness(candidate)
        self.ours = ours = cache_sequence(candidate, self.variants, nonce=self.nonce, max_tokens=mt,
                                          concurrency=self.level)
        witness.add(ours.burst)
        self.theirs = (cache_sequence(baseline, self.variants, nonce=self.nonce, max_tokens=mt, concurrency=self.level)
                       if self.control.available else None)
        run = ours.burst
        cover_cache_hits(findings, candidate, [*ours.answers, *(o.completion for o in run.completed)], witness)
        if run.failed:
            first_failed = min(run.failed, key=lambda o: o.ended_s).request_id
            findings.add(failure_finding(run, check=CHECK, route=candidate.name, what="cached-prefix burst",
                                         repro=window_repro(run, ours.burst_plan, first_failed, candidate=candidate,
                                                            baseline=baseline)))

    def comparison(self) -> LoadComparison:
        ours, theirs = self.ours, self.theirs
        return self.control.compare(what="repeats differ from the prompt's first output",
                                    candidate=Count(len(ours.changed), ours.compared),
                                    baseline=Count(len(theirs.changed), theirs.compared) if theirs else None,
                                    where=f"(serial hits and a burst at c={self.level})")

    def judge(self, *, charged: bool) -> None:
        """Cache-dependent repeats (when charged) as near-ties or problems, then each variant's first output
        against the baseline's (its control's first output, or one request alone)."""
        for item, expected, got, label in (self.ours.changed if charged else ()):
            severity, why = self.pair.judge(item.prompt_ids, expected, got)
            (self.problems if severity == "bug" else self.ties).append(f"{label} ({why})")
        first = self.ours.first
        for item in self.variants.items:
            expected = self.theirs.first[item.key] if self.theirs else self.pair.baseline.generate(
                item.request(max_tokens=self.pair.max_tokens, request_id=f"prefix-{self.nonce}-base-{item.key}"))
            if not same_output(expected, first[item.key]):  # by text when the candidate's server gives no ids
                at = first_divergence(baseline=expected.token_ids, candidate=first[item.key].token_ids)
                severity, why = self.pair.judge(item.prompt_ids, expected, first[item.key])
                self.vs_baseline.append((severity, f"{item.key}: baseline {expected.text!r}, candidate with the "
                                                   f"prefix cached {first[item.key].text!r} (token {at}; {why})"))

    def failing(self) -> list[str]:
        return self.problems + [line for s, line in self.vs_baseline if s == "bug"]

    def record(self, findings, comparison: LoadComparison, *, healthy: bool, budget) -> None:
        """The summary line, an unhealthy route, differences from the baseline, cache-dependent outputs."""
        candidate, mt, items = self.pair.candidate, self.pair.max_tokens, self.variants.items
        # each variant alone (the first warms the cache), then all of them at once: the repeats must not change
        cache_repro = load_repro([(i.request(max_tokens=mt), 0, None) for i in items], candidate=candidate,
                                 baseline=self.pair.baseline, concurrency=self.level,
                                 note="variants sharing one prefix: first alone (cache warm-up), then together")
        summary = (f"prefix cache: {len(items)} variants sharing a {self.variants.prefix_tokens}-token prefix, "
                   f"{2 * len(items) + 1 + len(self.ours.burst.completed)} candidate requests; "
                   f"{len(self.ours.changed)} cache-dependent outputs, {len(self.vs_baseline)} differ from the "
                   f"baseline; {comparison.control_text()}")
        findings.add(Finding(check=CHECK, severity="info", route=candidate.name, title=summary,
                             details={"nonce": self.nonce, "budget": budget.describe(),
                                      "reference": reference_kind(self.pair.baseline),
                                      "load_control": comparison.as_details()}))
        if not healthy:
            findings.add(Finding(check=CHECK, severity="error", route=candidate.name,
                                 title="route unhealthy after prefix-cache requests (health check false)",
                                 details={"error_kind": UNHEALTHY}))
        for severity in ("bug", "near-tie"):
            lines = [line for s, line in self.vs_baseline if s == severity]
            if lines:
                findings.add(Finding(check=CHECK, severity=severity, route=candidate.name,
                                     title=f"{len(lines)} outputs with a cached shared prefix differ from the "
                                           f"baseline ({severity}): {lines[0]}",
                                     details={"examples": lines[:10], "repro": parity_repro(
                                         [i.request(max_tokens=mt) for i in items], candidate=candidate,
                                         baseline=self.pair.baseline)}))
        if self.ties:
            findings.add(Finding(check=CHECK, severity="near-tie", route=candidate.name,
                                 title=f"{len(self.ties)} cache-dependent outputs at a numerical near-tie: "
                                       f"{self.ties[0]}",
                                 details={"examples": self.ties[:10], "repro": cache_repro}))
        if self.problems:
            findings.add(Finding(check=CHECK, severity="bug", route=candidate.name,
                                 title=f"output depends on the prefix cache ({comparison.sentence()}): "
                                       f"{self.problems[0]}",
                                 details={"examples": self.problems[:10], "repro": cache_repro}))
