"""The abort wave (check family "aborts"): half of a burst hangs up mid-generation; the route must survive it.

The wave is planned once (which requests hang up, and when: a share of each prompt's serial latency) and run
on the candidate and, when it batches, on the baseline (stressors/control.py). Afterwards the candidate must
answer a bounded health check and a canary request alone with the canary's serial output; a route that dies
or hangs becomes a finding naming the request and the clock time, and is marked hung for the rest of the run
(spec_route_suite/routes/hangs.py: later tests give it a bounded chance to recover, and otherwise read "not
verified: route hung"). When the candidate stops answering, the baseline that ran the same wave is asked too:
a hang on both routes is one engine finding about the server, not a speculation finding. Only a candidate
that still answers gets more rounds of the wave bought by its load control. Environment: none.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from spec_route_suite.reports.findings import UNDER_LOAD, UNHEALTHY, Finding
from spec_route_suite.reports.repro_spec import load_repro
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, LoadComparison, record, resend
from spec_route_suite.stressors.driver import (LoadRun, Submission, burst, failure_details, failure_finding, plan,
                                               round_robin)
from spec_route_suite.stressors.mixing.detect import MixingReport, detect
from spec_route_suite.stressors.pair import CanaryStressor
from spec_route_suite.stressors.windows import window_steps

CHECK = "aborts"
SURVIVAL_PART = "survives client disconnects"
ABORT_FRACTION = (0.2, 0.8)  # of the prompt's serial latency: mid-generation for most requests


def clock() -> str:
    return time.strftime("%H:%M:%S")


@dataclass(frozen=True)
class AfterWave:
    """One route after the wave: its health check, and its canary's answer (None: no answer, `error` says why)."""

    route: str
    healthy: bool
    canary: Completion | None
    error: str = ""
    error_kind: str = ""
    at: str = ""
    request: Request | None = None   # the canary sent

    @property
    def stopped(self) -> bool:
        """No answer to the canary: the route died or hung."""
        return self.canary is None

    def why(self) -> str:
        return self.error or ("/health unanswered" if not self.healthy else "answered")

    def as_details(self) -> dict:
        return {"route": self.route, "healthy": self.healthy, "canary_answered": not self.stopped,
                "error": self.error, "error_kind": self.error_kind, "at": self.at}


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
    engine_hang: bool = False   # both routes stopped answering: an engine finding, nothing charged to the candidate

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

    def send(self) -> None:
        """The wave on both routes; the requests beside the hung-up ones compared with their serial outputs."""
        latency = mean_latency(self.references)
        self.start()
        self.run = self.drive(self.subs, concurrency=self.level, latency=latency)
        control = self.control.run(self.subs, concurrency=self.level, mean_latency_s=latency)
        self.report = detect(workload=self.workload, references=self.references, outcomes=self.run.outcomes)
        self.theirs = (detect(workload=self.workload, references=self.control.references, outcomes=control.outcomes)
                       if control else None)

    def comparison(self, findings, *, buy: bool) -> LoadComparison:
        """Both routes' losses beside hung-up clients; with `buy` (the candidate still answers) more waves are bought
        while the control cannot tell the rates apart. The coverage row of the wave."""
        comparison = self.control.compare(what="beside hung-up clients lost their serial output",
                                          candidate=Count(len(self.report.mismatches), self.report.checked),
                                          baseline=(Count(len(self.theirs.mismatches), self.theirs.checked)
                                                    if self.theirs else None), where=f"at c={self.level}",
                                          top_up=resend(self.candidate, self.references, [(self.subs, self.level)],
                                                        mean_latency_s=mean_latency(self.references),
                                                        count=self.lost) if buy else None)
        self.witness.cover(findings, CHECK, could_detect=f"a hang-up that corrupts the requests beside it or kills the "
                                                         f"engine ({comparison.control_text()})")
        return comparison

    def lost(self, _route, run: LoadRun, references) -> Count:
        """A bought wave's count: requests beside hung-up clients that lost the route's own serial output."""
        report = detect(workload=self.workload, references=references, outcomes=run.outcomes)
        return Count(len(report.mismatches), report.checked, tuple(o.request_id for o in run.failed))

    def judge_wave(self, findings, comparison: LoadComparison) -> None:
        """Failed requests of the wave, and outputs beside hung-up clients that changed (when charged)."""
        run, candidate = self.run, self.candidate
        if run.failed and not self.engine_hang:
            self.problems.append(findings.add(failure_finding(run, check=CHECK, route=candidate.name,
                                                              what="abort wave", repro=self.windows.failed(run))).title)
        judged = record(findings, comparison, check=CHECK, control=self.control, candidate=candidate,
                        examples=[a.line() for a in self.theirs.mismatches] if self.theirs else [])
        if self.report.mismatches and judged:
            lines = [a.line() for a in self.report.mismatches]
            findings.add(Finding(check=CHECK, severity="bug", route=candidate.name,
                                 title=f"{len(lines)} requests beside hung-up clients lost their serial output "
                                       f"({comparison.sentence()}): {lines[0]}",
                                 details={"cause": UNDER_LOAD, "examples": lines[:10],
                                          "load_control": comparison.as_details(),
                                          "repro": self.windows.repro(self.report.mismatches[0].victim_request)}))
            self.problems.append(lines[0])

    @property
    def aborted(self) -> int:
        return sum(o.aborted for o in self.run.outcomes)

    # ---------------------------------------------------------------- after the wave
    def after_wave(self, findings) -> bool:
        """Health and a canary on the candidate; when it stopped answering, on the baseline that ran the same wave
        too. True when the candidate still answers (more waves may be bought)."""
        item = next(iter(self.workload.recall()), self.workload.items[0])
        mine = self.probe(self.candidate, self.references, item)
        if mine.stopped and self.control.runs:
            theirs = self.probe(self.pair.baseline, self.control.references, item)
            if theirs.stopped:
                self.both_hung(findings, mine, theirs)
                return False
        if not mine.healthy:
            title = (f"route unhealthy after {self.aborted} client disconnects: health check at {mine.at} unanswered "
                     f"or false")
            self.problems.append(findings.add(Finding(check=CHECK, severity="error", route=self.candidate.name,
                                                      title=title, details={"error_kind": UNHEALTHY})).title)
        if mine.stopped:
            title = (f"route dead or hung after {self.aborted} disconnects: canary post-abort-canary-{item.key} at "
                     f"{mine.at}: {mine.error}")
            self.problems.append(findings.add(Finding(
                check=CHECK, severity="error", route=self.candidate.name, prompt_id=item.key, title=title,
                details={"request_id": f"post-abort-canary-{item.key}", "error_kind": mine.error_kind})).title)
            # at the canary: when the baseline answers it and the candidate stays silent, the wiring names the wedge
            # as the candidate's death (spec_route_suite/plugin.py)
            self.candidate.mark_hung(f"no answer after {self.aborted} client disconnects (aborts)",
                                     request_id=mine.request.request_id, request=mine.request)
        elif mine.canary.token_ids != self.references[item.key].token_ids:
            canary_id = f"post-abort-canary-{item.key}"
            title = (f"after {self.aborted} disconnects the canary {canary_id} answered {mine.canary.text!r}, alone "
                     f"before the wave {self.references[item.key].text!r}")
            findings.add(Finding(check=CHECK, severity="bug", route=self.candidate.name, prompt_id=item.key,
                                 title=title, details={"cause": UNDER_LOAD, "repro": self._canary_repro(item)}))
            self.problems.append(title)
        return not mine.stopped

    def probe(self, handle, references, item) -> AfterWave:
        """`handle`'s health (one bounded probe, as before the hang board) and the canary alone within a bound, past
        the run's hang board."""
        healthy = handle.health(probes=1)
        timeout = min(handle.timeout_s, max(10.0, 50 * references[item.key].latency_s))
        canary = self.request(item.key, request_id=f"post-abort-canary-{item.key}", timeout_s=timeout)
        try:
            return AfterWave(handle.name, healthy, handle.probe(canary, timeout_s=timeout), at=clock(), request=canary)
        except RouteError as exc:
            return AfterWave(handle.name, healthy, None, exc.describe(), exc.kind, at=clock(), request=canary)

    def both_hung(self, findings, mine: AfterWave, theirs: AfterWave) -> None:
        """The same wave left the baseline unanswering too: one engine finding about the server, both routes
        marked hung, the wave's survival on the candidate not verified (nothing charged to speculation)."""
        self.engine_hang = True
        candidate, baseline = self.candidate, self.pair.baseline
        why = f"no answer after {self.aborted} client disconnects (aborts), on the baseline too"
        for handle in (candidate, baseline):
            handle.mark_hung(why)
        title = (f"the server stops answering after {self.aborted} client disconnects, without speculation too: "
                 f"baseline '{baseline.name}' ({theirs.why()} at {theirs.at}) and candidate '{candidate.name}' "
                 f"({mine.why()} at {mine.at}); an engine finding about the server, not a speculation finding")
        findings.add(Finding(check=CHECK, severity="engine", route=baseline.name, title=title, details={
            "candidate": candidate.name, "baseline_after_wave": theirs.as_details(), "candidate_after_wave": mine.as_details(),
            "candidate_wave": failure_details(self.run) if self.run.failed else {},
            "why": "the AR baseline hangs after the same client disconnects: the engine wedges whether or not it "
                   "speculates; later tests wait a bounded time for it to recover"}))
        findings.cover(CHECK, candidate.name, verified=False, part=SURVIVAL_PART,
                       ran={"hang-ups": self.aborted},
                       could_detect="an engine that dies or hangs after client disconnects only when it speculates",
                       reason=f"the engine stops answering after client disconnects on the baseline too: {title}")

    def _canary_repro(self, item) -> dict:
        """The hang-ups of the wave, then the canary after it."""
        wave = window_steps(self.run, self.subs, self.run.outcomes[0].request_id, limit=len(self.run.outcomes))[:11]
        canary = (self.request(item.key, request_id="repro-canary"),
                  round(1000 * max(self.references[k].latency_s for k in self.keys)), None)
        return load_repro([*wave, canary], candidate=self.candidate, baseline=self.pair.baseline,
                          concurrency=self.level, note="hang-ups, then the canary after the wave")
