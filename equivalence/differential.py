"""What a check does with a pair judgement (equivalence/rules.py): engine notes, coverage parts, controls.

A rule the baseline breaks the same way on the same request is engine behaviour: ONE "engine" note
per rule per test, on the baseline (it fails no route and is no finding about the baseline), and
the rule's part of the check family becomes "not verified: the engine itself does not honour X",
never "verified". What the candidate alone breaks is a finding whose details quote the baseline's
answer to the same request (`control`). Titles are request-independent, so the report groups the
notes of many tests under one line (reports/render_markdown.py).
Environment: none.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

from spec_route_suite.equivalence.rules import RULES, PairJudgement, Violation, judge
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.reports.findings import Finding

SHOWN_REQUESTS = 8


def control(label: str, answer: Completion | None, violations: Sequence[Violation] = (), *,
            why_none: str = "") -> dict[str, Any]:
    """The baseline's answer to the same request, as a finding quotes it."""
    if answer is None:
        return {"request": label, "baseline_answer": None, "why": why_none}
    return {"request": label, "tokens": list(answer.token_ids)[:64], "text": answer.text[:300],
            "finish_reason": answer.finish_reason, "usage_completion_tokens": answer.usage_completion_tokens,
            "choices": len(answer.choices) or 1,
            "violations": [v.detail for v in violations] or ["none: the baseline honours every rule here"]}


def control_line(baseline_violations: Sequence[Violation]) -> str:
    """One line for a finding's diff: what the baseline did on the same request."""
    if not baseline_violations:
        return "baseline, same request: honours every rule checked"
    return "baseline, same request: " + "; ".join(v.detail for v in baseline_violations)


def not_honoured(rule: str, signature: str) -> str:
    return (f"the engine itself does not honour {RULES[rule]}: {signature} on the baseline too (same request), "
            f"so this rule cannot show what speculation does")


@dataclass
class _Sighting:
    violation: Violation
    labels: list[str] = field(default_factory=list)
    request: Request | None = None
    answer: Completion | None = None


class Differential:
    """One test's pair judgements: shared violations are gathered per rule and reported once at `close`."""

    def __init__(self, findings, *, check: str, baseline, candidate, prompt_id: str | None = None):
        self.findings, self.check, self.prompt_id = findings, check, prompt_id
        self.baseline, self.candidate = baseline, candidate
        self._seen: dict[str, _Sighting] = {}

    def judge(self, *, label: str, request: Request, baseline_answer: Completion,
              baseline_violations: Sequence[Violation], candidate_violations: Sequence[Violation]) -> PairJudgement:
        verdict = judge(baseline=baseline_violations, candidate=candidate_violations)
        for violation in verdict.shared:
            sighting = self._seen.setdefault(violation.rule, _Sighting(violation, request=request,
                                                                         answer=baseline_answer))
            if label not in sighting.labels:
                sighting.labels.append(label)
        return verdict

    @property
    def rules(self) -> list[str]:
        return list(self._seen)

    def close(self) -> list[Finding]:
        """One engine note per rule seen on both routes, and that rule's coverage part "not verified"."""
        notes = []
        for rule, seen in self._seen.items():
            first = seen.violation
            note = Finding(
                check=self.check, severity="engine", route=self.baseline.name, prompt_id=self.prompt_id,
                title=f"engine behaviour on both routes: {first.signature} ({rule})",
                details={"rule": rule, "signature": first.signature, "example": first.detail,
                         "requests": seen.labels[:SHOWN_REQUESTS], "requests_seen": len(seen.labels),
                         "candidate": self.candidate.name,
                         "request": _request_dict(seen.request),
                         "baseline_control": control(seen.labels[0], seen.answer, [first]),
                         "why": "the baseline breaks this rule the same way on the same request: a fact about "
                                "the engine, not a speculation finding"})
            notes.append(self.findings.add(note))
            self.findings.cover(self.check, self.candidate.name, verified=False, part=rule,
                                ran={"requests": len(seen.labels)}, could_detect=f"{RULES[rule]} broken by speculation",
                                reason=not_honoured(rule, first.signature))
        return notes


def _request_dict(req: Request | None) -> dict[str, Any]:
    if req is None:
        return {}
    fields = dataclasses.asdict(req)
    fields["prompt_ids"] = list(req.prompt_ids)[:64]
    return {k: v for k, v in fields.items() if v not in (None, (), "", False) or k == "prompt_ids"}
