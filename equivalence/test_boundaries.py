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
from spec_route_suite.equivalence.boundaries import VARIANTS, build_cases, reference_answer, sweep_prompts
from spec_route_suite.equivalence.depth import draft_depth
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.equivalence.sweep_judge import judge_sweep

pytestmark = pytest.mark.check("boundary")


@pytest.mark.parametrize("variant", VARIANTS)
def test_boundary_sweep(variant, lean_prompt, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                        eos_token_id, findings):
    lacking = [h.name for h in (baseline, candidate) if variant == "stop_token" and not h.capabilities.stop_token_ids]
    if lacking:
        pytest.skip(f"not verified: stop_token boundaries: {', '.join(lacking)} cannot stop on token ids")
    depth = draft_depth(candidate.inventory(), candidate.spec)
    notes = []
    for source in sweep_prompts(lean_prompt, prompt_pool(suite_config)):
        # room for the EOS variants: the prompt grows by up to max_new_tokens - 1 output tokens, the sweep by k + 2
        fitted = fitted_prompts.ids(source, max_tokens=suite_config.max_new_tokens + depth.k + 2)
        prompt_ids, ref = reference_answer(baseline, fitted, source, suite_config.max_new_tokens)
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
