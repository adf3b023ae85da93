"""Accuracy under load (check family "accuracy"): the canary pool's answers, tallied serially and at each level.

The tallies and flips are stressors/accuracy/tally.py's; here the pool is sent as one burst per concurrency level,
each answer right alone and wrong under load is attributed (where its answer seems to come from, by context
probes on the candidate), and the same bursts run on the baseline (stressors/control.py). Environment: none.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.stressors.accuracy.tally import Tally, fisher_p, flips, sentence, tally
from spec_route_suite.stressors.canary import mean_latency, renderer
from spec_route_suite.stressors.control import Count, LoadComparison, record, resend
from spec_route_suite.stressors.driver import burst, failure_finding, plan, round_robin
from spec_route_suite.stressors.mixing.detect import MixingReport, probe_contexts
from spec_route_suite.stressors.pair import CanaryStressor

CHECK = "accuracy"
MIN_SERIAL_RIGHT = 0.5  # below this the route (or its model) gets too few answers right for flips to be visible


def scored(workload, completed) -> int:
    """Answers this check judges: the canary and corpus task items (the user's prompts are load around them)."""
    return sum(workload.get(o.key).checkable for o in completed)


@dataclass
class AccuracyUnderLoad(CanaryStressor):
    """The pool's answers serially, on the baseline and under each load level, and the flips between them."""

    check = CHECK
    serial: Tally | None = None
    on_baseline: Tally | None = None
    loaded: list[Tally] = field(default_factory=list)   # per level
    flipped: list = field(default_factory=list)
    theirs: list = field(default_factory=list)          # the baseline's flips under the same load
    checked: int = 0
    batches: list = field(default_factory=list)         # (submissions, level) per burst: a control round resends them

    def tally_serial(self) -> None:
        """The candidate's serial answers (its references) and the baseline's, tallied."""
        workload = self.workload
        self.serial = tally("serial", workload, ((k, c.text) for k, c in self.references.items()))
        answers = {item.key: self.pair.baseline.generate(self.request(item.key))
                   for item in workload.items if item.checkable}
        self.on_baseline = tally("on the baseline", workload, ((k, c.text) for k, c in answers.items()))

    def send(self, levels, findings, *, seed: int) -> None:
        """One burst of the whole pool per level, on the candidate and its load control."""
        workload, candidate = self.workload, self.candidate
        rng, latency = random.Random(f"accuracy-{seed}"), mean_latency(self.references)
        self.start()
        for level in levels:
            keys = round_robin(workload.keys, len(workload.items), rng=rng)
            subs = plan(((k, self.request(k)) for k in keys), offsets=burst(len(keys)), tag=f"acc-c{level}")
            self.batches.append((subs, level))
            run = self.drive(subs, concurrency=level, latency=latency)
            self.checked += scored(workload, run.completed)
            control = self.control.run(subs, concurrency=level, mean_latency_s=latency)
            if control is not None:
                base_refs = self.control.references
                self.theirs += flips(workload=workload, serial=base_refs, outcomes=control.outcomes,
                                     references=base_refs)
            if run.failed:
                findings.add(failure_finding(run, check=CHECK, route=candidate.name, what="accuracy load",
                                             repro=self.windows.failed(run)))
            self.loaded.append(tally(f"at c={level}", workload, ((o.key, o.completion.text) for o in run.completed)))
            self.flipped += self._attributed_flips(run)

    def _attributed_flips(self, run) -> list:
        found = flips(workload=self.workload, serial=self.references, outcomes=run.outcomes, references=self.references)
        probed = probe_contexts(MixingReport(checked=len(found), mismatches=tuple(f.attribution for f in found)),
                                workload=self.workload, outcomes=run.outcomes, generate=self.candidate.generate,
                                render=renderer(self.pair.tokenizer), max_tokens=self.pair.max_tokens)
        return [replace(f, attribution=a) for f, a in zip(found, probed.mismatches)]

    def comparison(self, levels) -> LoadComparison:
        control = self.control
        return control.compare(
            what="answers right alone turned wrong", candidate=Count(len(self.flipped), self.checked),
            baseline=(Count(len(self.theirs), sum(scored(self.workload, r.completed) for r in control.runs))
                      if control.available else None), where=f"at c={','.join(map(str, levels))}",
            top_up=resend(self.candidate, self.references, self.batches, mean_latency_s=mean_latency(self.references),
                          count=self.round_flips))

    def round_flips(self, _route, run, references) -> Count:
        """A control round's count: answers right alone (`references`: the route's own) turned wrong."""
        return Count(len(flips(workload=self.workload, serial=references, outcomes=run.outcomes,
                               references=references)), scored(self.workload, run.completed),
                     tuple(o.request_id for o in run.failed))

    def summary(self, findings, comparison: LoadComparison, budget) -> tuple[str, dict]:
        """The coverage row and the motivating bug's sentence, as an info finding; (sentence, details)."""
        serial, base = self.serial, self.on_baseline
        self.witness.cover(findings, CHECK, could_detect=f"an answer right alone that turns wrong under load "
                                                         f"({comparison.control_text()})")
        text = sentence(loaded=self.loaded, serial=serial, baseline=base) + f"; {comparison.control_text()}"
        details = {"sentence": text, "budget": budget.describe(),
                   "prompts": sum(item.checkable for item in self.workload.items),
                   "levels": {t.label: {"wrong": t.wrong, "n": t.n, "fisher_p_vs_serial": fisher_p(t, serial),
                                        "wrong_keys": list(t.wrong_keys)} for t in self.loaded},
                   "serial_wrong_keys": list(serial.wrong_keys), "baseline_wrong_keys": list(base.wrong_keys),
                   "load_control": comparison.as_details()}
        self.info(findings, f"accuracy: {text}", details)
        return text, details

    def warnings(self, findings, details: dict, *, alpha: float) -> None:
        """Too few answers right serially to see flips; a candidate less accurate than the baseline even serially."""
        serial, base = self.serial, self.on_baseline
        if serial.n - serial.wrong < MIN_SERIAL_RIGHT * serial.n:
            findings.add(Finding(check=CHECK, severity="warning", route=self.candidate.name, details=details,
                                 title=f"accuracy under load weakly verified: only {serial.n - serial.wrong} of "
                                       f"{serial.n} answers right serially, so few can turn wrong under load"))
        if serial.wrong > base.wrong and fisher_p(serial, base) < alpha:
            findings.add(Finding(check=CHECK, severity="warning", route=self.candidate.name, details=details,
                                 title=f"candidate '{self.candidate.name}' is less accurate than baseline "
                                       f"'{self.pair.baseline.name}' even serially: {serial.phrase()} vs "
                                       f"{base.phrase()}"))

    def judge(self, findings, comparison: LoadComparison, text: str, details: dict) -> str | None:
        """Charge the flips (an answer right alone and wrong under load) beyond the baseline's under the same load:
        a bug finding naming where each answer came from; the failure message, or None when nothing is charged."""
        judged = record(findings, comparison, check=self.check, control=self.control, candidate=self.candidate,
                        examples=[f.line() for f in self.theirs])
        flipped = self.flipped
        if not flipped or not judged:
            return None
        title = (f"{len(flipped)} answers right when sent alone turned wrong under load ({comparison.sentence()}): "
                 f"{text}")
        findings.add(Finding(check=self.check, severity="bug", route=self.candidate.name, prompt_id=flipped[0].key,
                             title=title, details={**details, "cause": UNDER_LOAD,
                                                   "flips": [f.line() for f in flipped[:30]],
                                                   "repro": self.windows.repro(flipped[0].attribution.victim_request)}))
        return f"candidate '{self.candidate.name}': {title}\n" + "\n".join(f.line() for f in flipped[:10])
