"""The seed check: a route that honours seeds passes, one that drops them fails, one without them skips.

Unit level: where repeated runs part (first_split), the positive control and the coverage reason.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import spec_route_suite.equivalence.test_seeds as seeds_suite
from spec_route_suite.equivalence.seeds import CONTROL_SEEDS, first_split, positive_control, seeding_reason
from spec_route_suite.routes.base import Completion, Request
from tests.test_greedy_routes import (Rewired, Sink, baseline_handle, fitted_prompts, handle, hf_route, prompts,
                                      reference_route, suite_config, tokenizer)


def run_seeds(prompt, candidate):
    sink = Sink()
    try:
        seeds_suite.test_same_seed_same_tokens(lean_prompt=prompt, candidate=candidate, baseline=baseline_handle(),
                                               fitted_prompts=fitted_prompts(),
                                               suite_config=suite_config(), findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink.items
    return None, sink.items


@pytest.mark.parametrize("kind", ["hf-assisted", "reference"])
def test_seeded_routes_pass(kind):
    route = hf_route("candidate", True) if kind == "hf-assisted" else reference_route("candidate")
    try:
        for prompt in prompts(("chat", "json"), 1):
            failure, found = run_seeds(prompt, handle(route, "candidate"))
            assert failure is None and found == [], f"{prompt.id}: {failure}"
    finally:
        if kind == "reference":
            route.batcher.close()


def test_dropped_seed_fails_with_a_finding():
    candidate = handle(Rewired(hf_route("candidate", True), request=lambda r: replace(r, seed=None)), "candidate")
    # The tiny pair is confident: two unseeded samples of one prompt often coincide, so ask many prompts
    # (about 3 in 10 differ; with 3 prompts this missed about one run in three, with 20 ~1 in 1000).
    failures = [run_seeds(p, candidate) for p in prompts(("chat", "json", "math", "code", "long"), 4)]
    failed = [(f, found) for f, found in failures if f]
    assert failed, "dropping the seed never changed a sampled output"
    failure, (finding,) = failed[0]
    assert "does not honour seed" in failure and "candidate 'candidate'" in failure
    assert finding.check == "seeds" and finding.severity == "bug" and "run 1:" in finding.details["diff"]


def test_route_without_seed_support_is_not_verified():
    inner = hf_route("candidate", True)
    blind = handle(Rewired(inner, capabilities=replace(inner.capabilities, seed=False)), "candidate")
    with pytest.raises(pytest.skip.Exception, match="not verified.*seed"):
        run_seeds(prompts(("math",), 1)[0], blind)


def seeds_coverage(sink_items_and_measurements):
    return [d for kind, d in sink_items_and_measurements if kind == "coverage" and d["check"] == "seeds"]


def run_seeds_recorded(prompt, candidate):
    """(failure text or None, the test's seeds coverage record)."""
    sink = Sink()
    try:
        seeds_suite.test_same_seed_same_tokens(lean_prompt=prompt, candidate=candidate, baseline=baseline_handle(),
                                               fitted_prompts=fitted_prompts(), suite_config=suite_config(),
                                               findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), None
    (record,) = seeds_coverage(sink.measurements)
    return None, record


def test_identical_answers_count_only_where_other_seeds_answer_differently():
    """Issue #34 item 7: a route that ignores seeds on settings where every sample is the same answer passes the
    same-seed comparison; only the positive control (other seeds, same prompt and settings) shows the comparison
    could not fail there: not verified. The engine honouring seeds at the check's own settings is verified."""
    route = reference_route("candidate")
    try:
        # seeds dropped, and every sample one answer: a near-zero temperature, the answer ending at its EOS
        near_deterministic = Rewired(route, request=lambda r: replace(r, seed=None, temperature=0.01, ignore_eos=False)
                                     if r.temperature else r)
        prompt = prompts(("chat",), 1)[0]
        failure, record = run_seeds_recorded(prompt, handle(near_deterministic, "candidate"))
        assert failure is None, failure
        assert record["verified"] is False and "near-deterministic" in record["reason"], record
        assert record["ran"]["other seeds tried"] == CONTROL_SEEDS
        failure, record = run_seeds_recorded(prompt, handle(route, "candidate"))
        assert failure is None and record["verified"] is True, (failure, record)
        assert record["ran"]["other seeds answered differently"] == 1
    finally:
        route.batcher.close()


def test_first_split_names_the_first_run_that_departs_and_where():
    first = Completion(token_ids=(1, 2, 3), text="abc", finish_reason="length", route="r")
    assert first_split(first, [first, first]) is None
    split = first_split(first, [first, replace(first, token_ids=(1, 9, 3)), replace(first, token_ids=(4,))])
    assert (split.run, split.position, split.answer.token_ids) == (3, 1, (1, 9, 3))
    assert split.detail.startswith("run 1:  'abc' (finish=length)\nrun 3: ")
    ended = first_split(first, [replace(first, finish_reason="stop")])
    assert (ended.run, ended.position) == (2, 3)   # same tokens, another finish: at the end of run 1


def test_positive_control_stops_at_the_first_seed_that_answers_differently():
    class Seeded:
        def __init__(self, differs_at):
            self.differs_at, self.asked = differs_at, []

        def generate(self, req):
            self.asked.append((req.seed, req.request_id))
            n = len(self.asked)
            return Completion(token_ids=(n,) if n == self.differs_at else (0,), text="", finish_reason="length",
                              route="r")

    req, answer = Request(prompt_ids=(1,), max_tokens=2, seed=10, request_id="s"), Completion(
        token_ids=(0,), text="", finish_reason="length", route="r")
    route = Seeded(differs_at=2)
    assert positive_control(route, req, answer) == (2, True)
    assert route.asked == [(10 + 7919, "s-control1"), (10 + 2 * 7919, "s-control2")]
    assert positive_control(Seeded(differs_at=None), req, answer) == (CONTROL_SEEDS, False)


def test_seeding_reason_is_circular_for_adapter_seeding_and_near_deterministic_without_a_differing_seed():
    assert seeding_reason(own=True, seeding="engine", tried=2, differs=True) == ""
    assert "near-deterministic: 8 different seeds" in seeding_reason(own=True, seeding="engine", tried=8,
                                                                     differs=False)
    assert seeding_reason(own=False, seeding="adapter (sampler)", tried=0, differs=False).startswith(
        "circular on this route: seeding is done by the adapter (sampler)")
