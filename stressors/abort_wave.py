"""The abort wave (check family "aborts"): half of a burst hangs up mid-generation; the route must survive it.

The wave is planned once (which requests hang up, and when: a share of each prompt's serial latency) and run
on the candidate and, when it batches, on the baseline (stressors/control.py). Afterwards the candidate must
answer a bounded health check and a canary request alone with the canary's serial output; a route that dies
or hangs becomes a finding naming the request and the clock time. Environment: none.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import load_repro
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, LoadComparison, record
from spec_route_suite.stressors.driver import LoadRun, Submission, burst, failure_finding, plan, round_robin
from spec_route_suite.stressors.mixing import MixingReport, detect
from spec_route_suite.stressors.pair import CanaryStressor
from spec_route_suite.stressors.windows import window_steps

CHECK = "aborts"
HEALTH_TIMEOUT_S = 30.0
ABORT_FRACTION = (0.2, 0.8)  # of the prompt's serial latency: mid-generation for most requests


def clock() -> str:
    return time.strftime("%H:%M:%S")


@dataclass
class AbortWave(CanaryStressor):
    """One wave of requests, every other one hung up mid-generation, on the candidate and its load control."""

    check = CHECK
    problems: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    subs: list[Submission] = field(default_factory=list)
    level: int = 0
    run: LoadRun | None = None
    report: MixingReport | None = None
    theirs: MixingReport | None = None

    @property
    def stream(self) -> bool:
        return self.candidate.capabilities.stream

    def plan_wave(self, budget, *, seed: int) -> None:
        """Which requests hang up and when (streamed when the route streams, so the connection really closes)."""
        rng, refs = random.Random(f"aborts-{seed}"), self.references
        self.level = budget.batch(max(budget.levels))
        self.keys = keys = round_robin(self.workload.keys, budget.abort_wave, rng=rng)
        hang_ups = [rng.uniform(*ABORT_FRACTION) * refs[k].latency_s if i % 2 == 0 else None
                    for i, k in enumerate(keys)]
        self.subs = plan(((k, self.request(k, stream=self.stream and h is not None)) for k, h in zip(keys, hang_ups)),
                         offsets=burst(len(keys)), tag="abort", abort_after_s=hang_ups)

    def send(self, findings) -> LoadComparison:
        """The wave on both routes; the requests beside the hung-up ones compared with their serial outputs."""
        latency = mean_latency(self.references)
        self.start()
        self.run = self.drive(self.subs, concurrency=self.level, latency=latency)
        control = self.control.run(self.subs, concurrency=self.level, mean_latency_s=latency)
        self.report = detect(workload=self.workload, references=self.references, outcomes=self.run.outcomes)
        self.theirs = (detect(workload=self.workload, references=self.control.references, outcomes=control.outcomes)
                       if control else None)
        comparison = self.control.compare(what="beside hung-up clients lost their serial output",
                                          candidate=Count(len(self.report.mismatches), self.report.checked),
                                          baseline=(Count(len(self.theirs.mismatches), self.theirs.checked)
                                                    if self.theirs else None), where=f"at c={self.level}")
        self.witness.cover(findings, CHECK, could_detect=f"a hang-up that corrupts the requests beside it or kills the "
                                                         f"engine ({comparison.control_text()})")
        return comparison

    def judge_wave(self, findings, comparison: LoadComparison) -> None:
        """Failed requests of the wave, and outputs beside hung-up clients that changed (when charged)."""
        run, candidate = self.run, self.candidate
        if run.failed:
            self.problems.append(findings.add(failure_finding(run, check=CHECK, route=candidate.name,
                                                              what="abort wave", repro=self.windows.failed(run))).title)
        judged = record(findings, comparison, check=CHECK, control=self.control, candidate=candidate,
                        examples=[a.line() for a in self.theirs.mismatches] if self.theirs else [])
        if self.report.mismatches and judged:
            lines = [a.line() for a in self.report.mismatches]
            findings.add(Finding(check=CHECK, severity="bug", route=candidate.name,
                                 title=f"{len(lines)} requests beside hung-up clients lost their serial output "
                                       f"({comparison.sentence()}): {lines[0]}",
                                 details={"examples": lines[:10], "load_control": comparison.as_details(),
                                          "repro": self.windows.repro(self.report.mismatches[0].victim_request)}))
            self.problems.append(lines[0])

    @property
    def aborted(self) -> int:
        return sum(o.aborted for o in self.run.outcomes)

    def check_health(self, findings) -> None:
        healthy, health_error = False, ""
        try:
            healthy = self.candidate.run(self.candidate.route.health(), timeout_s=HEALTH_TIMEOUT_S,
                                         request_id="health")
        except RouteError as exc:
            health_error = exc.describe()
        if not healthy:
            title = f"route unhealthy after {self.aborted} client disconnects: health check at {clock()} " + (
                f"failed: {health_error}" if health_error else "returned false")
            findings.add(Finding(check=CHECK, severity="error", route=self.candidate.name, title=title))
            self.problems.append(title)

    def check_canary(self, findings) -> None:
        """A canary alone after the wave, bounded in time, must equal its serial output."""
        candidate, refs, workload = self.candidate, self.references, self.workload
        item = next(iter(workload.recall()), workload.items[0])
        canary_id = f"post-abort-canary-{item.key}"
        timeout = min(candidate.timeout_s, max(10.0, 50 * refs[item.key].latency_s))
        try:
            after = candidate.generate(self.request(item.key, request_id=canary_id, timeout_s=timeout))
            if after.token_ids != refs[item.key].token_ids:
                title = (f"after {self.aborted} disconnects the canary {canary_id} answered {after.text!r}, alone "
                         f"before the wave {refs[item.key].text!r}")
                findings.add(Finding(check=CHECK, severity="bug", route=candidate.name, prompt_id=item.key,
                                     title=title, details={"repro": self._canary_repro(item)}))
                self.problems.append(title)
        except RouteError as exc:
            title = (f"route dead or hung after {self.aborted} disconnects: canary {canary_id} at {clock()}: "
                     f"{exc.describe()}")
            findings.add(Finding(check=CHECK, severity="error", route=candidate.name, prompt_id=item.key, title=title,
                                 details={"request_id": canary_id, "error_kind": exc.kind}))
            self.problems.append(title)

    def _canary_repro(self, item) -> dict:
        """The hang-ups of the wave, then the canary after it."""
        wave = window_steps(self.run, self.subs, self.run.outcomes[0].request_id, limit=len(self.run.outcomes))[:11]
        canary = (self.request(item.key, request_id="repro-canary"),
                  round(1000 * max(self.references[k].latency_s for k in self.keys)), None)
        return load_repro([*wave, canary], candidate=self.candidate, baseline=self.pair.baseline,
                          concurrency=self.level, note="hang-ups, then the canary after the wave")
