"""The batch-size ramp (check family "batch-ramp"): bursts of 1, 3, 7, 15 ... requests up to the slots and back.

Why odd sizes: engines take other code paths at other batch sizes (CUDA graphs captured for 1, 2, 4, 8 pad a
batch of 7; a dynamic draft length switches past a threshold), and one less than a power of two pads the most.
Each step is one burst of exactly that many canary requests, every output compared with its serial reference
and judged by the near-tie policy, the same burst run on the baseline (stressors/control.py), and the engine's
health checked after the step (a step that leaves it unhealthy ends the ramp). Environment: none.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from spec_route_suite.reports.findings import UNDER_LOAD, UNHEALTHY, Finding
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, LoadComparison, record, resend
from spec_route_suite.stressors.driver import Budget, burst, failure_finding, plan
from spec_route_suite.stressors.pair import CanaryStressor
from spec_route_suite.stressors.kv_pressure.pressure import stated_slots

CHECK = "batch-ramp"
COULD = "a greedy output that changes at some batch size (padding rows, a batch-size threshold), or a crash there"
SERIAL = "the route serialises requests (capability concurrency=False): every batch has one row"


def ramp_sizes(top: int) -> list[int]:
    """1, 3, 7, 15, ... up to `top` (and `top` itself when odd), then back down: every size once, the top twice."""
    up, size = [], 1
    while size <= top:
        up.append(size)
        size = 2 * size + 1
    if top % 2 and up[-1] != top:
        up.append(top)
    return up + up[-2::-1]


@dataclass
class BatchRamp(CanaryStressor):
    """One ramp over the canary workload on the candidate: what differed (with its batch size), what failed."""

    check = CHECK
    sizes: list[int] = field(default_factory=list)
    slots: int | None = None
    broken: list = field(default_factory=list)    # (severity, batch size, outcome, why)
    problems: list[str] = field(default_factory=list)
    checked: int = 0
    steps: list = field(default_factory=list)   # (submissions, batch size) of each step sent: a control round resends them

    def plan_sizes(self, budget: Budget) -> None:
        """Up to the slots the route states, capped at the run's highest --concurrency."""
        self.slots = stated_slots(self.candidate.inventory())
        self.sizes = ramp_sizes(min(self.slots or max(budget.levels), max(budget.levels)))

    def run(self, findings, *, seed: int) -> None:
        candidate, workload = self.candidate, self.workload
        self.start()
        rng, latency = random.Random(f"ramp-{seed}"), mean_latency(self.references)
        for step, size in enumerate(self.sizes):
            keys = [workload.keys[(step * 7 + i) % len(workload.keys)] for i in range(size)]
            rng.shuffle(keys)
            subs = plan(((k, self.request(k)) for k in keys), offsets=burst(size), tag=f"ramp-{step}-b{size}")
            self.steps.append((subs, size))
            run = self.drive(subs, concurrency=size, latency=latency)
            self.control.run(subs, concurrency=size, mean_latency_s=latency)
            if run.failed:
                self.problems.append(findings.add(failure_finding(run, check=CHECK, route=candidate.name,
                                                                  what=f"ramp step {step} (batch {size})",
                                                                  repro=self.windows.failed(run))).title)
            self.checked += len(run.completed)
            self.broken += [(severity, size, outcome, why) for severity, outcome, why in self.mismatches(run.completed)]
            if not candidate.health():
                self.problems.append(findings.add(Finding(
                    check=CHECK, severity="error", route=candidate.name,
                    title=f"route unhealthy after ramp step {step} (a burst of {size}; sizes {self.sizes})",
                    details={"error_kind": UNHEALTHY})).title)
                break

    def comparison(self) -> LoadComparison:
        return self.control.compare(what="differ from their output alone", candidate=Count(len(self.broken),
                                                                                             self.checked),
                                    baseline=self.control.differing(), where=f"at batch sizes {self.sizes}",
                                    top_up=resend(self.candidate, self.references, self.steps,
                                                  mean_latency_s=mean_latency(self.references)))

    def record(self, findings) -> None:
        """The coverage row, the summary line, the control's verdict, and the bug finding when charged."""
        comparison, candidate, sizes = self.comparison(), self.candidate, self.sizes
        stated = "slots stated: " + str(self.slots) if self.slots else "no slots stated"
        self.witness.cover(findings, CHECK, could_detect=f"{COULD}; sizes {sizes} ({stated})",
                           counts={"outputs compared": self.checked})
        self.info(findings, f"batch-ramp: {self.checked} outputs at batch sizes {sizes}, {len(self.broken)} differ "
                            f"from their output alone; {comparison.control_text()}",
                  {"sizes": sizes, "slots": self.slots, "load_control": comparison.as_details()})
        judged = record(findings, comparison, check=CHECK, control=self.control, candidate=candidate)
        bugs = [b for b in self.broken if b[0] == "bug"]
        if not (bugs and judged):
            return
        by_size = sorted({size for _, size, _, _ in bugs})
        _, size, outcome, why = bugs[0]
        title = (f"{len(bugs)} greedy outputs differ from their output alone at batch sizes {by_size} of the ramp "
                 f"{sizes} ({comparison.sentence()}); e.g. {outcome.request_id} at batch {size}: {why}")
        findings.add(Finding(check=CHECK, severity="bug", route=candidate.name, prompt_id=outcome.key, title=title,
                             details={"cause": UNDER_LOAD, "sizes": sizes, "failing_sizes": by_size,
                                      "load_control": comparison.as_details(),
                                      "examples": [{"request": o.request_id, "batch": s, "why": w,
                                                    "got": o.completion.text[:200],
                                                    "alone": self.references[o.key].text[:200]}
                                                   for _, s, o, w in bugs[:10]],
                                      "repro": self.windows.repro(outcome.request_id)}))
        self.problems.append(title)
