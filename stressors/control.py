"""Load controls: every stressor's workload runs on the baseline too, and the candidate is judged by its excess.

Why: the motivating report was judged against the same load with speculation off (0 of 304 wrong). A
mismatch rate the baseline shows under the same load (batch-variant kernels, engine-wide nondeterminism:
the norm on GPUs) is a fact about the engine, not about speculation. So each stressor sends the SAME
requests at the SAME concurrency to the baseline, compares the baseline's outputs with the baseline's
own serial references, and:
- the baseline mismatches too: an "engine" note on the baseline, and the candidate is charged only with
  its excess, by a one-sided exact test at the run's alpha (Fisher, alternative "greater"), the verdict
  quoting both rates ("candidate 9 of 64 differ at c=32, baseline 7 of 64 under the same load: p=0.39,
  not charged"); the stressor's "exact under load" part is then "not verified";
- the baseline shows no mismatch (a deterministic engine at that load): the candidate is judged as before
  (strict: any mismatch fails; classify: near-ties excused), the finding saying "baseline under the same
  load: 0 of N differ";
- the baseline serialises requests (capability concurrency=False): it cannot show load effects, so no time
  is spent on a load run; the control is recorded as such and the candidate judged as before.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from scipy.stats import fisher_exact

from spec_route_suite.routes.base import Completion
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.driver import LoadRun, Submission, drive_handle

NO_LOAD_CONTROL = ("baseline serialises requests: no load control (its outputs under load are its serial "
                   "outputs)")
EXACT_PART = "exact under load"


@dataclass(frozen=True)
class Count:
    """`k` of `n` outputs that differ (or fail) under one condition."""

    k: int
    n: int

    def phrase(self) -> str:
        return f"{self.k} of {self.n}"


def excess_p(candidate: Count, baseline: Count) -> float:
    """One-sided exact p-value: does the candidate differ more often than the baseline under the same load?"""
    table = [[candidate.k, candidate.n - candidate.k], [baseline.k, baseline.n - baseline.k]]
    return float(fisher_exact(table, alternative="greater").pvalue)


@dataclass(frozen=True)
class LoadComparison:
    """The candidate's count under load beside the baseline's under the same load (None: no control)."""

    what: str                  # "differ from their serial output", "are contaminated"...
    candidate: Count
    baseline: Count | None
    where: str                 # "at c=8,32"
    alpha: float

    @property
    def engine(self) -> bool:
        """The baseline shows it too: engine behaviour, and only an excess can be charged."""
        return self.baseline is not None and self.baseline.k > 0

    @property
    def p_value(self) -> float | None:
        return excess_p(self.candidate, self.baseline) if self.engine else None

    @property
    def charged(self) -> bool:
        """Judge the candidate's mismatches at all (as before when the baseline is clean or no control ran)."""
        return self.candidate.k > 0 and (not self.engine or self.p_value < self.alpha)

    def control_text(self) -> str:
        if self.baseline is None:
            return NO_LOAD_CONTROL
        return f"baseline under the same load: {self.baseline.phrase()} {self.what}"

    def sentence(self) -> str:
        head = f"candidate {self.candidate.phrase()} {self.what} {self.where}"
        if not self.engine:
            return f"{head}; {self.control_text()}"
        verdict = "charged: an excess over the baseline" if self.charged else "not charged"
        return (f"{head}, baseline {self.baseline.phrase()} under the same load: p={self.p_value:.2g} "
                f"(one-sided Fisher, alpha {self.alpha:g}), {verdict}")

    def as_details(self) -> dict[str, Any]:
        return {"what": self.what, "where": self.where, "candidate": self.candidate.phrase(),
                "baseline": self.baseline.phrase() if self.baseline else None, "p_value": self.p_value,
                "alpha": self.alpha, "charged": self.charged, "sentence": self.sentence()}


class LoadControl:
    """The baseline's side of one stressor: the same submissions at the same concurrency, on the baseline.

    `references` are the baseline's own serial outputs of the stressor workload (None when it serialises)."""

    def __init__(self, baseline, references: Mapping[str, Completion] | None, *, alpha: float):
        self.baseline, self.references, self.alpha = baseline, references, alpha
        self.runs: list[LoadRun] = []

    @property
    def available(self) -> bool:
        return bool(self.baseline.capabilities.concurrency)

    @property
    def name(self) -> str:
        return self.baseline.name

    def run(self, submissions: Sequence[Submission], *, concurrency: int, mean_latency_s: float) -> LoadRun | None:
        """The same load on the baseline; None when it serialises requests (its serial outputs are its answer)."""
        if not self.available:
            return None
        run = drive_handle(self.baseline, submissions, concurrency=concurrency, mean_latency_s=mean_latency_s)
        self.runs.append(run)
        return run

    def differing(self) -> Count | None:
        """The baseline's outputs under this control's load runs that differ from its serial outputs."""
        if not self.available:
            return None
        counts = [differing(run.outcomes, self.references) for run in self.runs]
        return Count(sum(c.k for c in counts), sum(c.n for c in counts))

    def examples(self, limit: int = 10) -> list[str]:
        """The baseline's own mismatches under load, as an engine note shows them."""
        lines = []
        for run in self.runs:
            for o in run.completed:
                reference = (self.references or {}).get(o.key)
                if reference is not None and o.completion.token_ids != reference.token_ids and len(lines) < limit:
                    lines.append(f"{o.request_id}: {o.completion.text[:80]!r}, alone {reference.text[:80]!r}")
        return lines

    def compare(self, *, what: str, candidate: Count, baseline: Count | None, where: str) -> LoadComparison:
        return LoadComparison(what=what, candidate=candidate, baseline=baseline if self.available else None,
                              where=where, alpha=self.alpha)


def differing(outcomes, references: Mapping[str, Completion]) -> Count:
    """Completed outcomes whose tokens differ from their serial reference."""
    done = [o for o in outcomes if o.ok and o.key in references]
    return Count(sum(o.completion.token_ids != references[o.key].token_ids for o in done), len(done))


def record(findings, comparison: LoadComparison, *, check: str, control: LoadControl, candidate,
           examples: Sequence[str] | None = None) -> bool:
    """Report the control; True when the candidate's mismatches are to be judged (charged, or no/clean control).

    The baseline mismatching too gives an engine note on the baseline (with its own mismatches, `examples` or
    the control's) and the stressor's "exact under load" part "not verified"; an uncharged candidate gets an
    info line with both rates, never a finding."""
    if comparison.engine:
        examples = control.examples() if examples is None else examples
        findings.add(Finding(
            check=check, severity="engine", route=control.name,
            title=(f"engine behaviour on both routes: {comparison.baseline.phrase()} {comparison.what} under load on "
                   f"the baseline too ({check})"),
            details={"load_control": comparison.as_details(), "candidate": candidate.name,
                     "examples": list(examples)[:10],
                     "why": "the baseline differs under the same requests at the same concurrency: a fact about the "
                            "engine (batch variance, nondeterminism), not a speculation finding"}))
        findings.cover(check, candidate.name, verified=False, part=EXACT_PART,
                       ran={"baseline mismatches": comparison.baseline.k},
                       could_detect="an excess of mismatches under load over the baseline's own",
                       reason=f"the engine itself is not exact under load: {comparison.control_text()}; only an "
                              f"excess over the baseline's rate is judged ({comparison.sentence()})")
        if not comparison.charged:
            findings.add(Finding(check=check, severity="info", route=candidate.name,
                                 title=f"{check}: {comparison.sentence()}",
                                 details={"load_control": comparison.as_details()}))
    return comparison.charged or not comparison.engine
