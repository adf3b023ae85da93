"""One greedy answer pair judged: coverage and answer records kept, a divergence classified, --greedy-policy applied.

Why a module: the greedy and chat-greedy tests (equivalence/test_greedy.py), the near-tie rate test's requests and
the self-tests that drive a greedy judgement of their own share the request and the judging; a helper in a test
module loaded that module under two names. Environment: none.
"""
from __future__ import annotations

import dataclasses

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.divergence import classify_divergence
from spec_route_suite.equivalence.greedy import answer_record, compare_greedy, exposure
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.textlevel import aligned, describe, is_text_level, title_suffix
from spec_route_suite.reports.findings import DIVERGES, Finding
from spec_route_suite.reports.repro_spec import parity_repro

# a split that noise made (a kernel's nondeterminism, not only a near-tie) comes back on some sends only: the
# repro resends the request up to this many times (it stops at the first split)
SPLIT_ATTEMPTS = 20


def greedy_ids_request(prompt_ids, max_tokens: int, request_id: str, stop: tuple[str, ...] = ()) -> Request:
    return Request(prompt_ids=tuple(prompt_ids), max_tokens=max_tokens, temperature=0.0, request_id=request_id,
                   stop=stop)


def greedy_request(prompt, fitted_prompts) -> Request:
    """The greedy request of a prompt record: its own max_tokens and stop strings where it has them."""
    max_tokens = fitted_prompts.max_tokens_for(prompt)
    return greedy_ids_request(fitted_prompts.ids(prompt, max_tokens), max_tokens, f"greedy-{prompt.id}", prompt.stop)


def judge_greedy(req, prompt, expected, actual, *, baseline, candidate, tokenizer, suite_config, calibration,
                 eos_token_id, findings, check: str = "greedy") -> None:
    """Compare one greedy answer pair, record coverage, classify a divergence and apply --greedy-policy."""
    shape = "chat " if req.chat else ""
    expected, actual = aligned(expected, actual, tokenizer)
    level = describe(expected, actual)
    if is_text_level(expected, actual):
        findings.measure("comparison", check=check, prompt_id=prompt.id, route=candidate.name, **level)
    tokens = exposure(baseline=expected.token_ids, candidate=actual.token_ids)
    # judged by the count that matters: a prompt whose answers are both empty compared nothing
    findings.cover(check, candidate.name, verified=tokens > 0,
                   ran={"chat prompts": 1, "chat tokens compared": tokens} if req.chat else
                   {"prompts": 1, "tokens compared": tokens},
                   could_detect=(chat.COULD_DETECT if req.chat else "any token or finish-reason difference from the "
                                 "baseline")
                                + (" (text-level: equal text with other token boundaries is invisible)"
                                   if is_text_level(expected, actual) else ""),
                   reason="" if tokens else f"vacuous: 0 tokens compared (both answers to {prompt.id} are empty)")
    findings.measure("greedy_answer", check=check, route=candidate.name, baseline=baseline.name, prompt_id=prompt.id,
                     source=prompt.source, category=prompt.category,
                     **answer_record(req, baseline=expected, candidate=actual))
    divergence = compare_greedy(baseline=expected, candidate=actual, decode=tokenizer.decode)
    if divergence is None:
        class_outcome(findings, check, candidate.name, prompt, "match")
        return
    verdict = classify_divergence(baseline=baseline, prompt_ids=req.prompt_ids, divergence=divergence,
                                  baseline_completion=expected, candidate_completion=actual,
                                  max_tokens=req.max_tokens, tau=calibration.get().tau,
                                  eos_token_id=eos_token_id, decode=tokenizer.decode)
    excused = suite_config.greedy_policy == "classify" and verdict.is_near_tie
    class_outcome(findings, check, candidate.name, prompt, "near-tie" if excused else "diverged")
    findings.measure("divergence", position=divergence.position, verdict=verdict.verdict, margin=verdict.margin,
                     tau=verdict.tau, prompt_id=prompt.id, route=candidate.name, comparison=level["comparison"])
    findings.add(Finding(
        check=check, severity="near-tie" if excused else "bug", route=candidate.name, prompt_id=prompt.id,
        title=(f"greedy {shape}output diverges from the baseline at token {divergence.position} of prompt "
               f"{prompt.id} ({verdict.verdict})" + title_suffix(expected, actual)),
        details={"diff": divergence.diff() + f"\n  classification: {verdict.summary()}", **level, "cause": DIVERGES,
                 "divergence": dataclasses.asdict(divergence), "classification": verdict.to_details(),
                 "calibration": calibration.get().describe(), "policy": suite_config.greedy_policy,
                 "prompt_category": prompt.category, "prompt_ids": list(req.prompt_ids),
                 **({"messages": [list(m) for m in req.messages]} if req.chat else {}),
                 "max_tokens": req.max_tokens, "baseline_tokens": list(expected.token_ids),
                 "candidate_tokens": list(actual.token_ids),
                 "repro": parity_repro([req], candidate=candidate, baseline=baseline, expected=[expected],
                                       actual=[actual], attempts=SPLIT_ATTEMPTS)},
    ))
    if excused:
        return
    pytest.fail(
        f"{shape}prompt {prompt.id}: candidate '{candidate.name}' diverges from baseline '{baseline.name}' at token "
        f"{divergence.position}: baseline {divergence.baseline_token} {divergence.baseline_token_text!r}, "
        f"candidate {divergence.candidate_token} {divergence.candidate_token_text!r}\n{divergence.diff()}\n"
        f"  classification ({suite_config.greedy_policy} policy): {verdict.summary()}{title_suffix(expected, actual)}",
        pytrace=False)


def class_outcome(findings, check: str, route: str, prompt, outcome: str) -> None:
    """One prompt's outcome under its class (source, category), for the report's per-class table."""
    findings.measure("class_outcome", check=check, route=route, prompt_id=prompt.id, source=prompt.source,
                     category=prompt.category, outcome=outcome)
