"""The boundary sweep: overshoot and tokens after a stop fail, the correct engine passes.

Route level: equivalence/test_boundaries.py's sweep against the reference engine, correct
and with `max_tokens_overshoot` / `tokens_after_stop`, and wrappers that miscount usage or
misreport finish_reason. Unit level: the invariants, the stop pickers, the depth lookup and the fallback prompts.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import spec_route_suite.equivalence.test_boundaries as boundary_suite
from spec_route_suite.equivalence.boundaries import (SEARCH, VARIANTS, Case, build_cases, pick_stop_string,
                                                     pick_stop_token, speculation_depth, sweep_prompts)
from spec_route_suite.equivalence.boundaries import violations as rule_violations
from spec_route_suite.equivalence.rules import details
from spec_route_suite.routes.base import Completion, Request, RouteInventory
from tests.test_greedy_routes import (ReferenceHandles, Rewired, Sink, baseline_handle, fitted_prompts, handle, prompts,
                                      suite_config, tokenizer)

EOS = 2


def run_sweep(variant, prompt, candidate):
    sink = Sink()
    try:
        boundary_suite.test_boundary_sweep(variant=variant, lean_prompt=prompt, baseline=baseline_handle(),
                                           candidate=candidate, tokenizer=tokenizer(), fitted_prompts=fitted_prompts(),
                                           suite_config=suite_config(), eos_token_id=tokenizer().eos_token_id,
                                           findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink.items
    return None, sink.items


@pytest.fixture(scope="module")
def reference():
    handles = ReferenceHandles()
    yield handles
    handles.close()


@pytest.mark.parametrize("variant", VARIANTS)
def test_correct_engine_passes_every_variant(reference, variant):
    failure, found = run_sweep(variant, prompts(("math",), 1)[0], reference())
    assert failure is None and found == [], failure


@pytest.mark.parametrize("fault, variants, expect", [
    ("max_tokens_overshoot", ("plain", "ignore_eos"), "tokens for max_tokens="),
    ("tokens_after_stop", ("eos", "stop_string", "stop_token"), "after the stop condition"),
])
def test_faults_fail_their_variants(reference, fault, variants, expect):
    failed = {}
    for variant in variants:
        failure, found = run_sweep(variant, prompts(("math",), 1)[0], reference(fault))
        if failure:
            (finding,) = found
            assert finding.check == "boundary" and finding.severity == "bug"
            assert "candidate 'candidate'" in failure and "baseline 'baseline'" in failure
            failed[variant] = failure
    assert failed, f"{fault} passed every variant of {variants}"
    assert all(expect in text for text in failed.values()), failed
    assert len(failed) >= len(variants) - 1, f"{fault} slipped through {set(variants) - set(failed)}"


@pytest.mark.parametrize("damage, expect", [
    (lambda c: replace(c, usage_completion_tokens=len(c.token_ids) + 1), "usage.completion_tokens"),
    (lambda c: replace(c, finish_reason="length"), "finish_reason 'length' but the output ends at a stop"),
], ids=["usage", "finish"])
def test_misreported_usage_and_finish_fail(reference, damage, expect):
    candidate = handle(Rewired(reference().route, completion=lambda req, c: damage(c)), "candidate")
    failure, _ = run_sweep("eos", prompts(("math",), 1)[0], candidate)
    assert failure and expect in failure


# ---- unit level -------------------------------------------------------------------------------

def decode(ids):
    return "".join(chr(ord("a") + i % 26) for i in ids)


def answer(tokens, finish, usage=None):
    return Completion(token_ids=tuple(tokens), text=decode(tokens), finish_reason=finish, route="r",
                      usage_completion_tokens=len(tokens) if usage is None else usage)


def violations(**kw) -> list[str]:
    """The sweep's rule violations of one answer, as the texts a finding shows."""
    return details(rule_violations(**kw))


def case(max_tokens, *, stop=(), stop_ids=(), ignore_eos=False):
    req = Request(prompt_ids=(1,), max_tokens=max_tokens, stop=stop, stop_token_ids=tuple(stop_ids),
                  ignore_eos=ignore_eos)
    ids = frozenset(stop_ids) | (frozenset() if ignore_eos else {EOS})
    return Case("t", req, ids)


def test_invariants_accept_correct_answers():
    assert violations(case=case(3), completion=answer([5, 6, 7], "length"), decode=decode) == []
    assert violations(case=case(5), completion=answer([5, EOS], "stop"), decode=decode) == []
    assert violations(case=case(5, stop_ids=[6]), completion=answer([5, 6], "stop"), decode=decode) == []
    assert violations(case=case(4, ignore_eos=True), completion=answer([5, EOS, 7, 8], "length"), decode=decode) == []


def test_invariants_name_each_violation():
    assert violations(case=case(2), completion=answer([5, 6, 7], "length"), decode=decode) == [
        "3 tokens for max_tokens=2"]
    assert "1 token(s) after the stop condition" in violations(case=case(5), completion=answer([5, EOS, 7], "stop"),
                                                               decode=decode)[0]
    assert violations(case=case(5), completion=answer([5, 6], "length"), decode=decode) == [
        "finish_reason 'length' after 2 of max_tokens=5"]
    assert violations(case=case(2), completion=answer([5, 6], "stop"), decode=decode) == [
        "finish_reason 'stop' after 2 tokens without a stop condition"]
    assert violations(case=case(3), completion=answer([5, 6], "length", usage=3), decode=decode)[0].startswith(
        "usage.completion_tokens=3")
    stop = decode([6])
    cut = replace(answer([5, 6, 7], "stop"), text=decode([5]))
    assert "1 token(s) after the stop condition" in violations(case=case(5, stop=(stop,)), completion=cut,
                                                               decode=decode)[0]
    kept = answer([5, 6], "stop")
    assert any("still contains the stop string" in p for p in violations(case=case(5, stop=(stop,)), completion=kept,
                                                                         decode=decode))


def test_a_route_that_hides_its_stop_token_may_end_early_with_stop():
    assert violations(case=case(5), completion=answer([5, 6], "stop"), decode=decode) == []


def test_stop_pickers_choose_a_first_completion_inside_the_block():
    tokens = [5, 6, 5, 7, 8]
    assert pick_stop_token(tokens, avoid={EOS}, positions=[2, 1]) == (6, 1)
    assert pick_stop_string(tokens, decode=decode, positions=[2, 3]) == (decode([7]), 3)


def test_speculation_depth_from_inventory_then_spec_then_default():
    inv = RouteInventory(engine="x", speculation={"num_speculative_tokens": 7})
    assert speculation_depth(inv) == 7
    assert speculation_depth(RouteInventory(engine="x"), replace_spec(num_assistant_tokens=3)) == 3
    assert speculation_depth(None) == 4


def test_draft_depth_says_where_k_came_from_and_an_assumed_k_is_a_gap():
    from spec_route_suite.equivalence.depth import ASSUMED, draft_depth
    stated = draft_depth(RouteInventory(engine="x", extra={"draft_depth": 6}))
    assert (stated.k, stated.known, stated.gap()) == (6, True, "")
    declared = draft_depth(RouteInventory(engine="x"), replace_spec(options=(("num_speculative_tokens", "5"),)))
    assert (declared.k, declared.source) == (5, "declared in the routes file")
    assumed = draft_depth(RouteInventory(engine="x"), replace_spec())
    assert (assumed.k, assumed.source, assumed.known) == (4, ASSUMED, False) and "k=4 assumed" in assumed.gap()


def replace_spec(**kw):
    from spec_route_suite.routes.spec import RouteSpec
    return RouteSpec(name="c", kind="hf", **kw)


def test_eos_cases_put_eos_at_one_and_at_k():
    reference = answer([5, 6, 7, 8, 9, 10, EOS], "stop")
    cases, how = build_cases(variant="eos", prompt_ids=(1,), reference=reference, depth=4, eos_token_id=EOS,
                             decode=decode, request_id="r")
    prompts_used = {c.request.prompt_ids for c in cases}
    assert prompts_used == {(1, 5, 6, 7, 8, 9), (1, 5, 6)} and len(cases) == 12
    none, why = build_cases(variant="eos", prompt_ids=(1,), reference=answer([5, 6], "length"), depth=4,
                            eos_token_id=EOS, decode=decode, request_id="r")
    assert none == [] and "did not reach EOS" in why


def test_a_sweep_falls_back_to_its_class_then_the_following_classes_in_turn():
    pool = [SimpleNamespace(id=f"{group}-{n}", group=group) for group in ("math", "code", "chat", "json", "long", "mt")
            for n in range(3)]
    assert [p.id for p in sweep_prompts(pool[3], pool)] == ["code-0", "code-1", "chat-0", "json-0", "long-0"]
    assert len(sweep_prompts(pool[3], pool)) == SEARCH
    assert [p.id for p in sweep_prompts(pool[16], pool[:6] + pool[15:])] == ["mt-1", "mt-0", "math-0", "code-0"]
