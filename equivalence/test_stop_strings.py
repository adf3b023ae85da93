"""Stop strings on every greedy prompt, and usage / finish_reason on every prompt (equivalence/stop_strings.py).

One test per prompt of the run's prompt set: a short greedy request (k + 3 tokens), then the same request
with a one-token and with a multi-token stop string cut from the baseline's own answer so that each first
completes inside the first draft block. Every answer is held to the serving rules and compared with the
baseline's answer to the same request (equivalence/test_boundaries.py judge_sweep: what both routes break
alike is an engine note, not a finding).
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.depth import draft_depth
from spec_route_suite.equivalence.stop_strings import plain_request, stop_cases
from spec_route_suite.equivalence.sweep_judge import judge_sweep

pytestmark = pytest.mark.check("boundary")


def test_stop_strings_on_every_prompt(prompt, baseline, candidate, tokenizer, fitted_prompts, eos_token_id, findings):
    depth = draft_depth(candidate.inventory(), candidate.spec)
    plain = plain_request(fitted_prompts.ids(prompt, max_tokens=depth.k + 3), depth=depth.k,
                          request_id=f"stops-{prompt.id}")
    strings = baseline.capabilities.stop_strings and candidate.capabilities.stop_strings
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    cases, how = stop_cases(plain, baseline.generate(plain), depth=depth.k, decode=tokenizer.decode,
                            eos_token_id=eos_token_id, special=special, with_strings=strings)
    judge_sweep("stop_strings", prompt, cases, how, depth, baseline=baseline, candidate=candidate, tokenizer=tokenizer,
                findings=findings, counts={"stop-string requests": sum(bool(c.request.stop) for c in cases)})
