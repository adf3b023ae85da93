"""The KV-pressure burst (check family "kv-pressure"): its plan, its run on both routes, and its verdict.

The sizing rules are stressors/kv_pressure/pressure.py's; here the shortest prompts of the run are sent many times at
once with long answers (ignore_eos), each compared with the same request alone, the engine's preemption
counter read around the burst, and the same burst run on the baseline when it batches. Environment: none.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from spec_route_suite.reports.findings import UNDER_LOAD, UNHEALTHY, Finding
from spec_route_suite.routes.base import Request
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import LoadComparison, LoadControl, differing, record, resend
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import LoadRun, burst, drive_handle, failure_finding, plan, round_robin
from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.kv_pressure.pressure import (SHORT_PROMPTS, PreemptionCounter, PressurePlan,
                                                             kv_capacity, plan_pressure, stated_slots)
from spec_route_suite.stressors.windows import LoadRuns

CHECK = "kv-pressure"
COULD = "outputs of requests preempted or retracted mid-draft that differ from their serial output (draft state lost)"
SERIAL = "the route serialises requests (capability concurrency=False): its KV never fills"


def short_prompts(records, fitted_prompts) -> dict[str, tuple[int, ...]]:
    """The SHORT_PROMPTS shortest prompts of the pool, as sent: short prompts leave the KV to long answers."""
    shortest = sorted(records, key=lambda r: len(fitted_prompts.ids(r)))[:SHORT_PROMPTS]
    return {r.id: fitted_prompts.ids(r) for r in shortest}


def pressure_plan(candidate, prompts: dict[str, tuple[int, ...]], context_fit, budget) -> PressurePlan:
    """Sized from the pool and slots the candidate states, at the run's highest concurrency, within the context."""
    room = None if context_fit.limit is None else context_fit.limit - max(map(len, prompts.values())) - 1
    inventory = candidate.inventory()
    return plan_pressure(capacity=kv_capacity(inventory, candidate.spec), concurrency=max(budget.levels),
                         prompt_tokens=[len(p) for p in prompts.values()], room=room,
                         requests=budget.pressure_requests, slots=stated_slots(inventory))


@dataclass
class KvBurst:
    """One burst under KV pressure on the candidate, its serial references, and the baseline's same burst."""

    pair: LoadPair      # max_tokens: the plan's answer length
    pressure: PressurePlan
    prompts: dict
    seed: int
    alpha: float
    requests: dict = field(default_factory=dict)
    references: dict = field(default_factory=dict)
    run: LoadRun | None = None
    preempted: int | None = None
    broken: list = field(default_factory=list)   # (severity, outcome, why)
    control: LoadControl | None = None
    subs: list = field(default_factory=list)
    witness: LoadWitness | None = None
    windows: LoadRuns | None = None

    def send(self) -> None:
        candidate, baseline, pressure = self.pair.candidate, self.pair.baseline, self.pressure
        self.requests = {key: Request(prompt_ids=ids, max_tokens=pressure.max_tokens, ignore_eos=True,
                                      request_id=f"kv-{key}") for key, ids in self.prompts.items()}
        self.references = {key: candidate.generate(req) for key, req in self.requests.items()}
        keys = round_robin(list(self.requests), pressure.requests, rng=random.Random(f"kv-{self.seed}"))
        self.subs = subs = plan(((k, self.requests[k]) for k in keys), offsets=burst(len(keys)), tag="kv")
        counter, self.witness = PreemptionCounter(candidate), LoadWitness(candidate)
        self.windows = LoadRuns(candidate=candidate, baseline=baseline)
        self.run = self.windows.add(self.witness.add(drive_handle(
            candidate, subs, concurrency=pressure.concurrency, mean_latency_s=mean_latency(self.references))), subs)
        self.preempted = counter.since()
        self.control = LoadControl(baseline, {k: baseline.generate(r) for k, r in self.requests.items()}
                                   if baseline.capabilities.concurrency else None, alpha=self.alpha)
        self.control.run(subs, concurrency=pressure.concurrency, mean_latency_s=mean_latency(self.references))
        self.broken = self.pair.mismatches(self.run.completed, self.references,
                                           lambda key: self.requests[key].prompt_ids)

    def evidence(self) -> str:
        return (f"{self.preempted} preemption(s) by the engine's own counter" if self.preempted is not None else
                "the engine states no preemption counter")

    def comparison(self) -> LoadComparison:
        return self.control.compare(what="differ from their serial output",
                                    candidate=differing(self.run.outcomes, self.references),
                                    baseline=self.control.differing(),
                                    where=f"at c={self.pressure.concurrency} under KV pressure",
                                    top_up=resend(self.pair.candidate, self.references,
                                                  [(self.subs, self.pressure.concurrency)],
                                                  mean_latency_s=mean_latency(self.references)))

    def cover(self, findings, comparison: LoadComparison) -> None:
        """The measurement, the coverage row (verified only when the engine's counter shows a preemption) and
        the summary line."""
        run, pressure, preempted, evidence = self.run, self.pressure, self.preempted, self.evidence()
        findings.measure("kv_pressure", route=self.pair.candidate.name, preemptions=preempted,
                         requests=len(run.outcomes), capacity=pressure.capacity, offered=pressure.offered,
                         concurrency=pressure.concurrency, max_tokens=pressure.max_tokens,
                         mismatches=len(self.broken), failed=len(run.failed))
        verified, why, ran = self.witness.verdict()
        findings.cover(CHECK, self.pair.candidate.name, verified=verified and bool(preempted),
                       ran={**ran, "preemptions": preempted or 0}, could_detect=f"{COULD} ({pressure.describe()})",
                       reason="" if verified and preempted else
                       (why if not verified else f"no request was proven preempted: {evidence} "
                                                 f"({pressure.describe()})"))
        findings.add(Finding(check=CHECK, severity="info", route=self.pair.candidate.name,
                             title=f"kv-pressure: {run.describe()}; {evidence}; {comparison.control_text()}",
                             details={"plan": pressure.describe(), "preemptions": preempted,
                                      "load_control": comparison.as_details()}))

    def problems(self, findings, comparison: LoadComparison) -> list[str]:
        """Failed requests, an unhealthy engine after the burst, outputs that differ (when charged)."""
        candidate, run, evidence, problems = self.pair.candidate, self.run, self.evidence(), []
        if run.failed:
            problems.append(findings.add(failure_finding(run, check=CHECK, route=candidate.name,
                                                         what="KV-pressure burst",
                                                         repro=self.windows.failed(run))).title)
        if not candidate.health():
            problems.append(findings.add(Finding(check=CHECK, severity="error", route=candidate.name,
                                                 title=f"route unhealthy after the KV-pressure burst "
                                                       f"({evidence})", details={"error_kind": UNHEALTHY})).title)
        judged = record(findings, comparison, check=CHECK, control=self.control, candidate=candidate)
        bugs = [b for b in self.broken if b[0] == "bug"]
        if bugs and judged:
            problems.append(findings.add(self.bug_finding(bugs, comparison)).title)
        return problems

    def bug_finding(self, bugs, comparison: LoadComparison) -> Finding:
        _, outcome, why = bugs[0]
        title = (f"{len(bugs)} of {len(self.run.completed)} outputs under KV pressure differ from their serial "
                 f"output ({self.evidence()}; {comparison.sentence()}); e.g. {outcome.request_id}: {why}")
        return Finding(check=CHECK, severity="bug", route=self.pair.candidate.name, prompt_id=outcome.key,
                       title=title, details={
                           "cause": UNDER_LOAD,
                           "examples": [{"request": o.request_id, "why": w, "got": o.completion.text[:200],
                                         "alone": self.references[o.key].text[:200]} for _, o, w in bugs[:10]],
                           "plan": self.pressure.describe(), "preemptions": self.preempted,
                           "load_control": comparison.as_details(),
                           "repro": self.windows.whole(outcome.request_id,
                                                       note="replayed under the same KV pressure")})
