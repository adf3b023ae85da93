"""The speed gate's acceptance-collapse warning (stressors/acceptance_collapse.py), from answers as the load driver
returns them: the same 8 greedy prompts at 1 and at 8 in flight, each answer stating its own drafting.

Proven both ways at the same budget (8 prompts, one answer each per level): a drafter that accepts the same alone
and in company (or wobbles on a near-tie here and there) passes; one that loses a third of its acceptance on every
prompt in company (llama.cpp's draft-eagle3 with backend sampling, docs/llama-cpp-findings.md F4) is a warning
naming the level, both lengths and the paired test; so is one whose collapse leaves two prompts unchanged (as
measured on llama.cpp's EAGLE-3 at 8 in flight: a sign test missed it).
"""
from __future__ import annotations

from spec_route_suite.routes.base import Completion
from spec_route_suite.stressors.acceptance_collapse import COLLAPSE_DROP, collapse_findings, collapses
from spec_route_suite.stressors.driver import LoadRun, Outcome
from spec_route_suite.stressors.speed import summarize

ALPHA = 0.01
STEPS = 10


def _answer(key: str, accepted: int) -> Outcome:
    completion = Completion(token_ids=tuple(range(32)), text="x" * 32, finish_reason="length", route="r",
                            latency_s=0.3, event_times=(0.1, 0.2), draft_tokens=7 * STEPS, accepted_tokens=accepted,
                            draft_steps=STEPS)
    return Outcome(key=key, request_id=key, completion=completion, error_kind=None, error=None, started_s=0.0,
                   ended_s=0.3, in_flight_at_start=0)


def _row(level: int, accepted: list[int]) -> dict:
    run = LoadRun(outcomes=tuple(_answer(f"p{i}", a) for i, a in enumerate(accepted)), concurrency=level,
                  max_in_flight=level, wall_s=0.3, started_at=0.0)
    return summarize(run)


ALONE = [30, 28, 35, 22, 40, 31, 26, 33]   # 3.0-5.0 tokens a step


def test_the_same_acceptance_in_company_is_no_warning():
    assert collapse_findings([_row(1, ALONE), _row(8, ALONE)], route="c", alpha=ALPHA) == []


def test_near_tie_wobbles_are_no_warning():
    """Two prompts lose a lot (a drafter's near-tie flips its block), the rest hold or gain a little."""
    wobbly = [a - 15 if i < 2 else a + (i % 2) for i, a in enumerate(ALONE)]
    assert collapses([_row(1, ALONE), _row(8, wobbly)], alpha=ALPHA) == []


def test_a_small_drop_on_every_prompt_is_no_warning():
    """Every prompt a little lower (one accepted token of ~30) is below COLLAPSE_DROP: not a collapse."""
    assert collapses([_row(1, ALONE), _row(8, [a - 1 for a in ALONE])], alpha=ALPHA) == []


def test_a_collapse_on_every_prompt_is_a_warning_naming_the_level():
    planted = [round(a * 0.4) for a in ALONE]     # F4's shape: 4.70 alone, 2.0 at 8 in flight
    found = collapse_findings([_row(1, ALONE), _row(8, planted)], route="eagle3", alpha=ALPHA)
    assert len(found) == 1 and found[0].severity == "warning" and found[0].route == "eagle3"
    level = found[0].details["levels"][0]
    assert level["level"] == 8 and level["lower"] == 8 and level["prompts"] == 8 and level["p_value"] < ALPHA
    assert level["loaded"] <= (1 - COLLAPSE_DROP) * level["alone"]
    assert "at 8 in flight against" in found[0].title


def test_a_collapse_that_spares_two_prompts_is_still_a_warning():
    """llama.cpp's EAGLE-3 at 8 in flight, second run: 6 of 8 prompts lost 0.7-1.9 tokens a step, 2 drafted alike."""
    spared = [a if i in (5, 7) else round(a * 0.45) for i, a in enumerate(ALONE)]
    (found,) = collapses([_row(1, ALONE), _row(8, spared)], alpha=ALPHA)
    assert found.lower == 6 and found.p_value < ALPHA


def test_answers_that_state_no_drafting_are_not_judged():
    """vLLM states no per-answer drafting: the rows carry no per-prompt acceptance and nothing is claimed."""
    plain = summarize(LoadRun(outcomes=(Outcome(key="p0", request_id="p0", completion=Completion(
        token_ids=(1, 2), text="ab", finish_reason="length", route="r", latency_s=0.1), error_kind=None, error=None,
        started_s=0.0, ended_s=0.1, in_flight_at_start=0),), concurrency=1, max_in_flight=1, wall_s=0.1,
        started_at=0.0))
    assert plain["acceptance_by_prompt"] == {}
    assert collapses([plain, {**plain, "concurrency": 8}], alpha=ALPHA) == []
