"""Boundary sweep: max_tokens 1..k+2 with stop strings, stop token ids, EOS reachable and ignore_eos.

One test per (variant, lean prompt); each sends k+2 short greedy requests to both routes
and checks every answer on its own (length, usage, nothing after a stop, finish_reason)
and against the other route: a rule the baseline breaks the same way on the same case is an
"engine" note (equivalence/differential.py), not a finding. When the baseline's output on the lean prompt cannot host
the variant's stop condition (too short, no EOS), the next few prompts are tried; with
none, the variant is skipped as "not verified". The chat shape (check family "chat") sweeps the
plain and stop-string variants on a chat request (equivalence/chat.py).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.boundaries import VARIANTS, build_cases, run_sweep, violations
from spec_route_suite.equivalence.depth import draft_depth
from spec_route_suite.equivalence.differential import Differential, control
from spec_route_suite.fixtures.prompts.prompt_set import prompt_pool
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.textlevel import level_details, title_suffix
from spec_route_suite.reports.findings import DIVERGES, Finding
from spec_route_suite.reports.repro_spec import ANSWER_FIELDS, parity_repro

pytestmark = pytest.mark.check("boundary")

SEARCH = 5
SHOWN = 12
REPRO_ATTEMPTS = 20   # a rule broken on 20% of requests reproduces within 20 resends 99 times in 100


def _reference(baseline, prompt_ids, prompt, max_tokens: int):
    """The baseline's greedy output (the same request as the greedy test, so the memo is reused)."""
    req = Request(prompt_ids=prompt_ids, max_tokens=max_tokens, temperature=0.0, request_id=f"greedy-{prompt.id}")
    return req.prompt_ids, baseline.generate(req)


def _sources(lean_prompt, suite_config):
    """The lean prompt, the next of its class, then the first of each following class (source, category).

    For variants whose stop condition may not fire on the lean prompt (a short answer, no EOS);
    following classes first, so two lean prompts do not fall back onto each other.
    """
    everything = prompt_pool(suite_config)
    groups = list(dict.fromkeys(p.group for p in everything))
    start = groups.index(lean_prompt.group)
    same = [p for p in everything if p.group == lean_prompt.group and p.id != lean_prompt.id][:1]
    following = [next(p for p in everything if p.group == g) for g in groups[start + 1:] + groups[:start]]
    return [lean_prompt, *same, *following][:SEARCH]


@pytest.mark.parametrize("variant", VARIANTS)
def test_boundary_sweep(variant, lean_prompt, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                        eos_token_id, findings):
    lacking = [h.name for h in (baseline, candidate) if variant == "stop_token" and not h.capabilities.stop_token_ids]
    if lacking:
        pytest.skip(f"not verified: stop_token boundaries: {', '.join(lacking)} cannot stop on token ids")
    depth = draft_depth(candidate.inventory(), candidate.spec)
    notes = []
    for source in _sources(lean_prompt, suite_config):
        # room for the EOS variants: the prompt grows by up to max_new_tokens - 1 output tokens, the sweep by k + 2
        fitted = fitted_prompts.ids(source, max_tokens=suite_config.max_new_tokens + depth.k + 2)
        prompt_ids, ref = _reference(baseline, fitted, source, suite_config.max_new_tokens)
        cases, how = build_cases(variant=variant, prompt_ids=prompt_ids, reference=ref, depth=depth.k,
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
    depth = draft_depth(candidate.inventory(), candidate.spec)
    with chat.chat_path(findings, candidate):
        ref_req = chat.chat_shape(chat_lean_prompt, tokenizer, fitted_prompts, max_tokens=suite_config.max_new_tokens,
                                  request_id=f"chat-greedy-{chat_lean_prompt.id}", routes=(baseline, candidate))
        reference = baseline.generate(ref_req)
        cases, how = build_cases(variant=variant, prompt_ids=ref_req.prompt_ids, reference=reference, depth=depth.k,
                                 eos_token_id=eos_token_id, decode=tokenizer.decode,
                                 request_id=f"chat-boundary-{variant}-{chat_lean_prompt.id}")
        if not cases:
            pytest.skip(f"not verified: chat {variant} boundaries on {chat_lean_prompt.id}: {how}")
        cases = [replace(case, request=replace(case.request, messages=ref_req.messages)) for case in cases]
        judge_sweep(variant, chat_lean_prompt, cases, how, depth, baseline=baseline, candidate=candidate,
                    tokenizer=tokenizer, findings=findings, check=chat.CHECK)


def judge_sweep(variant, source, cases, how, depth, *, baseline, candidate, tokenizer, findings,
                check: str = "boundary", counts: dict | None = None) -> None:
    """Run one sweep on both routes, record coverage, note what both routes break alike (engine behaviour)
    and report what the candidate alone breaks, with the baseline's answer to the same case as its control."""
    shape = "chat " if cases and cases[0].request.chat else ""
    differential = Differential(findings, check=check, baseline=baseline, candidate=candidate, prompt_id=source.id)
    result = run_sweep(baseline=baseline, candidate=candidate, cases=cases, decode=tokenizer.decode,
                       differential=differential)
    differential.close()
    problems, level = result.problems, level_details(result.text_level)
    if result.text_level:
        findings.measure("comparison", check=check, variant=variant, prompt_id=source.id, route=candidate.name,
                         **level)
    # `counts` name what the sweep exists for (stop-string requests): none sent is vacuous, whatever else ran
    empty = [name for name, n in {"cases": result.cases, **(counts or {})}.items() if not n]
    vacuous = f"vacuous: 0 {', 0 '.join(empty)} ({how})" if empty else ""
    findings.cover(check, candidate.name, verified=depth.known and not empty,
                   ran={"chat boundary cases" if shape else "cases": result.cases, **(counts or {})},
                   could_detect=f"{shape}tokens past a stop/EOS/max_tokens, wrong finish_reason (k={depth.k}, "
                                f"{depth.source})" + (" (text-level)" if result.text_level else ""),
                   reason="; ".join(r for r in (depth.gap(), vacuous) if r))
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
        title=(f"{shape}{variant} boundary violations on prompt {source.id} (k={depth.k}; first: {case.label})"
               + title_suffix(text_level=result.text_level)),
        details={"diff": shown, "how": how, "speculation_depth": depth.k, "depth_source": depth.source, **level,
                 **({} if result.rules_broken else {"cause": DIVERGES}),   # no rule broken: the answers only differ
                 "first_case": {"prompt_ids": list(case.request.prompt_ids), "max_tokens": case.request.max_tokens,
                                "stop": list(case.request.stop), "stop_token_ids": list(case.request.stop_token_ids),
                                "ignore_eos": case.request.ignore_eos,
                                **({"messages": [list(m) for m in case.request.messages]} if shape else {})},
                 "baseline_tokens": list(expected.token_ids), "candidate_tokens": list(actual.token_ids),
                 "baseline_control": control(case.label, expected, violations(case=case, completion=expected,
                                                                              decode=tokenizer.decode)),
                 "problems": problems[:100], "both_routes": result.shared[:20],
                 # an engine may break a rule on some requests only (a per-request fault, a race): the script
                 # resends the case up to REPRO_ATTEMPTS times and stops at the first reproduction
                 "repro": parity_repro([case.request], candidate=candidate, baseline=baseline, fields=ANSWER_FIELDS,
                                       expected=[expected], actual=[actual], attempts=REPRO_ATTEMPTS)}))
    pytest.fail(f"{shape}{variant} sweep on prompt {source.id} (baseline '{baseline.name}' vs candidate "
                f"'{candidate.name}', k={depth.k}; {how}){title_suffix(text_level=result.text_level)}:\n{shown}",
                pytrace=False)
