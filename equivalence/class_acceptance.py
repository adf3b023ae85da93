"""Acceptance by prompt class: how well speculation does on each (source, category) of the run's prompts.

Why: a route that accepts well on short math may do nothing on long code answers (DFlash 2's published
acceptance length runs from 5.46 on GSM8K down to 4.10 on MT-Bench), and a class on which every draft is
rejected has had only its target path checked. Each class gets a phase: up to PHASE_PROMPTS of its prompts,
greedy, sent together (one at a time to a route that serialises). The phase's evidence, best first:
1. per-answer counters: every answer states its drafted / accepted tokens (llama.cpp `timings`, SGLang
   `meta_info`, the in-process engines); summed over the class's answers;
2. route counters: the route's own cumulative counters (an in-process engine of this worker) before and
   after the phase; exact, since nothing else runs on it meanwhile;
3. server counters: a server's cumulative /metrics counters (vLLM) before and after the phase; exact only
   on an idle server, so the worker defers such routes to the controller, which runs the phases after
   every test has finished (spec_route_suite/class_phases.py), and a phase whose counters grew more than
   its own answers can explain (drafts + accepted > tokens + slack) is repeated once, then left unknown.
The report names the classes where speculation did nothing while it worked on others (reports/by_class.py):
a gap in the run's evidence, not a correctness finding.
Environment: none.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from spec_route_suite.routes.base import AcceptanceSnapshot, Completion, Request, summed_positions
from spec_route_suite.routes.errors import RouteError

CHECK = "class-acceptance"
PHASE_PROMPTS = 3
PHASE_CONCURRENCY = 4
PER_ANSWER, ROUTE_COUNTERS, SERVER_COUNTERS, NONE = (
    "per-answer counters", "route counters (class-pure phase)", "server counters (class-pure phase)", "none")
RETRIES = 1


@dataclass(frozen=True)
class ClassAcceptance:
    """One class's phase: what was sent and the speculation counted for it (None: no evidence, `why`)."""

    source: str
    category: str
    answers: int
    tokens: int
    method: str
    drafts: int | None = None           # verification steps that drafted
    draft_tokens: int | None = None
    accepted: int | None = None
    accepted_per_pos: tuple[int, ...] = ()
    why: str = ""

    @property
    def known(self) -> bool:
        return self.method != NONE

    @property
    def mean_acceptance_length(self) -> float | None:
        return round(1 + self.accepted / self.drafts, 3) if self.known and self.drafts else None

    @property
    def per_position_rates(self) -> list[float]:
        return [round(a / self.drafts, 3) for a in self.accepted_per_pos] if self.drafts else []

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accepted_per_pos": list(self.accepted_per_pos),
                "mean_acceptance_length": self.mean_acceptance_length,
                "per_position_acceptance_rate": self.per_position_rates}


@dataclass
class Phase:
    """The answers of one phase and the route's counters around it."""

    answers: list[Completion]
    before: AcceptanceSnapshot | None
    after: AcceptanceSnapshot | None
    errors: list[str] = field(default_factory=list)


def class_requests(records: Sequence[Any], fitted_prompts) -> dict[tuple[str, str], list[Request]]:
    """(source, category) -> the greedy requests of its first PHASE_PROMPTS prompts (their own max_tokens, stop)."""
    groups: dict[tuple[str, str], list[Request]] = {}
    for record in records:
        phase = groups.setdefault(record.group, [])
        if len(phase) < PHASE_PROMPTS:
            max_tokens = fitted_prompts.max_tokens_for(record)
            phase.append(Request(prompt_ids=fitted_prompts.ids(record, max_tokens), max_tokens=max_tokens,
                                 temperature=0.0, stop=record.stop, request_id=f"class-accept-{record.id}"))
    return groups


def _snapshot(handle) -> AcceptanceSnapshot | None:
    try:
        return handle.acceptance()
    except (RouteError, OSError):
        return None


def run_phase(handle, requests: Sequence[Request]) -> Phase:
    before = _snapshot(handle)
    if handle.capabilities.concurrency:
        results = handle.generate_concurrently(list(requests), concurrency=PHASE_CONCURRENCY)
    else:
        results = [handle.generate(r) for r in requests]
    answers = [r for r in results if isinstance(r, Completion)]
    errors = [r.describe() for r in results if isinstance(r, RouteError)]
    return Phase(answers=answers, before=before, after=_snapshot(handle), errors=errors)


def stated(phase: Phase) -> bool:
    """Did every answer of the phase state its own speculation?"""
    return bool(phase.answers) and all(a.draft_tokens is not None for a in phase.answers)


def scope(phase: Phase) -> str | None:
    """"route" / "server": the kind of cumulative counters around the phase; None: the route has none."""
    if phase.before is None or phase.after is None:
        return None
    return phase.after.scope


def evidence(group: tuple[str, str], phase: Phase, *, depth: int | None) -> ClassAcceptance:
    """The class's acceptance from one phase, by the best evidence it has."""
    source, category = group
    base = dict(source=source, category=category, answers=len(phase.answers),
                tokens=sum(len(a.token_ids) for a in phase.answers))
    if not phase.answers:
        return ClassAcceptance(**base, method=NONE, why=f"no answer ({'; '.join(phase.errors)[:200] or 'none sent'})")
    if stated(phase):
        per_pos = summed_positions(a.accepted_per_pos for a in phase.answers)
        steps = [a.draft_steps for a in phase.answers]
        return ClassAcceptance(**base, method=PER_ANSWER, draft_tokens=sum(a.draft_tokens for a in phase.answers),
                               accepted=sum(a.accepted_tokens or 0 for a in phase.answers), accepted_per_pos=per_pos,
                               drafts=sum(steps) if all(s is not None for s in steps) else None)
    kind = scope(phase)
    if kind is None:
        return ClassAcceptance(**base, method=NONE, why="the route states no speculation counters (none per answer, "
                                                        "no cumulative counters)")
    delta = phase.after.minus(phase.before)
    method = ROUTE_COUNTERS if kind == "route" else SERVER_COUNTERS
    if kind != "route":
        unexplained = contamination(delta, tokens=base["tokens"], requests=len(phase.answers), depth=depth)
        if unexplained:
            return ClassAcceptance(**base, method=NONE, why=unexplained)
    return ClassAcceptance(**base, method=method, drafts=delta.drafts, draft_tokens=delta.draft_tokens,
                           accepted=delta.accepted, accepted_per_pos=delta.accepted_per_pos)


def contamination(delta: AcceptanceSnapshot, *, tokens: int, requests: int, depth: int | None) -> str:
    """Why a server's counter growth over a phase cannot be the phase's alone ("" when it can): each verification
    step of a request emits its accepted tokens plus one, so drafts + accepted <= tokens emitted, give or take the
    drafts a request accepts past its max_tokens (depth + 1 per request)."""
    if delta.drafts < 0 or delta.accepted < 0:
        return "the server's counters went down during the phase (a restart)"
    slack = requests * ((depth or 4) + 1)
    if delta.drafts + delta.accepted > tokens + slack:
        return (f"other traffic on the server during the phase: its counters grew by {delta.drafts} drafts + "
                f"{delta.accepted} accepted, more than the phase's {tokens} tokens explain")
    return ""


def class_profile(handle, groups: dict[tuple[str, str], list[Request]], *, depth: int | None,
                  defer_server: bool) -> tuple[list[ClassAcceptance], bool]:
    """Every class's phase on `handle`; (profile, deferred). With `defer_server`, a route whose evidence is only a
    server's cumulative counters is not measured here: deferred=True after the first phase (the controller runs
    the phases on the idle server). Without it, a contaminated phase is repeated RETRIES times."""
    profile: list[ClassAcceptance] = []
    for group, requests in groups.items():
        for attempt in range(RETRIES + 1):
            phase = run_phase(handle, requests)
            if defer_server and not stated(phase) and scope(phase) == "server":
                return [], True
            found = evidence(group, phase, depth=depth)
            if found.known or "other traffic" not in found.why:
                break
        profile.append(found)
    return profile, False


COULD_DETECT = ("acceptance length and acceptance by position per prompt class; a class on which speculation does "
                "nothing (no drafts, or every draft rejected) while others accept")


def coverage(profile: Sequence[ClassAcceptance]) -> dict[str, Any]:
    """The coverage record's fields: verified when every class's phase gave evidence."""
    unknown = [c for c in profile if not c.known]
    reason = ""
    if not profile:
        reason = "no prompt class to measure"
    elif unknown:
        reason = (f"{len(unknown)} of {len(profile)} classes without evidence, e.g. {unknown[0].source}/"
                  f"{unknown[0].category}: {unknown[0].why}")
    methods = sorted({c.method for c in profile if c.known})
    return {"verified": not reason, "reason": reason,
            "ran": {"classes": len(profile) - len(unknown), "answers": sum(c.answers for c in profile)},
            "could_detect": COULD_DETECT + (f" ({', '.join(methods)})" if methods else "")}


def record_profile(findings, route: str, profile: Sequence[ClassAcceptance], *, measured_by: str) -> None:
    """A measured profile's records: the `class_acceptance` measurement and the family's coverage row."""
    findings.measure("class_acceptance", route=route, measured_by=measured_by,
                     classes=[c.as_dict() for c in profile])
    findings.cover(CHECK, route, **coverage(profile))
