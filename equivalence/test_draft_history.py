"""Drafting that depends on earlier requests (check family "draft-history"): equivalence/draft_history.py says why.

Per candidate, PROMPTS greedy prompts, then other requests (the server's slots, 3 to 8), then the prompts again in
reverse order, one request at a time. A drafter without cross-request state must draft each prompt alike both times
(a warning otherwise, naming both requests: answers are unchanged, the speed is gone); an n-gram drafter's
acceptance after other traffic is measured (`draft_history`), not judged. The same greedy prompt answered
differently is judged by the near-tie policy.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.draft_history import (CHECK, COULD_DETECT, MAX_TOKENS, PROMPTS, HistoryPlan,
                                                        HistoryVerdict, drafter_kind, findings_of, history_size,
                                                        pairs_of)
from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.reports.repro_spec import draft_history_repro

pytestmark = pytest.mark.check("draft-history")


def test_drafting_does_not_depend_on_earlier_requests(candidate, baseline, tokenizer, fitted_prompts, suite_config,
                                                      near_tie_policy, findings):
    inventory = candidate.inventory()
    if (inventory.extra or {}).get("per_response_evidence") is False:
        why = f"'{candidate.name}' states no drafting per answer (its server counts drafts only server-wide)"
        findings.cover(CHECK, candidate.name, verified=False, could_detect=COULD_DETECT, reason=why)
        pytest.skip(f"not verified: {why}")
    size = history_size((inventory.extra or {}).get("slots"))
    plan = HistoryPlan.of(pick_lean(prompt_pool(suite_config), PROMPTS + size),
                          lambda r: fitted_prompts.ids(r, max_tokens=MAX_TOKENS), history=size)
    answers = {req.request_id: candidate.generate(req) for req in plan.order()}
    verdict = HistoryVerdict(candidate.name, drafter_kind(inventory, candidate.spec), tuple(pairs_of(plan, answers)),
                             requests=len(answers))
    findings.measure("draft_history", **verdict.measurement())
    findings.cover(CHECK, candidate.name, **verdict.coverage())
    repro = draft_history_repro(plan.order(), plan.positions(), candidate=candidate, baseline=baseline)
    for finding in findings_of(verdict, plan, lambda pair: near_tie_policy.judge(
            baseline=baseline, tokenizer=tokenizer, prompt_ids=pair.prompt_ids, expected=pair.first, got=pair.again,
            max_tokens=MAX_TOKENS), repro=repro):
        findings.add(finding)
    if any(f.fails_route for f in findings.items):
        pytest.fail(f"'{candidate.name}': {findings.items[-1].title}", pytrace=False)
