"""Stop strings on every prompt: the correct engine passes; a 20% stop-string fault is caught in 20 of 20 seeded runs.

Route level: equivalence/test_stop_strings.py against the reference engine. A run of the route suite fails
when any of its per-prompt tests fails, so a seeded run of `stop_string_dropped` (fault_rate 0.2) is caught
when one prompt of the default prompt set fails; the test walks the prompt set in order for each of 20 seeds
and stops at the first failure (later prompts cannot un-catch a run). Also: usage_miscount is caught, and
the stop-string pickers choose strings that first complete inside the first draft block.
"""
from __future__ import annotations

import pytest

import spec_route_suite.equivalence.test_stop_strings as stop_suite
from spec_route_suite.equivalence.stop_strings import pick_multi, pick_single
from spec_route_suite.config import PROMPT_CATEGORIES
from spec_route_suite.prompts.fit import suite_prompts
from tests.test_greedy_routes import Sink, baseline_handle, fitted_prompts, handle, prompts, reference_route, tokenizer

SEEDS = 20


@pytest.fixture(scope="module")
def baseline():
    return baseline_handle()   # one handle: its greedy memo serves every seed


def run_prompt(prompt, baseline, candidate):
    sink = Sink()
    try:
        stop_suite.test_stop_strings_on_every_prompt(prompt=prompt, baseline=baseline, candidate=candidate,
                                                     tokenizer=tokenizer(), fitted_prompts=fitted_prompts(),
                                                     eos_token_id=tokenizer().eos_token_id, findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink
    return None, sink


def with_engine(fn, **options):
    route = reference_route("candidate", **options)
    try:
        return fn(handle(route, "candidate"))
    finally:
        route.batcher.close()


def test_correct_engine_passes_and_sends_stop_strings(baseline):
    def check(candidate):
        sent = 0
        for prompt in prompts(("math", "code", "chat", "json", "long"), 1):
            failure, sink = run_prompt(prompt, baseline, candidate)
            assert failure is None and sink.items == [], failure
            (record,) = [d for name, d in sink.measurements if name == "coverage"]
            sent += record["ran"]["stop-string requests"]
        assert sent >= 8, f"only {sent} stop-string requests on 5 prompts"
    with_engine(check)


def test_usage_miscount_is_caught(baseline):
    def check(candidate):
        failure, sink = run_prompt(prompts(("math",), 1)[0], baseline, candidate)
        assert failure and "usage.completion_tokens=" in failure, failure
        assert sink.items[0].check == "boundary" and sink.items[0].severity == "bug"
    with_engine(check, fault="usage_miscount")


def test_stop_strings_dropped_at_20_percent_are_caught_in_20_of_20_seeded_runs(baseline):
    """Each seeded run is caught within the default prompt set; the table of where is printed with -s."""
    default_set = suite_prompts(PROMPT_CATEGORIES, None)
    caught_at = {}
    for seed in range(SEEDS):
        def first_failure(candidate):
            for n, prompt in enumerate(default_set, 1):
                failure, sink = run_prompt(prompt, baseline, candidate)
                if failure:
                    assert "stop string" in failure and sink.items[0].severity == "bug", failure
                    return n
            return None
        caught_at[seed] = with_engine(first_failure, fault="stop_string_dropped", fault_rate="0.2", seed=str(seed))
    print(f"\nstop_string_dropped (20%): caught at prompt {caught_at} of {len(default_set)}")
    assert all(caught_at.values()), f"missed by seeds {[s for s, n in caught_at.items() if not n]}"


# ---- unit level -------------------------------------------------------------------------------

def decode(ids):
    return "".join(chr(ord("a") + i % 26) for i in ids)


def test_pickers_choose_strings_first_completed_at_the_asked_positions():
    tokens = [5, 6, 5, 7, 8, 9]
    assert pick_single(tokens, decode=decode, positions=[2, 3], avoid=set()) == (decode([7]), 3)
    assert pick_single(tokens, decode=decode, positions=[3], avoid={7}) is None
    assert pick_multi(tokens, decode=decode, positions=[2], avoid=set()) == (decode([6, 5]), 2)
    assert pick_multi(tokens, decode=decode, positions=[1], avoid=set()) is None   # j=1 has no earlier token here
