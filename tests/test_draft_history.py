"""Drafting that depends on earlier requests: the correct engine drafts alike, a drafter carrying state is warned about.

Route level: equivalence/test_draft_history.py against the reference engine at the suite's budget (PROMPTS prompts,
the engine's slots capped at 8 other requests between a prompt's two answers): the correct engine (a draft model,
no cross-request state) drafts every prompt alike and passes verified; `drafter_state_carried` (the draft model's
cache reused by length across requests, llama.cpp#27852's class) gets a warning naming both requests, its answers
unchanged; an n-gram drafter is measured, not judged; answers that state no drafting are "not verified". Unit level:
the drafter kind read from what routes state, the order requests are sent in, the verdict on synthetic answers.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import spec_route_suite.equivalence.test_draft_history as suite
from spec_route_suite.equivalence.draft_history import (MAX_TOKENS, PROMPTS, DrafterKind, HistoryPlan,
                                                        HistoryVerdict, PromptPair, drafter_kind, findings_of,
                                                        history_size)
from spec_route_suite.reports.gaps import remedy
from spec_route_suite.routes.base import Completion, Request, RouteInventory
from spec_route_suite.routes.spec import RouteSpec
from tests.test_greedy_routes import (ReferenceHandles, Rewired, Sink, baseline_handle, fitted_prompts, handle,
                                      suite_config, tokenizer)


class NoJudge:
    """The near-tie policy, where no answer may differ: judging one fails the test."""

    def judge(self, **_):
        raise AssertionError("the same greedy request was answered differently")


def run(candidate):
    sink = Sink()
    try:
        suite.test_drafting_does_not_depend_on_earlier_requests(
            candidate=candidate, baseline=baseline_handle(), tokenizer=tokenizer(), fitted_prompts=fitted_prompts(),
            suite_config=suite_config(), near_tie_policy=NoJudge(), findings=sink)
    except pytest.skip.Exception as skipped:
        return "skipped", str(skipped), sink
    return "passed", "", sink


def measured(sink, kind):
    return [data for name, data in sink.measurements if name == kind]


@pytest.fixture(scope="module")
def engines():
    handles = ReferenceHandles()
    yield handles
    handles.close()


def test_the_correct_engine_drafts_every_prompt_alike_and_is_verified(engines):
    outcome, why, sink = run(engines())
    (record,) = measured(sink, "coverage")
    assert outcome == "passed" and record["verified"] and not sink.items, (why, record, sink.items)
    assert record["ran"] == {"prompts compared": PROMPTS, "requests": 2 * PROMPTS + 8}, record   # 32 slots: 8 others
    (history,) = measured(sink, "draft_history")
    assert history["acceptance_first"] == history["acceptance_after"] > 0.5, history


def test_a_drafter_that_carries_state_across_requests_is_warned_about(engines):
    """At the same budget: drafts worse after other requests, answers unchanged, a warning naming both requests."""
    outcome, _, sink = run(engines("drafter_state_carried"))
    (warning,) = sink.items
    assert outcome == "passed" and warning.severity == "warning" and warning.check == "draft-history", warning
    assert "draft-history-first-" in warning.title and "draft-history-again-" in warning.title, warning.title
    (history,) = measured(sink, "draft_history")
    assert all(p["same_answer"] for p in history["prompts"]), history
    assert history["acceptance_after"] < history["acceptance_first"] - 0.1, history
    assert measured(sink, "coverage")[0]["verified"]   # the check could see it, and did


def test_an_ngram_drafter_is_measured_not_judged():
    ngram = ReferenceHandles(drafter="ngram")
    try:
        outcome, _, sink = run(ngram())
    finally:
        ngram.close()
    (record,) = measured(sink, "coverage")
    assert outcome == "passed" and not sink.items and not record["verified"], (record, sink.items)
    assert "may keep n-gram state" in record["reason"] and "measured" in record["reason"], record
    assert measured(sink, "draft_history")[0]["keeps_state"] is True


def test_answers_that_state_no_drafting_are_not_verified(engines):
    silent = handle(Rewired(engines().route, completion=lambda req, c: replace(c, draft_tokens=None)), "candidate")
    outcome, _, sink = run(silent)
    (record,) = measured(sink, "coverage")
    assert outcome == "passed" and not record["verified"] and "states no drafting per answer" in record["reason"]
    assert "do not state their drafting" in remedy("not verified", record["reason"]).why


def test_drafter_kind_from_what_routes_state_or_declare():
    def kind(declared=None, **speculation):
        spec = RouteSpec(name="c", kind="openai", options=(("method", declared),) if declared else ())
        return drafter_kind(RouteInventory(engine="x", speculation=speculation), spec).keeps_state
    assert kind(method="draft_model") is False and kind(method="eagle3") is False and kind(method="mtp") is False
    assert kind(types="draft-simple") is False and kind(speculative_algorithm="EAGLE3") is False
    assert kind(method="ngram") is True and kind(method="suffix") is True and kind(types="ngram-map-k") is True
    assert kind(types="draft-mtp,ngram-mod") is True   # a chain holding an n-gram drafter may keep state
    assert kind(declared="dflash") is False and kind() is None
    assert [history_size(s) for s in (None, 1, 4, 32)] == [3, 3, 4, 8]


def test_each_prompt_is_sent_again_after_other_requests_than_the_first_time():
    records = [SimpleNamespace(id=f"p{n}") for n in range(PROMPTS + 4)]
    plan = HistoryPlan.of(records, lambda r: (int(r.id[1:]) + 1,), history=4)
    order = plan.order()
    assert len(order) == 2 * PROMPTS + 4 and len({r.request_id for r in order}) == len(order)
    for prompt in plan.prompts:
        first = order.index(prompt)
        again = next(n for n, r in enumerate(order) if r.request_id == plan.again(prompt).request_id)
        assert order[again].prompt_ids == prompt.prompt_ids and again - first > 4
        assert first == 0 or order[first - 1].prompt_ids != order[again - 1].prompt_ids


def answer(tokens=(1, 2, 3), drafted=8, accepted=6, steps=2):
    return Completion(token_ids=tokens, text=str(tokens), finish_reason="length", route="c", draft_tokens=drafted,
                      accepted_tokens=accepted, draft_steps=steps)


def verdict(*pairs, keeps_state=False):
    return HistoryVerdict("c", DrafterKind(keeps_state, "draft_model"),
                          tuple(PromptPair((1,), f"first-{n}", f"again-{n}", a, b) for n, (a, b) in enumerate(pairs)),
                          requests=2 * len(pairs) + 3)


def test_the_verdict_on_synthetic_answers():
    alike = verdict((answer(), answer()), (answer(drafted=0, accepted=0), answer(drafted=0, accepted=0)))
    assert alike.coverage()["verified"] and not alike.warning() and alike.coverage()["ran"]["prompts compared"] == 1
    worse = verdict((answer(), answer(accepted=1)), (answer(drafted=20, accepted=12), answer(drafted=20, accepted=11)))
    assert "1 of 2 greedy prompts" in worse.warning() and "again-0" in worse.warning()   # 12 -> 11 of 20: within
    assert not verdict((answer(), answer(accepted=1)), keeps_state=True).warning()
    assert not verdict((answer(accepted=1), answer(accepted=8))).warning(), "drafting better after: not the class"
    # the committed llama.cpp runs' noise: one prompt of three down by more than 0.1, another up, pooled within
    noise = verdict((answer(drafted=20, accepted=9), answer(drafted=20, accepted=6)),
                    (answer(drafted=20, accepted=5), answer(drafted=20, accepted=8)), (answer(), answer()))
    assert noise.pooled_drop == 0.0 and not noise.warning()
    assert "measured" in verdict((answer(), answer(accepted=1)), keeps_state=None).reason()
    assert "no prompt was drafted" in verdict((answer(drafted=0, accepted=0),) * 2).reason()


def test_an_answer_that_changes_after_other_requests_is_judged_by_the_near_tie_policy():
    changed = verdict((answer(), answer(tokens=(1, 2, 4), accepted=1)))
    assert not changed.warning()   # drafting of different answers is not compared
    plan = HistoryPlan(prompts=(Request(prompt_ids=(1,), max_tokens=MAX_TOKENS, request_id="first-0"),), history=())
    (finding,) = findings_of(changed, plan, lambda pair: ("bug", f"{pair.first_id} vs {pair.again_id}"))
    assert finding.severity == "bug" and "first-0 vs again-0" in finding.title
