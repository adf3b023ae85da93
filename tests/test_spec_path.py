"""Speculation per request family: the correct engine speculates for every family; spec-off faults are caught.

Route level: equivalence/test_spec_path.py against the reference engine (its answers state their own drafted
tokens, as llama.cpp's timings do), correct and with `spec_off_for_logprobs` or `spec_first_chat_only` (chat
speculates on its first request only, llama.cpp#19231), all at the run's alpha and the suite's REQUESTS per
family; a route whose answers state nothing is "not verified", never a pass, and one whose plain answers speculate
only sometimes is not charged for a family that does the same. The parity rows of a family found off are recorded
not verified.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from types import SimpleNamespace

import pytest

import spec_route_suite.equivalence.test_spec_path as spec_suite
from spec_route_suite.equivalence.spec_path import (BY_NAME, DETECT_RATIO, FAMILIES, REQUESTS, DropVerdict, Share,
                                                    drop_power, drop_pvalue, off_finding, parity_unverified, unjudged,
                                                    unseen)
from spec_route_suite.routes.base import Completion, Request
from tests.test_greedy_routes import (ReferenceHandles, Rewired, Sink, baseline_handle, fitted_prompts, handle,
                                      tokenizer)

CONFIG = SimpleNamespace(categories=("math", "code", "chat", "json", "long"), prompt_sources=(), seed=0,
                         prompt_limit=None, alpha=0.01)


def run_family(family, candidate):
    sink = Sink()
    try:
        spec_suite.test_speculation_runs_for_every_request_family(
            family_name=family, candidate=candidate, baseline=baseline_handle(), tokenizer=tokenizer(),
            fitted_prompts=fitted_prompts(),
            suite_config=CONFIG, findings=sink)
    except pytest.fail.Exception as failure:
        return "failed", str(failure), sink
    except pytest.skip.Exception as skipped:
        return "skipped", str(skipped), sink
    return "passed", "", sink


@pytest.fixture(scope="module")
def engines():
    handles = ReferenceHandles()
    yield handles
    handles.close()


def test_correct_engine_speculates_for_every_family(engines):
    for family in FAMILIES:
        outcome, why, sink = run_family(family.name, engines())
        assert outcome == "passed", (family.name, why)
        (record,) = [d for name, d in sink.measurements if name == "coverage"]
        assert record["check"] == "spec-path" and record["ran"]["answers that speculated"] == REQUESTS, record
        assert record["verified"], record["reason"]   # REQUESTS answers a side see the claimed drop


def test_speculation_off_for_logprobs_is_caught_and_voids_the_logprobs_parity_row(engines):
    outcome, why, sink = run_family("logprobs", engines("spec_off_for_logprobs"))
    assert outcome == "failed" and "speculation silently off for logprobs" in why, why
    (finding,) = sink.items
    assert finding.check == "spec-path" and finding.severity == "bug"
    voided = [d for name, d in sink.measurements if name == "coverage" and d["check"] == "logprobs"]
    assert voided and not voided[0]["verified"] and "speculative path" in voided[0]["part"]
    assert run_family("penalties", engines("spec_off_for_logprobs"))[0] == "passed"   # only logprobs is off


def test_a_route_that_states_no_drafting_per_answer_is_not_verified(engines):
    silent = handle(Rewired(engines().route, completion=lambda req, c: replace(c, draft_tokens=None)), "candidate")
    outcome, why, _ = run_family("logprobs", silent)
    assert outcome == "skipped" and "states no drafting per answer" in why, why


def test_speculation_on_the_first_chat_request_only_is_caught(engines):
    """llama.cpp#19231: the first chat request drafts, the later ones do not. Two chat requests (the old budget) saw
    1 of 2 speculate and passed; REQUESTS of them against as many plain ones fail at the run's alpha."""
    faulty = engines("spec_first_chat_only")
    outcome, why, sink = run_family("chat", faulty)
    assert outcome == "failed" and "speculation silently off for chat" in why, why
    (finding,) = sink.items
    assert finding.details["draft_tokens"][1:] == [0] * (REQUESTS - 1) and finding.details["p_value"] < 0.01
    (share,) = [d for name, d in sink.measurements if name == "speculation_share"]
    assert share["speculated"] <= 1 and share["plain_speculated"] == REQUESTS, share
    voided = [d for name, d in sink.measurements if name == "coverage" and d["check"] == "chat"]
    assert voided and not voided[0]["verified"] and "speculative path" in voided[0]["part"]
    assert run_family("logprobs", faulty)[0] == "passed"   # completions keep speculating


def _sometimes_drafted(req) -> bool:
    """An n-gram drafter finds a match for some answers only: about 60% of requests, drawn apart for each request
    (its id and its features), whatever its family."""
    key = repr((req.request_id, req.logprobs, req.repetition_penalty, req.response_format))
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 5 < 3


def test_a_route_whose_answers_speculate_only_sometimes_is_not_charged(engines):
    """Plain and family answers drafted alike at 60%: no family is charged; the rows say what share they could see."""
    sometimes = handle(Rewired(engines().route, completion=lambda req, c: c if _sometimes_drafted(req)
                               else replace(c, draft_tokens=0)), "candidate")
    for family in ("logprobs", "penalties", "json"):
        outcome, why, sink = run_family(family, sometimes)
        assert outcome == "passed", (family, why)
        (record,) = [d for name, d in sink.measurements if name == "coverage"]
        (share,) = [d for name, d in sink.measurements if name == "speculation_share"]
        assert 0 < share["plain_speculated"] < REQUESTS and 0 < share["speculated"] < REQUESTS, share
        assert "share of speculating answers" in record["could_detect"], record


def test_a_family_drafted_for_on_one_answer_in_five_is_caught(engines):
    """A partial drop, not only 'never': logprobs answers drafted for one time in five."""
    partial = handle(Rewired(engines().route, completion=lambda req, c: c if req.logprobs is None
                             or sum(map(ord, req.request_id)) % 5 == 0 else replace(c, draft_tokens=0)), "candidate")
    outcome, why, _ = run_family("logprobs", partial)
    assert outcome == "failed" and "speculation silently off for logprobs" in why, why


def test_share_arithmetic_and_power():
    def answer(drafted):
        return Completion(token_ids=(1,), text="", finish_reason="length", route="r", draft_tokens=drafted)
    off, on = Share.of([answer(0), answer(0)]), Share.of([answer(8), answer(0)])
    assert (off.stated, off.speculated, on.speculated) == (2, 0, 1)
    assert drop_pvalue(Share.of([answer(None)]), on) is None
    first_only, plain = Share(REQUESTS, REQUESTS, 1), Share(REQUESTS, REQUESTS, REQUESTS)
    assert DropVerdict.of(first_only, plain, alpha=0.01).off and not DropVerdict.of(plain, plain, alpha=0.01).off
    assert not DropVerdict.of(Share(2, 2, 1), Share(2, 2, 2), alpha=0.01).off   # two answers a side cannot tell
    verdict = DropVerdict.of(plain, plain, alpha=0.01)
    assert verdict.powered and verdict.detectable >= DETECT_RATIO
    assert drop_power(family_rate=DETECT_RATIO, plain_rate=1.0, family_n=REQUESTS, plain_n=REQUESTS,
                      alpha=0.01) >= 0.9
    weak = DropVerdict.of(Share(REQUESTS, REQUESTS, 6), Share(REQUESTS, REQUESTS, 6), alpha=0.01)
    assert not weak.powered and "claims" in weak.shortfall("logprobs")


# ---- the judgement, from values ----------------------------------------------------------------------

def _route(name: str, *, capabilities=(), extra=None) -> SimpleNamespace:
    """A handle as the judges see one: its name, capabilities, inventory and how it puts a request on the wire."""
    return SimpleNamespace(name=name, capabilities=SimpleNamespace(has=lambda c: c in capabilities),
                           inventory=lambda: SimpleNamespace(extra=extra),
                           repro_wire=lambda req: {"request_id": req.request_id})


def test_a_family_the_route_cannot_send_or_show_is_unseen_and_one_without_drafting_unjudged():
    logprobs = BY_NAME["logprobs"]
    assert "lacks logprobs" in unseen(logprobs, _route("c"))
    assert "server-wide" in unseen(logprobs, _route("c", capabilities=("logprobs",),
                                                    extra={"per_response_evidence": False}))
    assert unseen(logprobs, _route("c", capabilities=("logprobs",))) == ""
    stated, silent = Share(REQUESTS, REQUESTS, REQUESTS), Share(REQUESTS, 0, 0)
    assert "states no drafting per answer" in unjudged(logprobs, "c", silent, stated)
    assert "did not speculate on 'c' either" in unjudged(logprobs, "c", stated, Share(REQUESTS, REQUESTS, 0))
    assert unjudged(logprobs, "c", stated, stated) == ""


def test_a_family_found_off_voids_its_parity_rows_and_is_one_bug_with_its_requests():
    family, plain = BY_NAME["penalties"], Share(REQUESTS, REQUESTS, REQUESTS)
    drop = DropVerdict.of(Share(REQUESTS, REQUESTS, 1), plain, alpha=0.01)
    row = drop.coverage("penalties")
    assert row["ran"] == {"family answers": REQUESTS, "answers that speculated": 1, "plain answers": REQUESTS,
                          "plain answers that speculated": REQUESTS} and row["verified"] and row["reason"] == ""
    ((check, voided),) = parity_unverified(family, drop, route="c")
    assert check == "features" and voided["part"] == "penalties on the speculative path" and not voided["verified"]
    assert "speculation is silently off for penalties requests on 'c' (1 of 10 answers speculated" in voided["reason"]
    plain_reqs = [Request(prompt_ids=(1,), max_tokens=4, request_id=f"spec-plain-{n}") for n in range(2)]
    family_reqs = [family.make(r) for r in plain_reqs]
    answers = [Completion(token_ids=(1,), text="", finish_reason="length", route="c", draft_tokens=0)] * 2
    finding = off_finding(family, drop, plain_reqs, family_reqs, answers, candidate=_route("c"),
                          baseline=_route("b"))
    assert (finding.check, finding.severity, finding.route) == ("spec-path", "bug", "c")
    assert finding.title.startswith("speculation silently off for penalties requests: 1 of 10 answers speculated, "
                                    "while plain requests did (10 of 10 answers speculated; Fisher p=")
    assert finding.details["requests"] == ["spec-plain-0", "spec-plain-1"] and finding.details["alpha"] == 0.01
    assert finding.details["parity_rows_not_verified"] == ["features: penalties on the speculative path"]
