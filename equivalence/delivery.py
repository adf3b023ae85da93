"""What an answer delivers of what its request asked for, judged against the baseline's answer to the same request.

Why: an HTTP adapter that gets an answer without the logprobs it asked for (none at all, or entries for part of the
tokens, as llama.cpp's /v1 gives for tokens of accepted drafts) raises CapabilityMissing, and a check that turns
that into "skipped: not verified" lets a candidate that drops logprobs exactly where speculation ran read adopt.
Whether the route *can* give logprobs is not the question; the rule is differential (equivalence/rules.py): a
capability the baseline delivers on the same request and the candidate does not is a candidate finding. The same
gap on the baseline's answer is engine behaviour (an "engine" note, the rule's part "not verified"); a baseline that
cannot be asked leaves it "not verified", never passed.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from spec_route_suite.equivalence.differential import Differential, control
from spec_route_suite.equivalence.rules import Violation
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.errors import CapabilityMissing, FeatureUnsupported
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import logprobs_repro

RULE = "logprob_entries"
SIGNATURE = "logprobs asked for and not delivered for every token"
# what an answer may come back without while the request asked for it (a refused feature or a missing endpoint is
# a refusal, judged elsewhere: "not supported by this route")
DELIVERED = ("logprobs",)


@dataclass(frozen=True)
class Delivery:
    """One route's answer to a request, and what it lacks of what the request asked ("" when nothing)."""

    answer: Completion | None
    missing: str = ""

    @property
    def delivered(self) -> bool:
        return not self.missing


def lacking(req: Request, answer: Completion) -> str:
    """Why `answer` does not carry the logprobs `req` asked for ("" when it does, or none were asked)."""
    if req.logprobs is None:
        return ""
    if answer.logprobs is None:
        return f"requested logprobs={req.logprobs}, the answer carries none"
    if len(answer.logprobs) < len(answer.token_ids):
        return f"{len(answer.logprobs)} logprob entries for {len(answer.token_ids)} tokens"
    return ""


def is_dropped(exc: BaseException) -> bool:
    """An answer that came back without something the request asked for (not a refusal of the request)."""
    return isinstance(exc, CapabilityMissing) and not isinstance(exc, FeatureUnsupported) and \
        exc.capability in DELIVERED


def deliver(handle: Any, req: Request) -> Delivery:
    """`handle`'s answer to `req` with what it lacks; an adapter's CapabilityMissing for this answer is its lack."""
    try:
        answer = handle.generate(req)
    except CapabilityMissing as exc:
        if not is_dropped(exc):
            raise
        return Delivery(None, exc.describe())
    return Delivery(answer, lacking(req, answer))


def candidate_answer(req: Request, *, baseline, candidate, findings, check: str, prompt_id: str | None) -> Completion:
    """The candidate's answer to `req` when it delivers what `req` asks; otherwise the baseline's answer to the same
    request decides (judge_dropped: a finding, an engine note or "not verified"), and the test ends there."""
    mine = deliver(candidate, req)
    if mine.delivered:
        return mine.answer
    judge_dropped(req, mine.missing, baseline=baseline, candidate=candidate, findings=findings, check=check,
                  prompt_id=prompt_id)


def judge_dropped(req: Request, missing: str, *, baseline, candidate, findings, check: str,
                  prompt_id: str | None) -> NoReturn:
    """The candidate's answer to `req` lacks what it asked for (`missing`): fail with a finding when the baseline's
    answer to the same request carries it; skip as not verified when the baseline lacks it too (an engine note) or
    cannot be asked for it."""
    could = "logprobs the candidate drops where the baseline delivers them on the same request"
    if not candidate.capabilities.has("logprobs"):   # the adapter learned the route cannot give comparable logprobs
        pytest.skip(f"not verified: route '{candidate.name}' lacks comparable logprobs ({missing})"[:500])
    if not baseline.capabilities.has("logprobs"):
        why = (f"candidate '{candidate.name}': {missing}; baseline '{baseline.name}' offers no logprobs, so "
               f"whether the candidate drops what its engine delivers cannot be told")
        findings.cover(check, candidate.name, verified=False, part=RULE, could_detect=could, reason=why)
        pytest.skip(f"not verified: {why}"[:500])
    theirs = deliver(baseline, req)
    if not theirs.delivered:
        differential = Differential(findings, check=check, baseline=baseline, candidate=candidate, prompt_id=prompt_id)
        differential.judge(label=req.request_id, request=req, baseline_answer=theirs.answer,
                           baseline_violations=[Violation(RULE, SIGNATURE, theirs.missing)],
                           candidate_violations=[Violation(RULE, SIGNATURE, missing)])
        differential.close()
        pytest.skip(f"not verified: logprobs not delivered on '{candidate.name}' ({missing}) nor on baseline "
                    f"'{baseline.name}' for the same request ({theirs.missing}): engine behaviour"[:500])
    answer = theirs.answer
    title = (f"candidate '{candidate.name}' returned no logprobs for some tokens although it advertises them "
             f"(baseline '{baseline.name}' delivers them on the same request)")
    findings.add(Finding(
        check=check, severity="bug", route=candidate.name, prompt_id=prompt_id, title=title,
        details={"rule": RULE, "diff": f"candidate: {missing}\nbaseline, same request: "
                                       f"{len(answer.logprobs or ())} logprob entries for {len(answer.token_ids)} tokens",
                 "prompt_ids": list(req.prompt_ids), "stream": req.stream,
                 "baseline_control": control(req.request_id, answer),
                 "repro": logprobs_repro(req, candidate=candidate, baseline=baseline, tolerance=0.0, mode="missing")}))
    pytest.fail(f"{title} ({missing})" + (f" [prompt {prompt_id}]" if prompt_id else ""), pytrace=False)
