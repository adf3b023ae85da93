"""Cache reuse across turns: the correct engine reuses turn 1 as its AR twin does, the fault is warned about.

Route level: equivalence/test_turn_reuse.py against the reference engine with its prompt cache (`prefix_cache=on`)
beside its own AR twin with the same cache (`drafter=none&prefix_cache=on`), at the suite's budget (CONVERSATIONS
two-turn conversations): the correct engine computes no more of turn 2 than the AR twin (verified, no warning);
`cache_keeps_drafts_past_end` (llama.cpp#28049's class) computes the previous answer again and is warned about,
naming the conversation. An engine without a prefix cache reads "not applicable", a baseline without one "not
verified". Unit level: the verdict on recorded counters (a block cache's granularity within the tolerance).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import spec_route_suite.equivalence.test_turn_reuse as suite
from spec_route_suite.equivalence.turn_reuse import (CONVERSATIONS, TOLERANCE, TURN_ONE_TOKENS, Conversation,
                                                     ReuseVerdict, first_turn, second_turn)
from spec_route_suite.reports.gaps import remedy
from spec_route_suite.routes.base import Completion
from tests.test_greedy_routes import (ReferenceHandles, Rewired, Sink, baseline_handle, fitted_prompts, handle,
                                      reference_route, suite_config, tokenizer)


def run(candidate, baseline):
    sink = Sink()
    try:
        suite.test_turn_two_reuses_turn_one_as_the_baseline_does(
            candidate=candidate, baseline=baseline, tokenizer=tokenizer(), fitted_prompts=fitted_prompts(),
            suite_config=suite_config(), findings=sink)
    except pytest.skip.Exception as skipped:
        return "skipped", str(skipped), sink
    return "passed", "", sink


def coverage(sink):
    (record,) = [data for name, data in sink.measurements if name == "coverage"]
    return record


@pytest.fixture(scope="module")
def cached():
    handles = ReferenceHandles(prefix_cache="on")
    yield handles
    handles.close()


@pytest.fixture(scope="module")
def ar_twin():
    twin = handle(reference_route("baseline", drafter="none", prefix_cache="on"), "baseline")
    yield twin
    twin.route.batcher.close()


def test_the_correct_engine_reuses_turn_one_as_its_ar_twin_does(cached, ar_twin):
    outcome, why, sink = run(cached(), ar_twin)
    record = coverage(sink)
    assert outcome == "passed" and record["verified"] and not sink.items, (why, record, sink.items)
    assert record["ran"]["conversations compared"] == CONVERSATIONS
    (measured,) = [data for name, data in sink.measurements if name == "turn_reuse"]
    for conversation in measured["conversations"]:
        assert conversation["baseline_cached"] > 0 and conversation["excess"] <= 0, conversation


def test_drafts_kept_past_the_end_in_the_cache_are_warned_about(cached, ar_twin):
    """At the same budget: turn 2 computes the previous answer again (about TURN_ONE_TOKENS more prompt tokens than
    the AR twin), answers unchanged, a warning naming the conversation."""
    outcome, _, sink = run(cached("cache_keeps_drafts_past_end"), ar_twin)
    (warning,) = sink.items
    assert outcome == "passed" and warning.severity == "warning" and warning.check == "turn-reuse", warning
    assert "turn-reuse-" in warning.title and warning.details["excess"] >= TURN_ONE_TOKENS - 4, warning.title
    assert coverage(sink)["verified"]


def test_an_engine_without_a_prefix_cache_is_not_applicable_and_a_baseline_without_one_not_verified(cached):
    engines = ReferenceHandles()
    try:
        outcome, _, sink = run(engines(), baseline_handle())
        assert outcome == "passed" and coverage(sink)["applicable"] is False and not sink.items
        outcome, why, sink = run(cached(), baseline_handle())   # the hf baseline states no prefix cache
    finally:
        engines.close()
    assert outcome == "skipped" and "has no prefix cache" in why and not coverage(sink)["verified"], why


def test_a_candidate_that_states_no_cached_tokens_is_not_verified(cached, ar_twin):
    silent = handle(Rewired(cached().route, completion=lambda req, c: replace(c, cached_tokens=None)), "candidate")
    outcome, _, sink = run(silent, ar_twin)
    record = coverage(sink)
    assert outcome == "passed" and not record["verified"] and "states no cached prompt tokens" in record["reason"]
    assert "cached prompt tokens" in remedy("not verified", record["reason"]).why   # its cause in the gaps table


def conversation(*, cached: int | None, prompt_tokens: int | None = None, answer: int = 48) -> Conversation:
    first = first_turn(tuple(range(1, 41)), 0)
    said = Completion(token_ids=tuple(range(answer)), text="", finish_reason="length", route="r")
    second = second_turn(first, said, (7, 8, 9))
    return Conversation(first, said, second, Completion(token_ids=(1,), text="", finish_reason="length", route="r",
                                                        cached_tokens=cached, prompt_tokens=prompt_tokens))


def test_the_verdict_on_recorded_counters():
    prompt = 40 + 48 + 3
    ar = conversation(cached=prompt - 4)
    def judged(*ours, theirs=ar):
        return ReuseVerdict("c", "b", ours, (theirs,) * len(ours))
    assert not judged(conversation(cached=prompt - 4)).finding()
    assert judged(conversation(cached=80)).coverage()["verified"]
    blocks = judged(conversation(cached=80), theirs=conversation(cached=prompt - 3))   # whole 16-token blocks only
    assert blocks.finding() is None and 0 < blocks.excess(*blocks.ours, *blocks.theirs) <= TOLERANCE
    rerun = judged(conversation(cached=40), conversation(cached=prompt - 4)).finding()   # llama.cpp#28049's symptom
    assert rerun is not None and "1 of 2 conversations" in rerun.title and rerun.details["excess"] == prompt - 40 - 4
    assert "states no cached" in judged(conversation(cached=None)).reason()
    assert "took no cached" in judged(conversation(cached=40), theirs=conversation(cached=0)).reason()
    assert conversation(cached=50, prompt_tokens=120).computed == 70   # the server's own prompt count wins
