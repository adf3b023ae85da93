"""Boundary sweep: max_tokens 1..k+2 with stop strings, stop token ids, EOS reachable and ignore_eos.

One test per (variant, lean prompt); each sends k+2 short greedy requests to both routes
and checks every answer on its own (length, usage, nothing after a stop, finish_reason)
and against the other route. When the baseline's output on the lean prompt cannot host
the variant's stop condition (too short, no EOS), the next few prompts are tried; with
none, the variant is skipped as "not verified". The chat shape (check family "chat") sweeps the
plain and stop-string variants on a chat request (equivalence/chat.py).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.boundaries import VARIANTS, build_cases, run_sweep, speculation_depth
from spec_route_suite.fixtures.prompts.records import load_prompt_set
from spec_route_suite.fixtures.routes.base import Request
from spec_route_suite.fixtures.routes.textlevel import level_details, title_suffix
from spec_route_suite.reports.findings import Finding

pytestmark = pytest.mark.check("boundary")

SEARCH = 5
SHOWN = 12


def _reference(baseline, prompt_ids, prompt, max_tokens: int):
    """The baseline's greedy output (the same request as the greedy test, so the memo is reused)."""
    req = Request(prompt_ids=prompt_ids, max_tokens=max_tokens, temperature=0.0, request_id=f"greedy-{prompt.id}")
    return req.prompt_ids, baseline.generate(req)


def _sources(lean_prompt, suite_config):
    """The lean prompt, the next of its category, then the first of each following category.

    For variants whose stop condition may not fire on the lean prompt (a short answer, no EOS);
    following categories first, so two lean prompts do not fall back onto each other.
    """
    everything = load_prompt_set(suite_config.categories)
    categories = list(dict.fromkeys(p.category for p in everything))
    start = categories.index(lean_prompt.category)
    same = [p for p in everything if p.category == lean_prompt.category and p.id != lean_prompt.id][:1]
    following = [next(p for p in everything if p.category == c)
                 for c in categories[start + 1:] + categories[:start]]
    return [lean_prompt, *same, *following][:SEARCH]


@pytest.mark.parametrize("variant", VARIANTS)
def test_boundary_sweep(variant, lean_prompt, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                        eos_token_id, findings):
    lacking = [h.name for h in (baseline, candidate) if variant == "stop_token" and not h.capabilities.stop_token_ids]
    if lacking:
        pytest.skip(f"not verified: stop_token boundaries: {', '.join(lacking)} cannot stop on token ids")
    depth = speculation_depth(candidate.inventory(), candidate.spec)
    notes = []
    for source in _sources(lean_prompt, suite_config):
        # room for the EOS variants: the prompt grows by up to max_new_tokens - 1 output tokens, the sweep by k + 2
        fitted = fitted_prompts.ids(source, max_tokens=suite_config.max_new_tokens + depth + 2)
        prompt_ids, ref = _reference(baseline, fitted, source, suite_config.max_new_tokens)
        cases, how = build_cases(variant=variant, prompt_ids=prompt_ids, reference=ref, depth=depth,
                                 eos_token_id=eos_token_id, decode=tokenizer.decode,
                                 request_id=f"boundary-{variant}-{source.id}")
        if cases:
            break
        notes.append(f"{source.id}: {how}")
    else:
        pytest.skip(f"not verified: {variant} boundaries: no usable prompt among {'; '.join(notes)}")
    judge_sweep(variant, source, cases, how, depth, baseline=baseline, candidate=candidate, tokenizer=tokenizer,
                findings=findings)


@pytest.mark.check(chat.CHECK)
@pytest.mark.parametrize("variant", chat.BOUNDARY_VARIANTS)
def test_chat_boundary_sweep(variant, chat_lean_prompt, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                             eos_token_id, findings):
    """The sweep on a chat request: the stop conditions and length cap hold on the chat template path too."""
    chat.skip_without_chat(findings, candidate, baseline, candidate)
    depth = speculation_depth(candidate.inventory(), candidate.spec)
    ref_req = chat.chat_shape(chat_lean_prompt, tokenizer, fitted_prompts, max_tokens=suite_config.max_new_tokens,
                              request_id=f"chat-greedy-{chat_lean_prompt.id}")
    with chat.chat_path(findings, candidate):
        reference = baseline.generate(ref_req)
        cases, how = build_cases(variant=variant, prompt_ids=ref_req.prompt_ids, reference=reference, depth=depth,
                                 eos_token_id=eos_token_id, decode=tokenizer.decode,
                                 request_id=f"chat-boundary-{variant}-{chat_lean_prompt.id}")
        if not cases:
            pytest.skip(f"not verified: chat {variant} boundaries on {chat_lean_prompt.id}: {how}")
        cases = [replace(case, request=replace(case.request, messages=ref_req.messages)) for case in cases]
        judge_sweep(variant, chat_lean_prompt, cases, how, depth, baseline=baseline, candidate=candidate,
                    tokenizer=tokenizer, findings=findings, check=chat.CHECK)


def judge_sweep(variant, source, cases, how, depth, *, baseline, candidate, tokenizer, findings,
                check: str = "boundary") -> None:
    """Run one sweep on both routes, record coverage and report every violation."""
    shape = "chat " if cases and cases[0].request.chat else ""
    result = run_sweep(baseline=baseline, candidate=candidate, cases=cases, decode=tokenizer.decode)
    problems, level = result.problems, level_details(result.text_level)
    if result.text_level:
        findings.measure("comparison", check=check, variant=variant, prompt_id=source.id, route=candidate.name,
                         **level)
    findings.cover(check, candidate.name, verified=True, ran={"chat boundary cases" if shape else "cases": result.cases},
                   could_detect=f"{shape}tokens past a stop/EOS/max_tokens, wrong finish_reason (k={depth})"
                                + (" (text-level)" if result.text_level else ""))
    if result.baseline_problems:
        findings.add(Finding(
            check=check, severity="bug", route=baseline.name, prompt_id=source.id,
            title=(f"the baseline '{baseline.name}' itself breaks {variant} boundary rules on prompt {source.id} "
                   f"(a finding about the baseline, not the candidate): {result.baseline_problems[0][:160]}"),
            details={"problems": result.baseline_problems[:100], "how": how}))
    if not problems:
        return
    case, expected, actual = result.first_bad
    shown = "\n".join(problems[:SHOWN]) + (f"\n... {len(problems) - SHOWN} more" if len(problems) > SHOWN else "")
    findings.add(Finding(
        check=check, severity="bug", route=candidate.name, prompt_id=source.id,
        title=(f"{shape}{variant} boundary violations on prompt {source.id} (k={depth}; first: {case.label})"
               + title_suffix(text_level=result.text_level)),
        details={"diff": shown, "how": how, "speculation_depth": depth, **level,
                 "first_case": {"prompt_ids": list(case.request.prompt_ids), "max_tokens": case.request.max_tokens,
                                "stop": list(case.request.stop), "stop_token_ids": list(case.request.stop_token_ids),
                                "ignore_eos": case.request.ignore_eos,
                                **({"messages": [list(m) for m in case.request.messages]} if shape else {})},
                 "baseline_tokens": list(expected.token_ids), "candidate_tokens": list(actual.token_ids),
                 "problems": problems[:100]}))
    pytest.fail(f"{shape}{variant} sweep on prompt {source.id} (baseline '{baseline.name}' vs candidate "
                f"'{candidate.name}', k={depth}; {how}){title_suffix(text_level=result.text_level)}:\n{shown}",
                pytrace=False)
