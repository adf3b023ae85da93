"""Cache reuse across turns (check family "turn-reuse"): equivalence/turn_reuse.py says why.

Per candidate, CONVERSATIONS two-turn conversations (turn 2 = turn 1's prompt + its answer + a new user line) on the
candidate, then the same on the baseline; turn 2's prompt tokens computed (not taken from the cache) must not exceed
the baseline's by more than TOLERANCE (a warning otherwise, naming the conversation). An engine without a prefix
cache is "not applicable"; a route or baseline that states no cached tokens "not verified".
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.equivalence.turn_reuse import (CHECK, CONVERSATIONS, COULD_DETECT, FOLLOW_UP, TURN_ONE_TOKENS,
                                                     TURN_TWO_TOKENS, ReuseVerdict, converse, not_applicable)
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.reports.repro_spec import turn_reuse_repro

pytestmark = pytest.mark.check("turn-reuse")


def test_turn_two_reuses_turn_one_as_the_baseline_does(candidate, baseline, tokenizer, fitted_prompts, suite_config,
                                                        findings):
    why = not_applicable(candidate.inventory())
    if why:
        findings.cover(CHECK, candidate.name, verified=False, applicable=False, could_detect=COULD_DETECT, reason=why)
        return
    if not_applicable(baseline.inventory()):
        why = f"the baseline '{baseline.name}' has no prefix cache, so there is no AR reuse to compare turn 2 with"
        findings.cover(CHECK, candidate.name, verified=False, could_detect=COULD_DETECT, reason=why)
        pytest.skip(f"not verified: {why}")
    follow_up = tuple(tokenizer.encode(FOLLOW_UP, add_special_tokens=False))
    room = TURN_ONE_TOKENS + len(follow_up) + TURN_TWO_TOKENS   # turn 2 carries turn 1, its answer and the new line
    prompts = [fitted_prompts.ids(r, max_tokens=room) for r in pick_lean(prompt_pool(suite_config), CONVERSATIONS)]
    verdict = ReuseVerdict(candidate.name, baseline.name, tuple(converse(candidate, prompts, follow_up)),
                           tuple(converse(baseline, prompts, follow_up)))
    findings.measure("turn_reuse", **verdict.measurement())
    findings.cover(CHECK, candidate.name, **verdict.coverage())
    turns = [(o.first, o.second, t.first, t.second) for o, t, _ in verdict.over]
    warning = verdict.finding(repro=turn_reuse_repro(turns, tolerance=verdict.tolerance, candidate=candidate,
                                                     baseline=baseline))
    if warning is not None:
        findings.add(warning)
