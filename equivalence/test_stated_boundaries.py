"""Greedy parity at the limits the candidate states: chunked-prefill budget, drafter's max length, context end.

For each limit (equivalence/stated_boundaries.py says where it comes from and where the prompts go;
equivalence/stated_sweep.py sends and judges them), two prompts of each exact length
(spec_route_suite/prompts/exact.py, the route's tokenizer) are sent greedy to both routes with max_tokens of two
draft blocks. Each answer is held to the serving rules (equivalence/rules.py,
judged against the baseline's answer to the same request: what both break alike is an engine note), and
the candidate's tokens must be the baseline's (a divergence is classified like every greedy mismatch:
--greedy-policy and tau). A request the candidate fails while the baseline answers is an error finding
naming the limit (vllm#24662 was a crash). A limit the route states it does not have, or one past its engine's own
context, is "not applicable"; one only a smaller baseline context hides, or one nobody states, is "not verified".
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.depth import draft_depth
from spec_route_suite.equivalence.stated_boundaries import KINDS, WHAT, plan, stated_limit
from spec_route_suite.equivalence.stated_sweep import edge_finding, send_edges, unreachable

pytestmark = pytest.mark.check("boundary")


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_at_stated_boundaries(kind, baseline, candidate, tokenizer, context_fit, suite_config, near_tie_policy,
                                     eos_token_id, findings):
    inventory = candidate.inventory()
    depth = draft_depth(inventory, candidate.spec)
    limit = stated_limit(kind, inventory=inventory, spec=candidate.spec, context=context_fit.limit)
    could = f"greedy or serving-rule differences at the {WHAT[kind]} (k={depth.k}, {depth.source})"
    if not limit.known:
        pytest.skip(f"not verified: {WHAT[kind]} boundary on '{candidate.name}': {limit.describe()}")
    cases, why = plan(limit, k=depth.k, context=context_fit.limit)
    if not cases:   # no request both routes take reaches the limit: not applicable, or not verified
        row, skip = unreachable(limit, why, candidate.context_limit(inventory.max_model_len))
        findings.cover("boundary", candidate.name, could_detect=could, **row)
        if skip:
            pytest.skip(skip)
        return
    edges = send_edges(kind, limit, cases, baseline=baseline, candidate=candidate, tokenizer=tokenizer,
                       suite_config=suite_config, near_tie_policy=near_tie_policy, eos_token_id=eos_token_id,
                       findings=findings)
    findings.cover("boundary", candidate.name, verified=depth.known,
                   ran={"edge requests": edges.sent, "tokens compared": edges.compared},
                   could_detect=f"{could}: {limit.describe()}", reason=depth.gap())
    finding = edge_finding(kind, limit, depth.k, edges, baseline=baseline, candidate=candidate)
    if finding is None:
        return
    findings.add(finding)
    pytest.fail(f"{WHAT[kind]} sweep ({limit.describe()}) on '{candidate.name}' vs baseline '{baseline.name}':\n"
                f"{finding.details['diff']}", pytrace=False)
