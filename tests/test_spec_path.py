"""Speculation per request family: the correct engine speculates for every family; spec-off-for-logprobs is caught.

Route level: equivalence/test_spec_path.py against the reference engine (its answers state their own drafted
tokens, as llama.cpp's timings do), correct and with `spec_off_for_logprobs`; a route whose answers state
nothing is "not verified", never a pass. The parity rows of a family found off are recorded not verified.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import spec_route_suite.equivalence.test_spec_path as spec_suite
from spec_route_suite.equivalence.spec_path import FAMILIES, Share, silently_off
from spec_route_suite.routes.base import Completion
from tests.test_greedy_routes import (ReferenceHandles, Rewired, Sink, baseline_handle, fitted_prompts, handle,
                                      tokenizer)

CONFIG = SimpleNamespace(categories=("math", "code", "chat", "json", "long"), prompt_sources=(), seed=0, prompt_limit=None)


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
        assert record["check"] == "spec-path" and record["ran"]["answers that speculated"] > 0, record


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


def test_share_arithmetic():
    def answer(drafted):
        return Completion(token_ids=(1,), text="", finish_reason="length", route="r", draft_tokens=drafted)
    off, on = Share.of([answer(0), answer(0)]), Share.of([answer(8), answer(0)])
    assert (off.stated, off.speculated, on.speculated) == (2, 0, 1) and silently_off(off, on)
    assert not silently_off(on, on) and not silently_off(Share.of([answer(None)]), on)
