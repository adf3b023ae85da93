"""Greedy parity at the limits the candidate states: chunked-prefill budget, drafter's max length, context end.

For each limit (equivalence/stated_boundaries.py says where it comes from and where the prompts go), two
prompts of each exact length (spec_route_suite/prompts/exact.py, the route's tokenizer) are sent greedy to both
routes with max_tokens of two draft blocks. Each answer is held to the serving rules (equivalence/rules.py,
judged against the baseline's answer to the same request: what both break alike is an engine note), and
the candidate's tokens must be the baseline's (a divergence is classified like every greedy mismatch:
--greedy-policy and tau). A request the candidate fails while the baseline answers is an error finding
naming the limit (vllm#24662 was a crash). A limit the route states it does not have, or one past its engine's own
context, is "not applicable"; one only a smaller baseline context hides, or one nobody states, is "not verified".
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.depth import draft_depth
from spec_route_suite.equivalence.differential import Differential, control_line
from spec_route_suite.equivalence.greedy import compare_greedy, exposure
from spec_route_suite.equivalence.rules import answer_violations
from spec_route_suite.equivalence.stated_boundaries import KINDS, WHAT, engine_rules_out, plan, stated_limit
from spec_route_suite.prompts.exact import ExactPrompts
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import ContextExceeded, RouteError
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import ANSWER_FIELDS, error_repro, parity_repro

pytestmark = pytest.mark.check("boundary")
SOURCES = 2   # prompts per length
SHOWN = 12


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
    if not cases:
        engine_context = candidate.context_limit(inventory.max_model_len)
        if engine_rules_out(limit, engine_context):   # the engine says it: no request of its own reaches the limit
            findings.cover("boundary", candidate.name, verified=True, applicable=False, could_detect=could,
                           reason=f"{why}: the bug class needs a limit inside the engine's context "
                                  f"({engine_context or 'unknown'} tokens)")
            return
        reason = (f"not verified: {why} (the candidate's own context is {engine_context or 'unknown'} tokens: the "
                  f"limit is inside it, out of reach of requests both routes take)")
        findings.cover("boundary", candidate.name, verified=False, could_detect=could, reason=reason)
        pytest.skip(reason[:500])
    exact = ExactPrompts(tokenizer, prompt_pool(suite_config))
    stop_ids = frozenset() if eos_token_id is None else frozenset({eos_token_id})
    differential = Differential(findings, check="boundary", baseline=baseline, candidate=candidate,
                                prompt_id=f"{kind}@{limit.tokens}")
    problems, failures, first, compared, sent = [], [], None, 0, 0
    for case in cases:
        for source in range(SOURCES):
            req = Request(prompt_ids=exact.ids(case.prompt_tokens, source=source), max_tokens=case.max_tokens,
                          temperature=0.0, request_id=f"edge-{kind}-{case.prompt_tokens}-{case.max_tokens}-{source}")
            label = f"{case.label}: prompt {case.prompt_tokens} tokens, max_tokens {case.max_tokens}, source {source}"
            expected = baseline.generate(req)
            try:
                actual = candidate.generate(req)
            except ContextExceeded:
                raise   # the server stated a smaller context: the plugin re-plans the test
            except RouteError as exc:
                failures.append(f"[{label}] candidate failed where the baseline answered: {exc.describe()[:300]}")
                first = first or (req, label, expected, None)
                continue
            sent += 1
            theirs = answer_violations(request=req, completion=expected, decode=tokenizer.decode, stop_ids=stop_ids)
            ours = answer_violations(request=req, completion=actual, decode=tokenizer.decode, stop_ids=stop_ids)
            verdict = differential.judge(label=label, request=req, baseline_answer=expected,
                                         baseline_violations=theirs, candidate_violations=ours)
            found = [f"[{label}] candidate: {v.detail} ({control_line(theirs)})" for v in verdict.candidate]
            if verdict.baseline_trusted:
                compared += exposure(baseline=expected.token_ids, candidate=actual.token_ids)
                divergence = compare_greedy(baseline=expected, candidate=actual, decode=tokenizer.decode)
                if divergence is not None:
                    severity, why_split = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer,
                                                                prompt_ids=req.prompt_ids, expected=expected,
                                                                got=actual, max_tokens=req.max_tokens)
                    if severity == "bug":
                        found.append(f"[{label}] diverges at token {divergence.position}: {why_split}\n"
                                     f"{divergence.diff()}")
            if found:
                problems += found
                first = first or (req, label, expected, actual)
    differential.close()
    findings.cover("boundary", candidate.name, verified=depth.known,
                   ran={"edge requests": sent, "tokens compared": compared}, could_detect=f"{could}: {limit.describe()}",
                   reason=depth.gap())
    if not problems and not failures:
        return
    problems += failures
    req, label, expected, actual = first
    shown = "\n".join(problems[:SHOWN]) + (f"\n... {len(problems) - SHOWN} more" if len(problems) > SHOWN else "")
    findings.add(Finding(
        check="boundary", severity="bug" if len(problems) > len(failures) else "error",
        route=candidate.name, prompt_id=f"{kind}@{limit.tokens}",
        title=f"greedy output differs from the baseline at the {WHAT[kind]} ({limit.describe()}; first: {label})",
        details={"diff": shown, "limit": limit.describe(), "speculation_depth": depth.k,
                 "first_case": {"prompt_ids": list(req.prompt_ids), "max_tokens": req.max_tokens},
                 "baseline_tokens": list(expected.token_ids),
                 "candidate_tokens": None if actual is None else list(actual.token_ids), "problems": problems[:100],
                 "repro": (parity_repro([req], candidate=candidate, baseline=baseline, fields=ANSWER_FIELDS,
                                        expected=[expected], actual=[actual]) if actual is not None else
                           error_repro(req, candidate=candidate, baseline=baseline))}))
    pytest.fail(f"{WHAT[kind]} sweep ({limit.describe()}) on '{candidate.name}' vs baseline '{baseline.name}':\n"
                f"{shown}", pytrace=False)
