"""Greedy equivalence: at temperature 0 the candidate must emit the baseline's tokens, prompt by prompt."""
from __future__ import annotations

import dataclasses

import pytest

from equivalence.greedy import compare_greedy
from fixtures.prompts.encode import encode_prompt
from fixtures.routes.base import Request
from reports.findings import Finding

pytestmark = pytest.mark.check("greedy")


def test_greedy_matches_baseline(prompt, baseline, candidate, tokenizer, suite_config, findings):
    req = Request(prompt_ids=encode_prompt(tokenizer, prompt.text), max_tokens=suite_config.max_new_tokens,
                  temperature=0.0, request_id=f"greedy-{prompt.id}")
    expected = baseline.generate(req)
    actual = candidate.generate(req)
    divergence = compare_greedy(baseline=expected, candidate=actual, decode=tokenizer.decode)
    if divergence is None:
        return
    findings.add(Finding(
        check="greedy", severity="bug", route=candidate.name, prompt_id=prompt.id,
        title=f"greedy output diverges from the baseline at token {divergence.position} of prompt {prompt.id}",
        details={"diff": divergence.diff(), "divergence": dataclasses.asdict(divergence),
                 "prompt_category": prompt.category, "prompt_ids": list(req.prompt_ids),
                 "max_tokens": req.max_tokens, "baseline_tokens": list(expected.token_ids),
                 "candidate_tokens": list(actual.token_ids)},
    ))
    pytest.fail(
        f"prompt {prompt.id}: candidate '{candidate.name}' diverges from baseline '{baseline.name}' at token "
        f"{divergence.position}: baseline {divergence.baseline_token} {divergence.baseline_token_text!r}, "
        f"candidate {divergence.candidate_token} {divergence.candidate_token_text!r}\n{divergence.diff()}",
        pytrace=False)
