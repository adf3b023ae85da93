"""The seed check: a route that honours seeds passes, one that drops them fails, one without them skips."""
from __future__ import annotations

from dataclasses import replace

import pytest

import spec_route_suite.equivalence.test_seeds as seeds_suite
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
        assert record["ran"]["other seeds tried"] == seeds_suite.CONTROL_SEEDS
        failure, record = run_seeds_recorded(prompt, handle(route, "candidate"))
        assert failure is None and record["verified"] is True, (failure, record)
        assert record["ran"]["other seeds answered differently"] == 1
    finally:
        route.batcher.close()
