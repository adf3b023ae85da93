"""Task accuracy of the user's prompts under load (check family "task-accuracy"): the run and its verdict.

The items, judge and tallies are stressors/tasks/accuracy.py's; here each task is answered serially by both
routes, a seeded sample of them (within the stressors' budget) is sent at every load level on the candidate
and on the baseline (stressors/control.py), and the tallies become the report's sentence, per level and per
source, with each task's outcome under its class. Environment: none.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.accuracy.tally import Tally, fisher_p, sentence
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.control import Count, LoadComparison, LoadControl, resend
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan, round_robin
from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.tasks.accuracy import Judge, by_source, task_flips, task_items, tally

CHECK = "task-accuracy"
COULD_DETECT = "a task answer right alone that turns wrong under load; accuracy below the baseline's"


@dataclass
class TaskAccuracyRun:
    """The user's tasks: answered serially by both routes, then under every load level on both."""

    pair: LoadPair
    alpha: float
    items: list = field(default_factory=list)
    by_key: dict = field(default_factory=dict)
    serial: dict = field(default_factory=dict)       # the candidate's serial answers
    judge: Judge | None = None
    sent: list[str] = field(default_factory=list)    # the keys sent at each level
    control: LoadControl | None = None
    witness: LoadWitness | None = None
    loaded: list[Tally] = field(default_factory=list)
    flipped: list = field(default_factory=list)
    theirs: list = field(default_factory=list)
    checked: int = 0
    batches: list = field(default_factory=list)   # (submissions, level) of each load run: a control round resends them

    def answer_serially(self, records, fitted_prompts, *, executes: frozenset[str]) -> None:
        """Every task on the baseline (its answers are the parity references) and on the candidate, one at a time."""
        baseline, candidate = self.pair.baseline, self.pair.candidate
        self.items = task_items(records, fitted_prompts, baseline_answer=lambda item: baseline.generate(item.request))
        self.by_key = {item.key: item for item in self.items}
        references = {item.key: baseline.generate(item.request) for item in self.items}
        self.serial = {item.key: candidate.generate(item.request) for item in self.items}

        def near_tie(item, expected, got) -> bool:
            return self.pair.judge(item.request.prompt_ids, expected, got, item.request.max_tokens)[0] == "near-tie"
        self.judge = Judge(references=references, executes=executes, near_tie=near_tie)
        self.control = LoadControl(baseline, references, alpha=self.alpha)

    def sample(self, budget, *, seed: int) -> tuple[Tally, Tally]:
        """Every task under load, or a seeded sample within the stressors' budget; (the serial tally over the same
        tasks, which Fisher's test compares a load level with; the baseline's own tally)."""
        self.sent = round_robin([item.key for item in self.items], min(len(self.items), budget.mixing_requests),
                                rng=random.Random(f"task-{seed}"))
        alone = tally("serial", self.judge, self.by_key, ((k, self.serial[k]) for k in dict.fromkeys(self.sent)))
        on_baseline = tally("on the baseline", self.judge, self.by_key, self.judge.references.items(),
                            own_reference=True)
        return alone, on_baseline

    def send(self, levels, findings) -> None:
        candidate, by_key, judge = self.pair.candidate, self.by_key, self.judge
        self.witness, latency = LoadWitness(candidate), mean_latency(self.serial)
        for level in levels:
            subs = plan(((key, by_key[key].request) for key in self.sent), offsets=burst(len(self.sent)),
                        tag=f"task-c{level}")
            self.batches.append((subs, level))
            run = self.witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency))
            if run.failed:
                findings.add(failure_finding(run, check=CHECK, route=candidate.name, what="task accuracy load"))
            self.checked += len(run.completed)
            self.loaded.append(tally(f"at c={level}", judge, by_key, ((o.key, o.completion) for o in run.completed)))
            self.flipped += task_flips(judge, by_key, self.serial, run.outcomes)
            base_run = self.control.run(subs, concurrency=level, mean_latency_s=latency)
            if base_run is not None:
                self.theirs += task_flips(judge, by_key, self.judge.references, base_run.outcomes)

    def class_outcomes(self, findings) -> None:
        """Each task's outcome under its class: right or wrong alone, and flipped when it turned wrong under load."""
        flips = {f.key for f in self.flipped}
        for item in self.items:
            record = item.record
            outcome = ("flipped under load" if item.key in flips else
                       "right" if self.judge.right(item, self.serial[item.key]) else "wrong")
            findings.measure("class_outcome", check=CHECK, route=self.pair.candidate.name, prompt_id=item.key,
                             source=record.source, category=record.category, outcome=outcome)

    def comparison(self, levels) -> LoadComparison:
        control = self.control
        return control.compare(what="task answers right alone turned wrong",
                               candidate=Count(len(self.flipped), self.checked),
                               baseline=Count(len(self.theirs), sum(len(r.completed) for r in control.runs))
                               if control.available else None, where=f"at c={','.join(map(str, levels))}",
                               top_up=resend(self.pair.candidate, self.serial, self.batches,
                                             mean_latency_s=mean_latency(self.serial), count=self.round_flips))

    def round_flips(self, _route, run, serial) -> Count:
        """A control round's count: task answers right alone (`serial`: the route's own) turned wrong."""
        return Count(len(task_flips(self.judge, self.by_key, serial, run.outcomes)), len(run.completed),
                     tuple(o.request_id for o in run.failed))

    def summary(self, findings, comparison: LoadComparison, budget, alone: Tally, on_baseline: Tally) -> dict:
        """The coverage row and the sentence per level and per source, as an info finding; its details."""
        self.witness.cover(findings, CHECK, could_detect=f"{COULD_DETECT} ({comparison.control_text()})",
                           counts={"task answers": len(self.items)})
        text = sentence(loaded=self.loaded, serial=alone, baseline=on_baseline) + f"; {comparison.control_text()}"
        sources = {source: tally(source, self.judge, self.by_key, ((k, a) for k, a in self.serial.items()
                                                                   if self.by_key[k].record.source == source))
                   for source in dict.fromkeys(item.record.source for item in self.items)}
        details = {"sentence": text, "serial_by_source": by_source(sources), "tasks": len(self.items),
                   "sent_per_level": len(self.sent), "budget": budget.describe(),
                   "serial_wrong": list(alone.wrong_keys), "baseline_wrong": list(on_baseline.wrong_keys),
                   "load_control": comparison.as_details(),
                   "levels": {t.label: {"wrong": t.wrong, "n": t.n, "fisher_p_vs_serial": fisher_p(t, alone),
                                        "wrong_keys": list(t.wrong_keys)} for t in self.loaded}}
        findings.add(Finding(check=CHECK, severity="info", route=self.pair.candidate.name, details=details,
                             title=f"task accuracy: {text}; serially by source: {by_source(sources)}"))
        return details

    def less_accurate(self, findings, on_baseline: Tally, details: dict) -> None:
        """A warning when the candidate's serial answers are right less often than the baseline's, on the items
        the baseline can be scored on (gold answers, executed tests)."""
        judge = self.judge
        mine = tally("serial", judge, self.by_key, ((k, a) for k, a in self.serial.items()
                                                    if not judge.by_reference(self.by_key[k])))
        if mine.wrong > on_baseline.wrong and fisher_p(mine, on_baseline) < self.alpha:
            candidate, baseline = self.pair.candidate, self.pair.baseline
            findings.add(Finding(check=CHECK, severity="warning", route=candidate.name, details=details,
                                 title=f"candidate '{candidate.name}' is less accurate than baseline "
                                       f"'{baseline.name}' even serially: {mine.phrase()} vs {on_baseline.phrase()}"))
