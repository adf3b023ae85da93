"""The mixing stressor's verdict (check family "mixing"): contamination and unattributed mismatches, judged.

Both rates are compared with the baseline's under the same load (stressors/control.py): what the baseline
shows too is an engine note, and the candidate is charged only with its excess. An unattributed mismatch is
teacher-forced through the baseline (stressors/near_tie.py): a near-tie is batch variance, anything else
corrupted batch state. A contamination fails the route with the matrix source -> victim and a replayable
schedule, shrunk (stressors/schedules.py) as far as its budget allows. Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.reports.repro_spec import load_repro
from spec_route_suite.stressors.control import Count, LoadComparison, record
from spec_route_suite.stressors.driver import drive_handle
from spec_route_suite.stressors.mixing.detect import MixingReport
from spec_route_suite.stressors.mixing.load import CHECK, MixingLoad
from spec_route_suite.stressors.replay import replay_script
from spec_route_suite.stressors.schedules import Schedule, shrink, window_schedule

SHRINK_SECONDS = 45.0
SHRINK_EVALUATIONS = 24
SHRINK_REPEATS = 3   # replays per shrink step
FIRST_REPEATS = 12   # replays of the whole window before giving up on reproducing a rare failure
MAX_CLASSIFIED = 40  # unattributed mismatches teacher-forced through the baseline (near-tie or bug)


@dataclass
class MixingVerdict:
    """The load's trusted mismatches, compared with the baseline's, recorded; what fails the route."""

    load: MixingLoad
    total: MixingReport
    contamination: LoadComparison | None = None
    unattributed: LoadComparison | None = None
    charge_contamination: bool = False
    charge_unattributed: bool = False
    details: dict = field(default_factory=dict)
    bugs: list[str] = field(default_factory=list)   # unattributed mismatches beyond a near-tie

    @property
    def per_level(self) -> str:
        return ", ".join(f"c={run.concurrency}: {len(rep.contaminated)} of {rep.checked}"
                         for run, rep in zip(self.load.runs, self.load.reports))

    def compare(self, findings) -> None:
        """Both rates beside the baseline's; the control's verdicts recorded."""
        load, total, theirs = self.load, self.total, self.load.theirs
        candidate, control = load.pair.candidate, load.control
        where = f"at c={','.join(str(r.concurrency) for r in load.runs)}"
        self.contamination = control.compare(
            what="answered in another request's context", candidate=Count(len(total.contaminated), total.checked),
            baseline=Count(len(theirs.contaminated), theirs.checked) if theirs else None, where=where,
            top_up=load.top_up(lambda report: report.contaminated))
        self.unattributed = control.compare(
            what="differ from their serial reference with no identifiable source",
            candidate=Count(len(total.unattributed), total.checked),
            baseline=Count(len(theirs.unattributed), theirs.checked) if theirs else None, where=where,
            top_up=load.top_up(lambda report: report.unattributed))
        self.charge_contamination = record(findings, self.contamination, check=CHECK, control=control,
                                           candidate=candidate,
                                           examples=[a.line() for a in theirs.contaminated] if theirs else [])
        self.charge_unattributed = record(findings, self.unattributed, check=CHECK, control=control,
                                          candidate=candidate,
                                          examples=[a.line() for a in theirs.unattributed] if theirs else [])

    def summarise(self, findings, budget) -> None:
        """The info line every run reports, and the details every mixing finding carries."""
        load, total = self.load, self.total
        self.details = {"budget": budget.describe(), "requests_checked": total.checked, "per_level": self.per_level,
                        "pool": len(load.workload.items), "max_tokens": load.pair.max_tokens,
                        "runs": [r.describe() for r in load.runs], "serial_mean_latency_s": round(load.latency, 4),
                        "mean_acceptance_length_under_load": load.mean_acceptance_length(),
                        **load.comparison_details,
                        "load_control": {"contamination": self.contamination.as_details(),
                                         "unattributed": self.unattributed.as_details()}}
        load.info(findings, f"mixing: {total.checked} outputs checked against serial references ({self.per_level}); "
                            f"{len(total.contaminated)} contaminated; {self.contamination.control_text()}; budget: "
                            f"{budget.describe()}{load.suffix}", self.details)

    def classify_unattributed(self, findings) -> None:
        """Unattributed mismatches (when charged), teacher-forced through the baseline: near-ties, and bugs."""
        load, pair = self.load, self.load.pair
        unexplained = []
        for att in (self.total.unattributed if self.charge_unattributed else ())[:MAX_CLASSIFIED]:
            severity, why = pair.judge(load.workload.get(att.victim_key).prompt_ids, load.references[att.victim_key],
                                       load.outcome_of(att.victim_request))
            unexplained.append((severity, f"{att.line()}; {why}", att.victim_request))
        ties = [line for severity, line, _ in unexplained if severity == "near-tie"]
        self.bugs = [line for severity, line, _ in unexplained if severity == "bug"]
        first_of = {severity: victim for severity, _, victim in reversed(unexplained)}
        if ties:
            findings.add(Finding(
                check=CHECK, severity="near-tie", route=pair.candidate.name,
                title=f"{len(ties)} outputs under load differ from their serial reference at a numerical near-tie "
                      f"(batch variance, no foreign content){load.suffix}",
                details={"examples": ties[:10], **self.details,
                         "repro": load.windows.repro(first_of.get("near-tie", ""))}))
        if self.bugs:
            findings.add(Finding(
                check=CHECK, severity="bug", route=pair.candidate.name,
                title=f"{len(self.bugs)} outputs under load differ from their serial reference beyond a near-tie, "
                      f"with no identifiable source (corrupted batch state?; {self.unattributed.sentence()})"
                      f"{load.suffix}: {self.bugs[0][:200]}",
                details={"cause": UNDER_LOAD, "examples": self.bugs[:10], **self.details,
                         "repro": load.windows.repro(first_of.get("bug", ""))}))

    @property
    def contaminated(self) -> bool:
        """A contamination the candidate is charged with: it fails the route."""
        return bool(self.total.contaminated) and self.charge_contamination

    def report_contamination(self, findings) -> str:
        """The first contamination's window shrunk to a short schedule that replays it, as a bug finding with the
        matrix and a standalone replay script; its title."""
        load, total = self.load, self.total
        candidate, workload, refs, mt = load.pair.candidate, load.workload, load.references, load.pair.max_tokens
        first = next((a for a in total.contaminated if a.source_requests_in_flight), total.contaminated[0])
        run = next(r for r in load.runs if first.victim_request in r.by_id())
        window = window_schedule(run, victim_request=first.victim_request, workload=workload)
        shrunk = shrink(window, lambda s: reproduces(candidate, workload, refs, s, first.victim_key, mt, load.latency,
                                                     attempts=FIRST_REPEATS if s == window else SHRINK_REPEATS),
                        max_evaluations=SHRINK_EVALUATIONS, deadline_s=SHRINK_SECONDS)
        title = (f"cross-request mixing: {len(total.contaminated)} of {total.checked} outputs answered in another "
                 f"request's context ({self.per_level}; {self.contamination.control_text()}); e.g. "
                 f"{first.victim_key} got {first.source_key}'s content{load.suffix}")
        repro_subs = shrunk.schedule.submissions(workload, max_tokens=mt, tag="repro")
        script = replay_script(title=title, schedule=shrunk.schedule, workload=workload, references=refs,
                               spec=candidate.spec, max_tokens=mt, wire=candidate.wire_request)
        findings.add(Finding(
            check=CHECK, severity="bug", route=candidate.name, prompt_id=first.victim_key, title=title,
            details={**self.details, "cause": UNDER_LOAD, "contamination_matrix": total.matrix_rows(),
                     "diff": (f"- {first.victim_key}, serial reference: {first.reference_text[:160]!r}\n"
                              f"+ {first.victim_key}, under load:       {first.output_text[:160]!r}\n"
                              f"  source {first.source_key}: {first.evidence}"),
                     "examples": [a.line() for a in total.contaminated[:20]],
                     "schedule": shrunk.schedule.to_json(), "schedule_text": shrunk.schedule.describe(workload),
                     "shrink": shrunk.describe(),
                     "replay": {"filename": f"replay_mixing_{candidate.name}.py", "script": script},
                     "repro": load_repro([(sub.request, step.gap_ms, step.abort_ms)
                                          for sub, step in zip(repro_subs, shrunk.schedule.steps)],
                                         candidate=candidate, baseline=load.pair.baseline,
                                         concurrency=shrunk.schedule.concurrency,
                                         note=f"the shrunk schedule: {shrunk.describe()}")}))
        return (f"{title}\n{total.matrix_text()}\nfirst: {first.line()}\nrepro schedule: {shrunk.describe()}")


def reproduces(candidate, workload, refs, schedule: Schedule, victim_key: str, max_tokens: int,
               latency: float, *, attempts: int) -> bool:
    """Replay a schedule up to `attempts` times; True when the victim's prompt again loses its serial output."""
    for attempt in range(attempts):
        subs = schedule.submissions(workload, max_tokens=max_tokens, tag=f"shrink{attempt}",
                                    stream=candidate.capabilities.stream)
        run = drive_handle(candidate, subs, concurrency=schedule.concurrency, mean_latency_s=latency)
        if any(o.key == victim_key and o.completion.token_ids != refs[victim_key].token_ids for o in run.completed):
            return True
    return False
