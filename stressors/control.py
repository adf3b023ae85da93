"""Load controls: every stressor's workload runs on the baseline too, and the candidate is judged by its excess.

Why: the motivating report was judged against the same load with speculation off (0 of 304 wrong). A
mismatch rate the baseline shows under the same load (batch-variant kernels, engine-wide nondeterminism:
the norm on GPUs) is a fact about the engine, not about speculation. So each stressor sends the SAME
requests at the SAME concurrency to the baseline, compares the baseline's outputs with the baseline's
own serial references, and charges the candidate only when a one-sided exact test (Fisher, alternative
"greater") at the run's alpha says it differs more often than the baseline under the same load:
- the baseline mismatches too and the test does not reject: an "engine" note on the baseline, the stressor's
  "exact under load" part "not verified", an info line quoting both rates ("candidate 9 of 64 differ at c=32,
  baseline 7 of 64 under the same load: p=0.39, not charged");
- the baseline shows no mismatch but the control is too small for the test to reject (candidate 1 of 4 seeds
  changed, baseline 0 of 4: p=0.5; a server that does not speculate at all can do that): more of the
  stressor's own load is bought (`buy`: the same requests on both routes, one route after the other, at most
  MAX_ROUNDS rounds and MAX_EXTRA_REQUESTS requests per route) until the test rejects; otherwise "not verified:
  control too small", never a bug. The same rounds are bought when the baseline differs too and the candidate's
  rate stays above it: a clearly larger rate is then charged even when the first look could not tell;
- the looks spend alpha unevenly (`look_levels`): FIRST_LOOK_SHARE of it at the first look, the stressor's own
  load (the evidence a user's report has: 7 of 100 answers flipped against 0 of 100, p = 0.0070, is charged there
  at alpha 0.01), the rest evenly over the rounds bought. The levels sum to alpha, so by the union bound the looks
  together charge a route no worse than the baseline with probability at most alpha, however they are correlated
  (benchmarks/protocol_power.py measures it, and the power);
- the baseline serialises requests (capability concurrency=False): it cannot show load effects, so no time
  is spent on a load run; the control is recorded as such and the candidate judged as before (any mismatch).
A control request that failed carries no evidence: it is counted and named (the control's sentence lists
it), never silently dropped. Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from scipy.stats import fisher_exact

from spec_route_suite.routes.base import Completion
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.driver import LoadRun, Submission, drive_handle

NO_LOAD_CONTROL = ("baseline serialises requests: no load control (its outputs under load are its serial "
                   "outputs)")
EXACT_PART = "exact under load"
TOO_SMALL = "control too small"
NAMED_FAILURES = 5   # failed control requests named in a sentence (all of them in the details)
MAX_ROUNDS = 3       # rounds of the stressor's own load bought at most, on each route
MAX_EXTRA_REQUESTS = 2048   # requests bought at most per route and comparison (a round that would pass it is not sent)
# Of alpha, spent at the first look when rounds may follow. Above 0.70 the first look charges 7 of 100 flipped against
# 0 of 100 at alpha 0.01 (p = 0.0070, the motivating report's own count); 0.8 still does with 3 of the control's 100
# requests failed (0 of 97: p = 0.0078) and leaves a fifth of alpha for the rounds bought.
FIRST_LOOK_SHARE = 0.8


@dataclass(frozen=True)
class Count:
    """`k` of `n` outputs that differ (or fail the check) under one condition; `failed`: the request ids that
    failed there (no output, so not among the `n`), named so a shrunken control is never hidden."""

    k: int
    n: int
    failed: tuple[str, ...] = ()

    def phrase(self) -> str:
        if not self.failed:
            return f"{self.k} of {self.n}"
        named = ", ".join(self.failed[:NAMED_FAILURES]) + (", ..." if len(self.failed) > NAMED_FAILURES else "")
        return f"{self.k} of {self.n} ({len(self.failed)} more failed: {named})"

    def plus(self, other: "Count") -> "Count":
        return Count(self.k + other.k, self.n + other.n, self.failed + other.failed)

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else 0.0


def look_levels(alpha: float, looks: int) -> tuple[float, ...]:
    """The alpha of each look: all of it when there is one; otherwise FIRST_LOOK_SHARE at the first and the rest
    evenly over the rounds bought. They sum to alpha (the union bound over the looks)."""
    if looks <= 1:
        return (alpha,)
    return (alpha * FIRST_LOOK_SHARE,) + (alpha * (1 - FIRST_LOOK_SHARE) / (looks - 1),) * (looks - 1)


def excess_p(candidate: Count, baseline: Count) -> float:
    """One-sided exact p-value: does the candidate differ more often than the baseline under the same load?"""
    table = [[candidate.k, candidate.n - candidate.k], [baseline.k, baseline.n - baseline.k]]
    return float(fisher_exact(table, alternative="greater").pvalue)


@dataclass(frozen=True)
class Purchase:
    """What a comparison bought beyond the stressor's own load: rounds, requests per route, and why it stopped."""

    rounds: int
    requests: int      # sent to each route
    stopped: str

    def phrase(self) -> str:
        return (f"bought {self.rounds} more round(s) of the same load, {self.requests} requests on each route (at "
                f"most {MAX_ROUNDS} rounds, {MAX_EXTRA_REQUESTS} requests): {self.stopped}")

    def as_details(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "requests_per_route": self.requests, "max_rounds": MAX_ROUNDS,
                "max_requests_per_route": MAX_EXTRA_REQUESTS, "stopped": self.stopped}


@dataclass(frozen=True)
class TopUp:
    """One more round of a stressor's own load: `probe(route, references, round)` sends round `round` (1, 2...) of
    the same requests under fresh request ids to `route` and counts, against that route's own `references`, what
    differs. The candidate's side is named here; the baseline's is the control's."""

    candidate: Any
    references: Mapping[str, Any] | None
    probe: Callable[[Any, Mapping[str, Any] | None, int], "Count"]
    requests: int      # one round's requests to one route


@dataclass(frozen=True)
class LoadComparison:
    """The candidate's count under load beside the baseline's under the same load (None: no control).

    `looks`: how many times the excess test may be applied to this comparison (1, or 1 + MAX_ROUNDS when the
    stressor can buy more rounds); `look`: which one these counts are (1: the stressor's own load), tested at its
    level of `look_levels`. `purchase`: what was bought, if anything."""

    what: str                  # "differ from their serial output", "are contaminated"...
    candidate: Count
    baseline: Count | None
    where: str                 # "at c=8,32"
    alpha: float
    looks: int = 1
    look: int = 1
    purchase: Purchase | None = None

    @property
    def level(self) -> float:
        """The alpha of this look."""
        return look_levels(self.alpha, self.looks)[self.look - 1]

    @property
    def engine(self) -> bool:
        """The baseline shows it too: engine behaviour, and only an excess can be charged."""
        return self.baseline is not None and self.baseline.k > 0

    @property
    def p_value(self) -> float | None:
        if self.baseline is None or self.candidate.k == 0:
            return None
        return excess_p(self.candidate, self.baseline)

    @property
    def charged(self) -> bool:
        """Judge the candidate's mismatches: they exceed the baseline's by the exact test (or no control ran)."""
        if self.candidate.k == 0:
            return False
        return self.baseline is None or self.p_value < self.level

    @property
    def too_small(self) -> bool:
        """The candidate differs, the baseline never did, and the control is too small to tell engine noise
        from a speculation fault: not verified, never a bug."""
        return self.candidate.k > 0 and self.baseline is not None and self.baseline.k == 0 and not self.charged

    @property
    def judged(self) -> bool:
        """Should the stressor judge the candidate's mismatches (charged, or nothing to judge)?"""
        return self.charged or self.candidate.k == 0

    def control_text(self) -> str:
        if self.baseline is None:
            return NO_LOAD_CONTROL
        bought = f" ({self.purchase.phrase()})" if self.purchase else ""
        return f"baseline under the same load: {self.baseline.phrase()} {self.what}{bought}"

    def test_text(self) -> str:
        at_look = f" at look {self.look} of {self.looks}" if self.looks > 1 else ""
        return f"p={self.p_value:.2g} (one-sided Fisher, alpha {self.level:.2g}{at_look})"

    def sentence(self) -> str:
        head = f"candidate {self.candidate.phrase()} {self.what} {self.where}"
        if self.baseline is None or self.candidate.k == 0:
            return f"{head}; {self.control_text()}"
        bought = f"; {self.purchase.phrase()}" if self.purchase else ""
        if not self.engine:
            verdict = ("charged: the baseline never differs" if self.charged else
                       f"not charged: {TOO_SMALL} to tell engine noise from a speculation fault")
            return f"{head}; {self.control_text()}: {self.test_text()}, {verdict}"
        verdict = "charged: an excess over the baseline" if self.charged else "not charged"
        return (f"{head}, baseline {self.baseline.phrase()} under the same load: {self.test_text()}, "
                f"{verdict}{bought}")

    def as_details(self) -> dict[str, Any]:
        return {"what": self.what, "where": self.where, "candidate": self.candidate.phrase(),
                "baseline": self.baseline.phrase() if self.baseline else None, "p_value": self.p_value,
                "alpha": self.alpha, "looks": self.looks, "look": self.look,
                "alpha_by_look": list(look_levels(self.alpha, self.looks)), "charged": self.charged,
                "too_small": self.too_small,
                "baseline_failed": list(self.baseline.failed) if self.baseline else [],
                "bought": self.purchase.as_details() if self.purchase else None, "sentence": self.sentence()}


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

    def failed(self) -> tuple[str, ...]:
        """The control's requests that failed (not planned hang-ups), by request id."""
        return tuple(o.request_id for run in self.runs for o in run.failed)

    def differing(self) -> Count | None:
        """The baseline's outputs under this control's load runs that differ from its serial outputs."""
        if not self.available:
            return None
        total = Count(0, 0)
        for run in self.runs:
            total = total.plus(differing(run.outcomes, self.references))
        return total

    def examples(self, limit: int = 10) -> list[str]:
        """The baseline's own mismatches under load, as an engine note shows them."""
        lines = []
        for run in self.runs:
            for o in run.completed:
                reference = (self.references or {}).get(o.key)
                if reference is not None and o.completion.token_ids != reference.token_ids and len(lines) < limit:
                    lines.append(f"{o.request_id}: {o.completion.text[:80]!r}, alone {reference.text[:80]!r}")
        return lines

    def compare(self, *, what: str, candidate: Count, baseline: Count | None, where: str,
                top_up: TopUp | None = None) -> LoadComparison:
        """The comparison of the stressor's counts; with `top_up` (the stressor's own load, one more round on a
        route), rounds are bought while the excess test cannot decide (stressors/control_rounds.py)."""
        if not self.available or baseline is None:
            return LoadComparison(what=what, candidate=candidate, baseline=None, where=where, alpha=self.alpha)
        if not baseline.failed:
            baseline = replace(baseline, failed=self.failed())
        comparison = LoadComparison(what=what, candidate=candidate, baseline=baseline, where=where,
                                    alpha=self.alpha, looks=1 + rounds_allowed(top_up))
        if comparison.looks == 1:
            return comparison
        return buy(comparison, top_up, baseline=self.baseline, references=self.references)


def buy(comparison: LoadComparison, top_up: TopUp, *, baseline, references) -> LoadComparison:
    """Rounds of the same load on the candidate, then on the baseline, while the excess test cannot decide and the
    bound allows; the comparison of all counts, with what was bought (nothing bought: unchanged)."""
    rounds = requests = 0
    stopped = why_stop(comparison, rounds, top_up)
    while not stopped:
        rounds += 1
        mine = top_up.probe(top_up.candidate, top_up.references, rounds)
        theirs = top_up.probe(baseline, references, rounds)
        requests += top_up.requests
        comparison = replace(comparison, candidate=comparison.candidate.plus(mine),
                             baseline=comparison.baseline.plus(theirs), look=rounds + 1)
        stopped = why_stop(comparison, rounds, top_up)
        if not stopped and not (mine.n and theirs.n):
            stopped = "a round brought no evidence (its requests failed)"
    return replace(comparison, purchase=Purchase(rounds, requests, stopped)) if rounds else comparison


def rounds_allowed(top_up: TopUp | None) -> int:
    """How many rounds the bound lets this stressor buy (each one more look of the excess test)."""
    if top_up is None or top_up.requests < 1:
        return 0
    return min(MAX_ROUNDS, MAX_EXTRA_REQUESTS // top_up.requests)


def why_stop(comparison: LoadComparison, rounds: int, top_up: TopUp) -> str:
    """Why no more rounds are bought ("" while they are)."""
    candidate, baseline = comparison.candidate, comparison.baseline
    if candidate.k == 0:
        return "nothing to judge"
    if comparison.charged:
        return f"the excess test rejected at look {comparison.look}"
    if baseline.k and candidate.rate <= baseline.rate:
        return "the candidate's rate does not exceed the baseline's"
    if rounds >= rounds_allowed(top_up):
        return f"{rounds} round(s) bought, the most the bound allows; the test still undecided"
    return ""


def fresh(submissions: Sequence[Submission], round_: int) -> list[Submission]:
    """The same submissions under request ids of their own for round `round_` (ids are unique per run)."""
    return [replace(s, request=replace(s.request, request_id=f"{s.request.request_id}-more{round_}"))
            for s in submissions]


def resend(candidate, references, batches: Sequence[tuple[Sequence[Submission], int]], *, mean_latency_s: float,
           count: Callable[[Any, LoadRun, Any], Count] | None = None) -> TopUp:
    """The common round: each of the stressor's load runs (its submissions and their concurrency) once more, and
    `count(route, run, references)` of each (default: the outputs that differ from the route's own serial
    references, `differing`), summed."""
    def probe(route, refs, round_: int) -> Count:
        total = Count(0, 0)
        for submissions, concurrency in batches:
            run = drive_handle(route, fresh(submissions, round_), concurrency=concurrency,
                               mean_latency_s=mean_latency_s)
            total = total.plus(count(route, run, refs) if count else differing(run.outcomes, refs))
        return total
    return TopUp(candidate, references, probe, requests=sum(len(s) for s, _ in batches))


def differing(outcomes, references: Mapping[str, Completion]) -> Count:
    """Completed outcomes whose tokens differ from their serial reference; failed ones named beside the count."""
    done = [o for o in outcomes if o.ok and o.key in references]
    failed = tuple(o.request_id for o in outcomes if not o.ok and not o.aborted)
    return Count(sum(o.completion.token_ids != references[o.key].token_ids for o in done), len(done), failed)


def record(findings, comparison: LoadComparison, *, check: str, control: LoadControl, candidate,
           examples: Sequence[str] | None = None) -> bool:
    """Report the control; True when the candidate's mismatches are to be judged (charged, or none at all).

    The baseline mismatching too gives an engine note on the baseline (with its own mismatches, `examples` or
    the control's) and the stressor's "exact under load" part "not verified"; a control too small to decide
    makes that part "not verified: control too small"; an uncharged candidate gets an info line with both
    rates, never a finding."""
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
    elif comparison.too_small:
        findings.cover(check, candidate.name, verified=False, part=EXACT_PART,
                       ran={"candidate mismatches": comparison.candidate.k, "control outputs": comparison.baseline.n},
                       could_detect="mismatches under load beyond what the engine shows without speculation",
                       reason=f"{TOO_SMALL}: {comparison.sentence()}")
    if (comparison.engine or comparison.too_small) and not comparison.charged:
        findings.add(Finding(check=check, severity="info", route=candidate.name,
                             title=f"{check}: {comparison.sentence()}",
                             details={"load_control": comparison.as_details()}))
    return comparison.judged
