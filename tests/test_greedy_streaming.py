"""The streaming check: a stream that loses a token or miscounts usage fails; a correct one passes.

Calls equivalence/test_streaming.py's test with the reference engine (which streams),
wrapped so that only its streamed answers are damaged, with a route that cannot stream,
and with a nondeterministic ("noisy hardware") engine whose stream/non-stream splits are
near-ties: excused under classify, failed under strict. Unit level: the pure parts of equivalence/streaming.py
(stream_problems, stop_inside, id_gap, stream_evidence, coverage_reason).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import spec_route_suite.equivalence.test_streaming as streaming_suite
from spec_route_suite.equivalence.streaming import (coverage_reason, id_gap, stop_inside, stream_evidence,
                                                   stream_problems)
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.tokenizers import encode_prompt
from tests.test_greedy_routes import (FixedCalibration, Rewired, Sink, baseline_handle, fitted_prompts, handle,
                                      hf_route, prompts, reference_route, suite_config, tokenizer)


FLOOR = calib.Calibration(route="baseline", tau=calib.TAU_FLOOR, logprob_tol=calib.TOL_FLOOR, noise=1e-5)


def run_stream(prompt, candidate, with_stop=False, *, baseline=None, calibration=None, policy="strict", sink=None):
    """(failure text or None, findings); pass `sink` to read the coverage it recorded too."""
    sink = Sink() if sink is None else sink
    try:
        streaming_suite.test_stream_matches_non_stream(
            lean_prompt=prompt, baseline=baseline or baseline_handle(), candidate=candidate, tokenizer=tokenizer(),
            fitted_prompts=fitted_prompts(),
            suite_config=suite_config(greedy_policy=policy), calibration=calibration or FixedCalibration(FLOOR),
            eos_token_id=tokenizer().eos_token_id, with_stop=with_stop, findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink.items
    return None, sink.items


def when_streamed(damage):
    return lambda req, c: damage(c) if req.stream else c


@pytest.fixture(scope="module")
def engine():
    route = reference_route("candidate")
    yield route
    route.batcher.close()


@pytest.mark.parametrize("with_stop", [False, True])
def test_correct_stream_passes(engine, with_stop):
    for prompt in prompts(("math", "chat"), 1):
        failure, found = run_stream(prompt, handle(engine, "candidate"), with_stop)
        assert failure is None and found == [], f"{prompt.id}: {failure}"


@pytest.mark.parametrize("damage, expect", [
    (lambda c: replace(c, token_ids=c.token_ids[:-1]), "token ids differ"),
    (lambda c: replace(c, usage_completion_tokens=(c.usage_completion_tokens or 0) + 1), "usage.completion_tokens"),
    (lambda c: replace(c, finish_reason="length" if c.finish_reason == "stop" else "stop"), "finish_reason differs"),
], ids=["lost-token", "usage", "finish"])
def test_damaged_stream_fails_naming_both_deliveries(engine, damage, expect):
    candidate = handle(Rewired(engine, completion=when_streamed(damage)), "candidate")
    failure, (finding,) = run_stream(prompts(("chat",), 1)[0], candidate)
    assert expect in failure and "stream" in failure and "non-stream" in failure
    assert finding.check == "streaming" and finding.severity == "bug" and expect in finding.details["diff"]


def test_route_without_streaming_is_not_verified():
    inner = hf_route("candidate", True)
    route = Rewired(inner, capabilities=replace(inner.capabilities, stream=False))
    with pytest.raises(pytest.skip.Exception, match="not verified.*stream"):
        run_stream(prompts(("math",), 1)[0], handle(route, "candidate"))


def test_transformers_assisted_generation_streams_what_it_returns():
    """The in-process route streams through transformers' own streamer hook: one event per verify step."""
    candidate = handle(hf_route("candidate", True), "candidate")
    for prompt in prompts(("math", "code"), 1):
        failure, found = run_stream(prompt, candidate)
        assert failure is None and not found, (failure, found)


@pytest.fixture(scope="module")
def noisy_pair():
    baseline = handle(reference_route("baseline", fault="logit_noise", noise=0.3, seed=1), "baseline")
    candidate = handle(reference_route("candidate", fault="logit_noise", noise=0.3, seed=2), "candidate")
    records = prompts(("math", "chat", "json"), 1)
    measured = calib.calibrate(baseline, [encode_prompt(tokenizer(), p.text) for p in records], max_tokens=32)
    yield baseline, candidate, FixedCalibration(measured, records)
    for h in (baseline, candidate):
        h.route.batcher.close()


@pytest.mark.parametrize("policy", ["classify", "strict"])
def test_nondeterministic_split_is_a_near_tie_not_a_stream_bug(noisy_pair, policy):
    baseline, candidate, calibration = noisy_pair
    for prompt in prompts(("math", "chat", "json", "long"), 4):
        failure, found = run_stream(prompt, candidate, baseline=baseline, calibration=calibration, policy=policy)
        if found:
            break
    else:
        pytest.fail("the noisy engine never split stream from non-stream on 16 prompts: nothing was proven")
    (finding,) = found
    assert finding.details["classification"]["verdict"] == "near-tie"
    if policy == "classify":
        assert failure is None and finding.severity == "near-tie"
    else:
        assert failure and "near-tie" in failure and finding.severity == "bug"


def test_stream_problems_checks_usage_on_both_sides():
    good = Completion(token_ids=(5, 6), text="ab", finish_reason="stop", route="r", usage_completion_tokens=2)
    assert stream_problems(plain=good, streamed=good) == []
    no_usage = replace(good, usage_completion_tokens=None)
    assert stream_problems(plain=no_usage, streamed=good) == ["non-stream reports no usage.completion_tokens"]
    odd = replace(good, finish_reason="eos")
    assert any("not one of" in p for p in stream_problems(plain=odd, streamed=odd))


def test_stop_inside_picks_a_printable_piece_from_the_answers_middle():
    pieces = {1: "a", 2: " b", 3: " \n", 4: " cd", 5: " ef"}
    decode = type("Decode", (), {"decode": staticmethod(lambda ids: "".join(pieces[i] for i in ids))})
    answer = Completion(token_ids=(1, 2, 3, 4, 5, 1), text="", finish_reason="length", route="r")
    assert stop_inside(answer, decode) == "cd"   # from a third in: " \n" is too short once stripped
    assert stop_inside(replace(answer, token_ids=(1, 2, 3)), decode) is None


def test_id_gap_names_incomplete_or_missing_stream_ids_only():
    plain = Completion(token_ids=(5, 6), text="ab", finish_reason="stop", route="r")
    assert id_gap(plain=plain, streamed=plain) == ""
    assert id_gap(plain=plain, streamed=replace(plain, id_gap="2 of 3 entries")) == "2 of 3 entries"
    assert "text-level" in id_gap(plain=plain, streamed=replace(plain, text_level=True))
    assert id_gap(plain=replace(plain, text_level=True), streamed=replace(plain, text_level=True)) == ""


def test_stream_evidence_counts_tokens_where_ids_compare_else_characters():
    plain = Completion(token_ids=(5, 6, 7), text="abcd", finish_reason="stop", route="r")
    assert stream_evidence(plain, plain, by_text=False) == ("tokens compared", 3)
    assert stream_evidence(plain, replace(plain, token_ids=(5, 9)), by_text=False) == ("tokens compared", 2)
    assert stream_evidence(plain, replace(plain, token_ids=()), by_text=True) == ("characters compared", 4)


def test_coverage_reason_says_engine_or_vacuous_else_nothing():
    req = Request(prompt_ids=(1,), max_tokens=4, stream=True)
    assert coverage_reason(engine_stream=False, compared=3, stream_req=req) == ""
    assert coverage_reason(engine_stream=False, compared=0, stream_req=req).startswith("vacuous")
    engine = coverage_reason(engine_stream=True, compared=3, stream_req=replace(req, stop=("x",)))
    assert "on the baseline too" in engine and "with a stop string" in engine
