"""One stated limit's edge cases sent to both routes and judged: serving rules as a pair, tokens against the baseline.

Why a module: equivalence/stated_boundaries.py says where the limit is and where the prompts go; this sends them
(equivalence/test_stated_boundaries.py per limit), holds each answer to the serving rules against the baseline's
answer to the same request, classifies a greedy split (--greedy-policy), and turns what the candidate alone broke
into one finding (`edge_finding`, from values only). Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from spec_route_suite.equivalence.differential import Differential, control_line
from spec_route_suite.equivalence.greedy import compare_greedy, exposure
from spec_route_suite.equivalence.rules import answer_violations
from spec_route_suite.equivalence.stated_boundaries import WHAT, EdgeCase, Stated, engine_rules_out
from spec_route_suite.prompts.exact import ExactPrompts
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.errors import ContextExceeded, RouteError
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import ANSWER_FIELDS, error_repro, parity_repro

SOURCES = 2   # prompts per length
SHOWN = 12


@dataclass
class EdgeEvidence:
    """What a limit's edge requests showed: the candidate's own problems, the requests it failed where the baseline
    answered, the first case that showed either, and how much was sent and compared."""

    problems: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    first: tuple[Request, str, Completion, Completion | None] | None = None   # (request, label, baseline, candidate)
    compared: int = 0
    sent: int = 0


def unreachable(limit: Stated, why: str, engine_context: int | None) -> tuple[dict, str]:
    """A limit the plan sends no request to: its coverage row's fields (FindingSink.cover keywords, without
    could_detect) and the skip text ('' when the engine itself rules the limit out: not applicable, the test passes)."""
    if engine_rules_out(limit, engine_context):   # the engine says it: no request of its own reaches the limit
        return {"verified": True, "applicable": False,
                "reason": f"{why}: the bug class needs a limit inside the engine's context "
                          f"({engine_context or 'unknown'} tokens)"}, ""
    reason = (f"not verified: {why} (the candidate's own context is {engine_context or 'unknown'} tokens: the "
              f"limit is inside it, out of reach of requests both routes take)")
    return {"verified": False, "reason": reason}, reason[:500]


def send_edges(kind: str, limit: Stated, cases: list[EdgeCase], *, baseline, candidate, tokenizer, suite_config,
               near_tie_policy, eos_token_id, findings) -> EdgeEvidence:
    """Each case SOURCES times to both routes: serving rules judged as a pair (what both break alike is an engine
    note), the candidate's tokens against the baseline's where the baseline is trusted."""
    exact = ExactPrompts(tokenizer, prompt_pool(suite_config))
    stop_ids = frozenset() if eos_token_id is None else frozenset({eos_token_id})
    differential = Differential(findings, check="boundary", baseline=baseline, candidate=candidate,
                                prompt_id=f"{kind}@{limit.tokens}")
    edges = EdgeEvidence()
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
                edges.failures.append(f"[{label}] candidate failed where the baseline answered: {exc.describe()[:300]}")
                edges.first = edges.first or (req, label, expected, None)
                continue
            edges.sent += 1
            theirs = answer_violations(request=req, completion=expected, decode=tokenizer.decode, stop_ids=stop_ids)
            ours = answer_violations(request=req, completion=actual, decode=tokenizer.decode, stop_ids=stop_ids)
            verdict = differential.judge(label=label, request=req, baseline_answer=expected,
                                         baseline_violations=theirs, candidate_violations=ours)
            found = [f"[{label}] candidate: {v.detail} ({control_line(theirs)})" for v in verdict.candidate]
            if verdict.baseline_trusted:
                edges.compared += exposure(baseline=expected.token_ids, candidate=actual.token_ids)
                divergence = compare_greedy(baseline=expected, candidate=actual, decode=tokenizer.decode)
                if divergence is not None:
                    severity, why_split = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer,
                                                                prompt_ids=req.prompt_ids, expected=expected,
                                                                got=actual, max_tokens=req.max_tokens)
                    if severity == "bug":
                        found.append(f"[{label}] diverges at token {divergence.position}: {why_split}\n"
                                     f"{divergence.diff()}")
            if found:
                edges.problems += found
                edges.first = edges.first or (req, label, expected, actual)
    differential.close()
    return edges


def shown(problems: list[str]) -> str:
    """The first SHOWN problems, one a line, and how many more."""
    return "\n".join(problems[:SHOWN]) + (f"\n... {len(problems) - SHOWN} more" if len(problems) > SHOWN else "")


def edge_finding(kind: str, limit: Stated, k: int, edges: EdgeEvidence, *, baseline, candidate) -> Finding | None:
    """The limit's finding (None when the candidate broke nothing): a bug when it answered wrong, an error when it
    only failed requests the baseline answered; its diff lists the problems, then the failures."""
    if not edges.problems and not edges.failures:
        return None
    problems = edges.problems + edges.failures
    req, label, expected, actual = edges.first
    return Finding(
        check="boundary", severity="bug" if len(problems) > len(edges.failures) else "error",
        route=candidate.name, prompt_id=f"{kind}@{limit.tokens}",
        title=f"greedy output differs from the baseline at the {WHAT[kind]} ({limit.describe()}; first: {label})",
        details={"diff": shown(problems), "limit": limit.describe(), "speculation_depth": k,
                 "first_case": {"prompt_ids": list(req.prompt_ids), "max_tokens": req.max_tokens},
                 "baseline_tokens": list(expected.token_ids),
                 "candidate_tokens": None if actual is None else list(actual.token_ids), "problems": problems[:100],
                 "repro": (parity_repro([req], candidate=candidate, baseline=baseline, fields=ANSWER_FIELDS,
                                        expected=[expected], actual=[actual]) if actual is not None else
                           error_repro(req, candidate=candidate, baseline=baseline))})
