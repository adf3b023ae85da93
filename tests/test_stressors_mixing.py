"""Self-tests of the mixing detector: exact edit distances, attribution on synthetic data, and against ground truth."""
from __future__ import annotations

import asyncio
import random

from hypothesis import given, settings, strategies as st

from spec_route_suite.routes.base import Completion
from spec_route_suite.embedded import corpus
from spec_route_suite.stressors.canary import build_workload, canary_question, renderer, serial_references
from spec_route_suite.stressors.driver import Outcome, burst, drive, mixed_arrivals, plan, round_robin
from spec_route_suite.stressors.mixing.detect import (CONTEXT_PROBE, FOREIGN_ANSWER, FOREIGN_CANARY, UNATTRIBUTED,
                                                      detect, edit_distances, probe_contexts, untrusted_references)
from test_stressors_fakes import CharTokenizer, MixingRoute, OracleRoute


def naive_distance(a, b) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


tokens = st.lists(st.integers(0, 4), max_size=12)


@given(tokens, st.lists(tokens, min_size=1, max_size=4))
@settings(max_examples=300, deadline=None)
def test_edit_distances_match_the_textbook_algorithm(seq, refs):
    assert list(edit_distances(seq, refs)) == [naive_distance(seq, r) for r in refs]


def workload_and_refs(size=12, task_share=0.25):
    tok = CharTokenizer()
    workload = build_workload(tok, size=size, seed=3, task_share=task_share, max_prompt_tokens=10_000)
    route = OracleRoute(latency_s=0.0)
    refs = serial_references(lambda r: asyncio.run(route.generate(r)), workload, max_tokens=64)
    return tok, workload, refs, route


def outcome(key, completion, rid, start=0.0, end=1.0):
    return Outcome(key=key, request_id=rid, completion=completion, error_kind=None, error=None,
                   started_s=start, ended_s=end, in_flight_at_start=1)


def test_workload_is_answerable_alone_and_canaries_are_unique():
    _, workload, refs, _ = workload_and_refs(size=24)
    recall = workload.recall()
    assert len(recall) == 18 and {i.length for i in recall} == {"short", "medium", "long"}
    assert all(i.answer in refs[i.key].text for i in recall), "the oracle answers each conversation from its own facts"
    assert len({v for i in recall for v in i.canaries}) == 2 * len(recall)
    assert workload.prefix_tokens > 100, "conversations share a long prefix"


def test_attribution_on_synthetic_outputs():
    tok, workload, refs, _ = workload_and_refs()
    recall = workload.recall()
    victim = recall[0]
    source = next(i for i in recall[1:] if i.asked != victim.asked)
    task_a, task_b = [i for i in workload.items if i.shape != "recall"][:2]

    def completion(text):
        ids = tok(text)["input_ids"] + [2]
        return Completion(token_ids=tuple(ids), text=text, finish_reason="stop", route="synthetic")

    canary_leak = completion(f"Your locker code is {source.canaries[0]}.")
    other_answer = refs[task_b.key]
    noise = completion(refs[victim.key].text[:-2] + "?.")
    outcomes = [
        outcome(victim.key, canary_leak, "v1", 0, 2),
        outcome(source.key, refs[source.key], "s1", 1, 3),
        outcome(task_a.key, other_answer, "v2", 5, 6),
        outcome(task_b.key, refs[task_b.key], "s2", 5.5, 7),
        outcome(victim.key, noise, "v3", 10, 11),
        outcome(victim.key, refs[victim.key], "ok", 12, 13),
    ]
    report = detect(workload=workload, references=refs, outcomes=outcomes)
    assert report.checked == 6
    by_victim = {a.victim_request: a for a in report.mismatches}
    assert set(by_victim) == {"v1", "v2", "v3"}
    leak = by_victim["v1"]
    assert (leak.method, leak.source_key, leak.source_requests_in_flight) == (FOREIGN_CANARY, source.key, ("s1",))
    assert source.canaries[0] in leak.evidence
    swap = by_victim["v2"]
    assert (swap.method, swap.source_key, swap.source_distance) == (FOREIGN_ANSWER, task_b.key, 0)
    assert swap.source_requests_in_flight == ("s2",)
    assert by_victim["v3"].method == UNATTRIBUTED and not by_victim["v3"].attributed
    assert report.matrix() == {(source.key, victim.key): 1, (task_b.key, task_a.key): 1}
    assert f"{source.key} -> {victim.key} : 1" in report.matrix_text()


def test_a_source_not_in_flight_is_named_as_such():
    tok, workload, refs, _ = workload_and_refs()
    a, b = workload.items[:2]
    report = detect(workload=workload, references=refs,
                    outcomes=[outcome(a.key, refs[b.key], "late", 10, 11), outcome(b.key, refs[b.key], "early", 0, 1)])
    (att,) = report.contaminated
    assert att.source_key == b.key and att.source_requests_in_flight == ()
    assert "NOT in flight" in att.line()


def test_correct_route_under_load_shows_no_mismatch():
    _, workload, refs, route = workload_and_refs(size=16)
    route.latency_s = 0.003
    keys = round_robin(workload.keys, 120, rng=random.Random(0))
    subs = plan(((k, workload.get(k).request(max_tokens=64)) for k in keys), offsets=burst(len(keys)), tag="ok")
    run = asyncio.run(drive(route, subs, concurrency=8, request_timeout_s=5, deadline_s=60))
    report = detect(workload=workload, references=refs, outcomes=run.outcomes)
    assert report.checked == 120 and report.mismatches == ()


def test_every_attribution_names_the_true_source():
    """Ground truth from MixingRoute.fault_log: each attributed victim got its content from the logged source."""
    _, workload, refs, oracle = workload_and_refs(size=32)
    oracle.latency_s = 0.003
    route = MixingRoute(oracle, rate=0.1, seed=1)
    rng = random.Random(1)
    keys = round_robin(workload.keys, 400, rng=rng)
    subs = plan(((k, workload.get(k).request(max_tokens=64)) for k in keys),
                offsets=mixed_arrivals(len(keys), rng=rng, rate_per_s=2000), tag="mix")
    run = asyncio.run(drive(route, subs, concurrency=8, request_timeout_s=5, deadline_s=120))
    passive = detect(workload=workload, references=refs, outcomes=run.outcomes)
    report = probe_contexts(passive, workload=workload, outcomes=run.outcomes, max_tokens=64,
                            generate=lambda r: asyncio.run(oracle.generate(r)), render=renderer(CharTokenizer()))
    truth = dict(route.fault_log)
    key_of = {o.request_id: o.key for o in run.outcomes}
    assert len(truth) >= 20, "the wrapper should have mixed about 10% of 400 requests"
    for att in report.contaminated:
        assert att.victim_request in truth, f"false attribution: {att.line()}"
        true_source = key_of[truth[att.victim_request]]
        if att.method == CONTEXT_PROBE:
            assert true_source in (att.source_key, *att.alternatives), att.line()
        else:
            assert att.source_key == true_source, att.line()
            assert truth[att.victim_request] in att.source_requests_in_flight
    visible = [v for v, s in truth.items()
               if run.by_id()[v].completion.token_ids != refs[key_of[v]].token_ids]
    assert {a.victim_request for a in report.contaminated} == set(visible), "every visible mix is attributed"
    assert len(passive.contaminated) >= 0.5 * len(visible), "half are attributed from the outputs alone"
    assert {a.method for a in report.contaminated} >= {FOREIGN_CANARY, FOREIGN_ANSWER, CONTEXT_PROBE}


NUMBER_QUESTION = corpus._FACTS["number"][3]  # noqa: SLF001


def guessing(oracle, guess: str):
    """The oracle, except that asked for a lucky number its context lacks it says `guess` (a favourite guess)."""
    def generate(req):
        done = asyncio.run(oracle.generate(req))
        prompt = oracle.tokenizer.decode(req.prompt_ids)
        if done.text.startswith("I do not know") and NUMBER_QUESTION in prompt.rpartition(corpus.USER)[2]:
            text = f"Your lucky number is {guess}."
            return Completion(token_ids=tuple(oracle.tokenizer(text)["input_ids"]) + (2,), text=text,
                              finish_reason="stop", route="guessing")
        return done
    return generate


def has_fact(item, kind: str) -> bool:
    return any(canary_question(item, v) == corpus._FACTS[kind][3] for v in item.canaries)  # noqa: SLF001


def test_a_foreign_canary_the_victims_own_conversation_guesses_names_no_source():
    """A garbled step can switch a locker-code answer to the lucky-number template, and the victim's own context
    then guesses a number: when that guess is another conversation's canary, only asking the victim's own
    conversation for the number tells the guess from a leak. Control: a route that does not guess keeps the source."""
    tok, workload, refs, oracle = workload_and_refs(size=24)
    recall = workload.recall()
    victim = next(i for i in recall if not has_fact(i, "number"))
    source = next(i for i in recall if i is not victim and has_fact(i, "number"))
    value = next(v for v in source.canaries if canary_question(source, v) == NUMBER_QUESTION)
    text = f"Your lucky number is {value}."
    garbled = Completion(token_ids=tuple(tok(text)["input_ids"]) + (2,), text=text, finish_reason="stop", route="c")
    outcomes = [outcome(victim.key, garbled, "v1", 0, 2), outcome(source.key, refs[source.key], "s1", 1, 3)]
    passive = detect(workload=workload, references=refs, outcomes=outcomes)
    (leak,) = passive.mismatches
    assert (leak.method, leak.source_key, leak.canary) == (FOREIGN_CANARY, source.key, value)
    probe = dict(workload=workload, outcomes=outcomes, max_tokens=64, render=renderer(tok))
    (kept,) = probe_contexts(passive, generate=guessing(oracle, "nothing-alike"), **probe).mismatches
    assert (kept.method, kept.source_key) == (FOREIGN_CANARY, source.key), "a value it does not guess at home is a leak"
    (guess,) = probe_contexts(passive, generate=guessing(oracle, value), **probe).mismatches
    assert guess.method == UNATTRIBUTED and not guess.attributed, guess.line()
    assert "a guess, no source" in guess.line() and value in guess.line()


def test_an_output_made_of_its_own_answers_tokens_is_not_pinned_on_a_neighbours_guess():
    """'Your lucky number is 8.' for 885 is a truncated own answer: a neighbour without a lucky number that guesses
    8 explains it no better than a garbled step does. Control: a digit its own answer lacks is probed and named."""
    tok, workload, refs, oracle = workload_and_refs(size=24)
    recall = workload.recall()
    victim = next(i for i in recall if i.asked == "number")
    neighbour = next(i for i in recall if not has_fact(i, "number"))
    own_digit = victim.answer[0]
    other_digit = next(d for d in "0123456789" if d not in victim.answer)
    for digit, named in ((own_digit, False), (other_digit, True)):
        text = f"Your lucky number is {digit}."
        got = Completion(token_ids=tuple(tok(text)["input_ids"]) + (2,), text=text, finish_reason="stop", route="c")
        outcomes = [outcome(victim.key, got, "v1", 0, 2), outcome(neighbour.key, refs[neighbour.key], "n1", 1, 3)]
        passive = detect(workload=workload, references=refs, outcomes=outcomes)
        assert passive.mismatches[0].foreign_tokens == (0 if digit == own_digit else 1)
        (att,) = probe_contexts(passive, workload=workload, outcomes=outcomes, max_tokens=64, render=renderer(tok),
                                generate=guessing(oracle, digit)).mismatches
        assert (att.method, att.source_key) == ((CONTEXT_PROBE, neighbour.key) if named else (UNATTRIBUTED, None)), \
            att.line()


def test_references_off_baseline_are_distrusted_only_when_they_do_not_reproduce():
    """A reference made inside someone else's batch (differs from the baseline, and a second serial run
    differs too) is not a basis for attribution; a deterministic one that merely differs from the
    baseline (a greedy bug the greedy checks own) still is, and one equal to the baseline always is."""
    _, workload, refs, _ = workload_and_refs(size=12)
    keys = [i.key for i in workload.items[:3]]
    on_baseline, reproducible, garbled = keys
    by_prompt = {workload.get(k).prompt_ids: k for k in workload.keys}
    off = lambda c: Completion(token_ids=c.token_ids + (1,), text=c.text + "!", finish_reason="length", route="c")
    shifted = {k: (off(refs[k]) if k != on_baseline else refs[k]) for k in keys}
    calls = []

    def baseline(req):
        return refs[by_prompt[req.prompt_ids]]

    def candidate(req):
        key = by_prompt[req.prompt_ids]
        calls.append(req.request_id)
        return shifted[key] if key == reproducible else refs[key]  # the garbled one comes out differently now

    untrusted = untrusted_references(baseline=baseline, candidate=candidate, workload=workload, references=shifted,
                                     keys=set(keys), max_tokens=16)
    assert untrusted == {garbled}
    assert len(calls) == 2 and all(c.endswith("-recheck") for c in calls), "rechecks are fresh requests"
