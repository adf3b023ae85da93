"""The mixing stressor's load (check family "mixing"): mixed arrivals at every level, each mismatch attributed.

At every configured concurrency level above 1 the canary pool is cycled through mixed arrivals (closed-loop
bursts and Poisson segments, stressors/driver.py), on the candidate and, when it batches, on the baseline
(stressors/control.py); each run's mismatches with the route's own serial references are attributed
(stressors/mixing/detect.py: foreign canary, foreign answer, answer in another context). What the run shows before
any verdict (answers stopped early, serial references that cannot be trusted) is reported here; the verdict
is stressors/mixing/verdict.py's. Environment: none.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.reports.repro_spec import parity_repro
from spec_route_suite.routes.textlevel import is_text_level, level_details, title_suffix
from spec_route_suite.stressors.canary import mean_latency, renderer
from spec_route_suite.stressors.control import NO_LOAD_CONTROL, Count, TopUp, fresh
from spec_route_suite.stressors.driver import LoadRun, drive_handle, failure_finding, mixed_load, round_robin
from spec_route_suite.stressors.mixing.detect import MixingReport, detect, merge, probe_contexts, untrusted_references
from spec_route_suite.stressors.pair import CanaryStressor
from spec_route_suite.stressors.suspicious import early_stops

CHECK = "mixing"


def attributed(route, run: LoadRun, workload, references, tokenizer, max_tokens: int) -> MixingReport:
    """One load run's mismatches against `route`'s own serial references, each attributed (context probes on
    `route` itself): the candidate's, and the same for its load control on the baseline."""
    report = detect(workload=workload, references=references, outcomes=run.outcomes)
    return probe_contexts(report, workload=workload, outcomes=run.outcomes, generate=route.generate,
                          render=renderer(tokenizer), max_tokens=max_tokens)


@dataclass
class MixingLoad(CanaryStressor):
    """The candidate's load runs and their attributed mismatches, beside the baseline's under the same load."""

    check = CHECK
    runs: list[LoadRun] = field(default_factory=list)
    reports: list[MixingReport] = field(default_factory=list)    # per run, the candidate's
    controls: list[MixingReport] = field(default_factory=list)   # per run, the baseline's
    latency: float = 0.0
    acceptance: tuple = (None, None)   # the candidate's acceptance counters before and after the load
    top: tuple = ((), 0)               # the highest level's submissions and level: a control round resends them
    rounds: dict = field(default_factory=dict)   # (route, round) -> a bought round's attributed report, failed ids

    @property
    def text_level(self) -> bool:
        """A server without token ids: outputs and references compared as re-tokenized text."""
        return is_text_level(*self.references.values())

    @property
    def comparison_details(self) -> dict:
        """How outputs were compared (engine tokens, or text), for the report."""
        return level_details(self.text_level)

    @property
    def suffix(self) -> str:
        return title_suffix(text_level=self.text_level)

    @property
    def theirs(self) -> MixingReport | None:
        """The baseline's attributed mismatches under the same load (None: no load control)."""
        return merge(self.controls) if self.control.available else None

    def send(self, budget, findings, *, seed: int) -> None:
        candidate, baseline, workload, mt = self.pair.candidate, self.pair.baseline, self.workload, self.pair.max_tokens
        if self.text_level:
            findings.measure("comparison", check=CHECK, route=candidate.name, **self.comparison_details)
        rng, self.latency = random.Random(f"mixing-{seed}"), mean_latency(self.references)
        before = candidate.acceptance()
        self.start()
        for level in budget.levels:
            keys = round_robin(workload.keys, budget.mixing_requests, rng=rng)
            subs = mixed_load([(k, self.request(k)) for k in keys], level=level, rng=rng,
                              mean_latency_s=self.latency, tag=f"mix-c{level}")
            self.top = (subs, level)
            run = self.drive(subs, concurrency=level, latency=self.latency)
            self.runs.append(run)
            self.reports.append(attributed(candidate, run, workload, self.references, self.pair.tokenizer, mt))
            control = self.control.run(subs, concurrency=level, mean_latency_s=self.latency)
            if control is not None:
                self.controls.append(attributed(baseline, control, workload, self.control.references,
                                                self.pair.tokenizer, mt))
            if run.failed:
                findings.add(failure_finding(run, check=CHECK, route=candidate.name, what="mixing load",
                                             repro=self.windows.failed(run)))
        self.acceptance = (before, candidate.acceptance())

    def top_up(self, counted) -> TopUp:
        """Rounds the load control may buy: the highest level's load once more on a route, attributed against the
        route's own references; `counted(report)` is what one comparison counts (contaminated, unattributed). A
        round is sent once per route and serves both comparisons."""
        def probe(route, references, round_: int) -> Count:
            key = (route.name, round_)
            if key not in self.rounds:
                subs, level = self.top
                run = drive_handle(route, fresh(subs, round_), concurrency=level, mean_latency_s=self.latency)
                self.rounds[key] = (attributed(route, run, self.workload, references, self.pair.tokenizer,
                                               self.pair.max_tokens), tuple(o.request_id for o in run.failed))
            report, failed = self.rounds[key]
            return Count(len(counted(report)), report.checked, failed)
        return TopUp(self.pair.candidate, self.references, probe, requests=len(self.top[0]))

    def cover(self, findings) -> None:
        """The coverage row: requests sent, chat requests among them, and the baseline's contamination."""
        sent = sum(len(r.outcomes) for r in self.runs)
        chats = sum(self.workload.get(o.key).chat for r in self.runs for o in r.outcomes)
        chat_note = (f"; {chats} of them chat requests through the route's chat template" if chats else
                     "; no chat requests (a route lacks chat: the chat template path is not verified under load)")
        theirs = self.theirs
        control_note = (f"; baseline under the same load: {len(theirs.contaminated)} of {theirs.checked} "
                        f"contaminated" if theirs else f"; {NO_LOAD_CONTROL}")
        self.witness.cover(findings, CHECK, counts={"chat requests": chats},
                           could_detect=f"another request's context in an answer: a 1% per-request mixing rate "
                                        f"shows in {sent} requests with P={1 - 0.99 ** sent:.2f}{chat_note}"
                                        f"{control_note}")

    def early_stops(self, findings) -> list[str]:
        """Answers under load that stopped after at most one token where the serial run was long."""
        stopped = [line for run in self.runs for line in early_stops(run.outcomes, self.references)]
        if stopped:
            findings.add(Finding(
                check=CHECK, severity="bug", route=self.pair.candidate.name,
                title=(f"{len(stopped)} answers under load stopped after at most one token where the serial run "
                       f"was long (the vllm#50021 pattern: HTTP 200, one empty token, finish_reason 'stop')"),
                details={"cause": UNDER_LOAD, "examples": stopped[:20], "max_tokens": self.pair.max_tokens,
                         "repro": self.windows.repro(stopped[0].split(":")[0])}))
        return stopped

    def trusted_mismatches(self, findings) -> tuple[MixingReport, set[str]]:
        """All mismatches, less those whose serial reference neither equals the AR baseline's output nor reproduces
        serially (made in someone else's batch: it says nothing about who leaked into whom); (mismatches, the
        distrusted prompts)."""
        candidate, baseline, mt = self.pair.candidate, self.pair.baseline, self.pair.max_tokens
        total = merge(self.reports)
        distrusted = untrusted_references(baseline=baseline.generate, candidate=candidate.generate,
                                          workload=self.workload, references=self.references,
                                          keys={a.victim_key for a in total.mismatches}, max_tokens=mt)
        if not distrusted:
            return total, distrusted
        findings.add(Finding(
            check=CHECK, severity="bug", route=candidate.name, prompt_id=sorted(distrusted)[0],
            title=(f"{len(distrusted)} serial greedy references of the candidate differ from the AR baseline and "
                   f"do not reproduce serially (other traffic shares its batches?); their mismatches under load "
                   f"are not attributed to mixing"),
            details={"cause": UNDER_LOAD, "prompts": sorted(distrusted), "max_tokens": mt,
                     "repro": parity_repro([self.workload.get(k).request(max_tokens=mt)
                                            for k in sorted(distrusted)[:3]], candidate=candidate, baseline=baseline,
                                           attempts=3)}))
        return total.excluding_victims(distrusted), distrusted

    def mean_acceptance_length(self) -> float | None:
        before, after = self.acceptance
        return after.minus(before).mean_acceptance_length if after is not None and before is not None else None

    def outcome_of(self, request_id: str):
        return next(r.by_id()[request_id].completion for r in self.runs if request_id in r.by_id())
