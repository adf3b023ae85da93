"""Agentic parity: chat requests with tools get the baseline's tool calls, reasoning, content and finish_reason.

The fixed agent prompts (spec_route_suite/prompts/agentic.py: a question that needs a tool, a tool result to use,
a question that needs none) go to both routes as chat requests with `tools`, greedy, plain and streamed.
Streamed answers are folded back (content and reasoning joined, tool-call deltas reassembled by index)
and compared with the baseline's streamed answer, plain with plain: a server whose stream and plain
answers differ alike on both routes (vLLM streams the blank content before a call it leaves out of the
plain message) is engine behaviour, not a finding. Judged by equivalence/agentic.py; sessions, the check
conversation and the single request after a burst are in stressors/test_agentic_sessions.py.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence import agentic
from spec_route_suite.prompts.agentic import parity_prompts

pytestmark = pytest.mark.check("agentic")   # a literal: tests/mutation.py finds a family's modules by it
MAX_TOKENS = 64   # a thought and one call (or one answer) end within ~50 tokens on the embedded pair


@pytest.mark.parametrize("mode", ("plain", "stream"))
def test_parity(mode, baseline, candidate, tokenizer, context_fit, suite_config, calibration, eos_token_id, findings):
    part = f"parity {mode}"
    reason = agentic.parity_lacking(mode, tokenizer, baseline, candidate)
    if reason:
        agentic.cover_lacking(findings, candidate.name, part=part, reason=reason)
        pytest.skip(reason)
    max_tokens = min(suite_config.max_new_tokens, MAX_TOKENS)
    evidence, failures, left_out = agentic.Evidence((baseline.name, candidate.name)), [], []
    sent = []   # requests so far: a failing one's repro resends the last few first (the first one: itself, once)
    for prompt in parity_prompts():
        req, why = agentic.sized_request(prompt, tokenizer=tokenizer, max_tokens=max_tokens, stream=mode == "stream",
                                         context_fit=context_fit, routes=(baseline, candidate))
        if req is None:   # too long as the suite or a server renders it, or not renderable at all: never sent
            left_out.append(why)
            continue
        expected = agentic.answer(baseline, req, findings, candidate.name, part)
        actual = agentic.answer(candidate, req, findings, candidate.name, part)
        evidence.add(baseline.name, expected)
        evidence.add(candidate.name, actual)
        failure = agentic.judge(expected, actual, req=req, label=f"{mode} answer", prompt_id=prompt.id,
                                baseline=baseline, candidate=candidate, tokenizer=tokenizer, suite_config=suite_config,
                                calibration=calibration, eos_token_id=eos_token_id, findings=findings,
                                history=sent[-agentic.HISTORY:] or [req])
        sent.append(req)
        if failure:
            failures.append(failure)
    agentic.cover_parity(findings, candidate.name, part=part, evidence=evidence, left_out=left_out)
    if failures:
        pytest.fail(f"candidate '{candidate.name}' vs baseline '{baseline.name}':\n  " + "\n  ".join(failures),
                    pytrace=False)
