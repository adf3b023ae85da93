"""Streams judged as text and as ids apart (issue #20 part 5), and their accounting against the baseline's stream.

A stream whose token ids are incomplete (`Completion.id_gap`, the ids re-derived from its text) but whose
text equals the plain answer is no "different answer": the `text` part verified; the baseline's stream showing
the same gap makes it an engine note, the baseline's stream carrying every id makes it a finding (the candidate
drops what its engine delivers), a baseline that cannot stream leaves the `ids` part "not verified" (why); a text
difference still fails. The accounting rules (usage on the stream) with the reference engine's usage_counts_stop quirk: on
both routes an engine note, on the candidate only a finding quoting the baseline's stream of the request.
A difference the baseline's stream shows too excuses the candidate's only when it is the same one at the same place
(issue #42): a baseline differing in finish_reason only does not excuse a duplicated token, nor a duplication, ids
skipped or an id gap at other places than the baseline's.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import spec_from_table
from spec_route_suite.routes.textlevel import retokenize
from tests.test_greedy_routes import (MODELS, Rewired, Sink, fitted_prompts, handle, prompts, reference_route,
                                      suite_config, tokenizer)
from tests.test_greedy_streaming import run_stream

GAP = "the stream's logprob entries covered 2 of 18 tokens"


def with_gap(req, c: Completion) -> Completion:
    """The streamed answer with its ids lost, as the OpenAI adapter gives it (openai_answers.py): text-level, ids
    re-derived from the (unchanged) text, and `id_gap` saying why."""
    if not req.stream:
        return c
    return replace(c, token_ids=retokenize(tokenizer(), c.text), text_level=True, logprobs=None, id_gap=GAP)


def damaged_text(req, c: Completion) -> Completion:
    gapped = with_gap(req, c)
    return replace(gapped, text=gapped.text + " extra") if req.stream else gapped


@pytest.fixture(scope="module")
def engines():
    made = {name: reference_route(name, **options) for name, options in (
        ("plain", {}), ("baseline-quirk", {"quirk": "usage_counts_stop"}), ("candidate-quirk", {"quirk": "usage_counts_stop"}))}
    yield made
    for route in made.values():
        route.batcher.close()


def coverage(sink, part: str) -> list[dict]:
    return [m for kind, m in sink.measurements if kind == "coverage" and m.get("part") == part]


def test_an_id_gap_only_on_the_candidates_stream_is_a_finding_its_text_still_verified(engines):
    """Equal text, ids incomplete on the candidate's stream only: no "different answer", but the candidate drops
    what the baseline's stream of the same request carries (issue #34 item 1): a finding, never "not verified"."""
    candidate = handle(Rewired(engines["plain"], completion=with_gap), "candidate")
    sink = Sink()
    failure, found = run_stream(prompts(("math",), 1)[0], candidate, baseline=handle(engines["plain"], "baseline"),
                                sink=sink)
    assert failure and GAP in failure and "carries them all" in failure and "text differs" not in failure
    (bug,) = found
    assert bug.severity == "bug" and bug.details["rule"] == "ids" and "different" not in bug.title
    assert coverage(sink, "ids") == [] and [m["verified"] for m in coverage(sink, "text")] == [True]


def test_an_id_gap_without_a_baseline_stream_to_compare_is_ids_not_verified(engines):
    inner = engines["plain"]
    candidate = handle(Rewired(inner, completion=with_gap), "candidate")
    blind = handle(Rewired(inner, capabilities=replace(inner.capabilities, stream=False)), "baseline")
    sink = Sink()
    failure, found = run_stream(prompts(("math",), 1)[0], candidate, baseline=blind, sink=sink)
    assert failure is None and found == [], failure
    (ids,) = coverage(sink, "ids")
    assert ids["verified"] is False and GAP in ids["reason"] and "cannot stream" in ids["reason"]
    assert [m["verified"] for m in coverage(sink, "text")] == [True]


def test_the_same_gap_on_the_baselines_stream_is_an_engine_note(engines):
    candidate = handle(Rewired(engines["plain"], completion=with_gap), "candidate")
    baseline = handle(Rewired(engines["plain"], completion=with_gap), "baseline")
    sink = Sink()
    failure, found = run_stream(prompts(("math",), 1)[0], candidate, baseline=baseline, sink=sink)
    assert failure is None, failure
    (note,) = found
    assert note.severity == "engine" and note.route == "baseline" and note.details["rule"] == "ids"
    (ids,) = coverage(sink, "ids")
    assert ids["verified"] is False and ids["reason"].startswith("the engine itself does not honour token ids")


def test_a_text_difference_with_an_id_gap_still_fails(engines):
    candidate = handle(Rewired(engines["plain"], completion=damaged_text), "candidate")
    failure, found = run_stream(prompts(("math",), 1)[0], candidate, baseline=handle(engines["plain"], "baseline"))
    assert failure and "text differs" in failure
    (finding,) = [f for f in found if f.severity == "bug" and "different answer" in f.title]
    assert finding.details["ids"] == GAP


def test_stream_usage_counting_the_stop_is_engine_behaviour_on_both_and_a_finding_alone(engines):
    prompt = prompts(("math",), 1)[0]
    candidate = handle(engines["candidate-quirk"], "candidate")
    failure, found = run_stream(prompt, candidate, True, baseline=handle(engines["baseline-quirk"], "baseline"))
    assert failure is None, failure
    assert {f.details["rule"] for f in found if f.severity == "engine"} == {"usage"}
    assert not [f for f in found if f.severity == "bug"]
    failure, found = run_stream(prompt, candidate, True, baseline=handle(engines["plain"], "baseline"))
    assert failure and "usage.completion_tokens=" in failure and "baseline, same request" in failure
    (bug,) = [f for f in found if f.severity == "bug"]
    assert bug.details["baseline_control"]["violations"] == ["none: the baseline honours every rule here"]



def with_last_token_dropped(req, c: Completion) -> Completion:
    """The streamed answer lacking its last token id while its text and usage stay whole (llama.cpp's /v1 stream
    omits the logprob entry of its final EOS)."""
    if not req.stream or not c.token_ids:
        return c
    return replace(c, token_ids=c.token_ids[:-1])


def test_stream_ids_short_of_the_last_token_like_the_baselines_are_an_engine_note(engines):
    """Both routes' streams lack the plain answer's last id: engine behaviour (a note, ids not verified); the
    candidate's alone lacking it is a finding, the baseline's two deliveries quoted as the control."""
    prompt = prompts(("math",), 1)[0]
    candidate = handle(Rewired(engines["plain"], completion=with_last_token_dropped), "candidate")
    shared = handle(Rewired(engines["plain"], completion=with_last_token_dropped), "baseline")
    sink = Sink()
    failure, found = run_stream(prompt, candidate, baseline=shared, sink=sink)
    assert failure is None, failure
    notes = [f for f in found if f.severity == "engine" and f.details["rule"] == "ids"]
    assert notes and "one token more at its end" in notes[0].title and not [f for f in found if f.severity == "bug"]
    assert any(m["verified"] is False for m in coverage(sink, "ids"))
    failure, found = run_stream(prompt, candidate, baseline=handle(engines["plain"], "baseline"))
    assert failure and "token ids differ" in failure
    assert [f for f in found if f.severity == "bug"]


def without_ids_at(positions: tuple[int, ...]):
    """A stream whose ids skip some positions inside the answer, as llama.cpp's reasoning parser keeps `</think>`
    and the blank line after it out of a streamed chat answer (seen on pair 2's `/v1`, 2026-12-04)."""
    def damage(req, c: Completion) -> Completion:
        if not req.stream:
            return c
        return replace(c, token_ids=tuple(t for i, t in enumerate(c.token_ids) if i not in positions))
    return damage


def test_stream_ids_missing_inside_the_answer_like_the_baselines_are_an_engine_note(engines):
    """Both routes' streams skip the same ids inside the answer: engine behaviour (a note, ids not verified), not a
    candidate finding; the candidate's stream alone skipping them, or skipping others, is still a finding."""
    prompt = prompts(("math",), 1)[0]
    candidate = handle(Rewired(engines["plain"], completion=without_ids_at((2, 3, 4))), "candidate")
    shared = handle(Rewired(engines["plain"], completion=without_ids_at((2, 3, 4))), "baseline")
    sink = Sink()
    failure, found = run_stream(prompt, candidate, baseline=shared, sink=sink)
    assert failure is None, failure
    assert [f for f in found if f.severity == "engine" and f.details["rule"] == "ids"]
    assert not [f for f in found if f.severity == "bug"]
    assert any(m["verified"] is False for m in coverage(sink, "ids"))
    for baseline in (handle(engines["plain"], "baseline"),
                     handle(Rewired(engines["plain"], completion=without_ids_at((5, 6))), "baseline")):
        failure, found = run_stream(prompt, candidate, baseline=baseline)
        assert failure and "token ids differ" in failure
        assert [f for f in found if f.severity == "bug"]


def streamed_garbled(req, c: Completion) -> Completion:
    """The streamed answer's text cut and shifted, as vLLM 0.32's reasoning parser streams a stop-string request
    (on its AR server too): ids dropped, text different from the plain answer's."""
    gapped = with_gap(req, c)
    return replace(gapped, text="nk>" + gapped.text[3:]) if req.stream else gapped


def test_a_stream_that_differs_as_the_baselines_own_stream_does_is_an_engine_note(engines):
    """The baseline's stream of the same request differs from its plain answer too: the comparison cannot show what
    speculation does (an engine note, the part not verified); the same candidate beside a baseline that streams
    what it returns is a finding (the control of the same budget: one prompt, one stream each)."""
    prompt = prompts(("math",), 1)[0]
    candidate = handle(Rewired(engines["plain"], completion=streamed_garbled), "candidate")
    sink = Sink()
    failure, found = run_stream(prompt, candidate, True, sink=sink,
                                baseline=handle(Rewired(engines["plain"], completion=streamed_garbled), "baseline"))
    assert failure is None, failure
    assert {f.details["rule"] for f in found if f.severity == "engine"} == {"stream_text", "ids"}   # ids: both gap
    assert not [f for f in found if f.severity == "bug"]
    main = [m for kind, m in sink.measurements if kind == "coverage" and not m.get("part")]
    assert [m["verified"] for m in main] == [False]
    assert main[0]["reason"].startswith("the engine itself does not honour a streamed answer equal to the plain one")
    failure, found = run_stream(prompt, candidate, True, baseline=handle(engines["plain"], "baseline"))
    assert failure and "text differs" in failure
    assert [f for f in found if f.severity == "bug" and "different answer" in f.title]


# ---------------------------------------------------------------- the same difference, at the same place (issue #42)
def excused(found) -> set[str]:
    """The rules of the engine notes that excuse a stream difference (a usage note is the accounting rules')."""
    return {f.details["rule"] for f in found if f.severity == "engine"} & {"stream_text", "ids"}


def with_finish_flipped(req, c: Completion) -> Completion:
    """A stream that differs from the plain answer in its finish_reason only."""
    return replace(c, finish_reason="length" if c.finish_reason == "stop" else "stop") if req.stream else c


def duplicating(position: int):
    """A stream that repeats the token at `position` (a speculative step's token emitted twice), ids and text."""
    def damage(req, c: Completion) -> Completion:
        if not req.stream:
            return c
        ids = c.token_ids[:position + 1] + c.token_ids[position:]
        text = tokenizer().decode(list(ids), skip_special_tokens=True)
        assert text != c.text, "the duplicated token must show in the text"
        return replace(c, token_ids=ids, text=text)
    return damage


def test_a_baselines_finish_reason_difference_does_not_excuse_a_duplicated_token(engines):
    """The audit's proof: the baseline's stream differs from its plain answer in finish_reason only; the candidate's
    repeats a token mid-answer. Before, any difference on the baseline made it an engine note; now the candidate is
    judged (a bug), and the same duplication on both streams, at the same place, is the engine's note."""
    prompt = prompts(("math",), 1)[0]
    candidate = handle(Rewired(engines["plain"], completion=duplicating(3)), "candidate")
    failure, found = run_stream(prompt, candidate,
                                baseline=handle(Rewired(engines["plain"], completion=with_finish_flipped), "baseline"))
    assert failure and "token ids differ" in failure and "text differs" in failure, failure
    assert [f for f in found if f.severity == "bug" and "different answer" in f.title] and not excused(found)
    sink = Sink()
    failure, found = run_stream(prompt, candidate, sink=sink,
                                baseline=handle(Rewired(engines["plain"], completion=duplicating(3)), "baseline"))
    assert failure is None and not [f for f in found if f.severity == "bug"], failure
    assert excused(found) == {"stream_text"}


def test_a_duplicated_token_at_another_place_than_the_baselines_is_judged(engines):
    prompt = prompts(("math",), 1)[0]
    candidate = handle(Rewired(engines["plain"], completion=duplicating(3)), "candidate")
    failure, found = run_stream(prompt, candidate,
                                baseline=handle(Rewired(engines["plain"], completion=duplicating(6)), "baseline"))
    assert failure and "text differs" in failure, failure
    assert [f for f in found if f.severity == "bug"] and not excused(found)


def test_stream_ids_skipped_at_another_place_than_the_baselines_are_judged(engines):
    """The same id left out of both streams, at two places of the answer where it occurs: not the same difference
    (before, the ids compared without their places, and the candidate's was excused)."""
    prompt = prompts(("math",), 1)[0]
    plain = handle(engines["plain"], "baseline").generate(
        Request(prompt_ids=fitted_prompts().ids(prompt), max_tokens=suite_config().max_new_tokens,
                temperature=0.0, request_id=f"stream-{prompt.id}"))
    ids = list(plain.token_ids)
    first = next(i for i, t in enumerate(ids) if ids.count(t) > 1)
    second = ids.index(ids[first], first + 1)
    candidate = handle(Rewired(engines["plain"], completion=without_ids_at((second,))), "candidate")
    failure, found = run_stream(prompt, candidate,
                                baseline=handle(Rewired(engines["plain"], completion=without_ids_at((first,))),
                                                "baseline"))
    assert failure and "token ids differ" in failure, failure
    assert [f for f in found if f.severity == "bug"] and not excused(found)


def stating(positions: tuple[int, ...]):
    """The streamed answer as the OpenAI adapter parses a stream whose logprob entries, where its ids are, cover the
    tokens at `positions` only (llama.cpp's draft-simple streams carry entries only for tokens sampled outside
    draft verification): text-level, the gap named."""
    route = build_route(spec_from_table("gapped", {"kind": "openai", "base_url": "http://127.0.0.1:9/v1",
                                                   "model": "m", "tokenizer": str(MODELS / "target")}, base=MODELS))

    def parse(req, c: Completion) -> Completion:
        if not req.stream:
            return c
        kept = [c.token_ids[i] for i in positions]
        entries = {"tokens": [f"token_id:{t}" for t in kept], "token_logprobs": [-0.5] * len(kept),
                   "top_logprobs": [{}] * len(kept)}
        body = {"choices": [{"text": c.text, "index": 0, "finish_reason": c.finish_reason, "logprobs": entries}],
                "usage": {"completion_tokens": c.usage_completion_tokens}}
        return replace(route.parse_completion(body, req), route=c.route)
    return parse


def test_an_id_gap_at_other_places_than_the_baselines_is_judged(engines):
    """Both streams' logprob entries cover two tokens of the answer, other ones on each: the candidate's gap is not
    the baseline's (before, any gap on the baseline's stream excused any on the candidate's); the same two on both
    are the engine's note."""
    prompt = prompts(("math",), 1)[0]
    candidate = handle(Rewired(engines["plain"], completion=stating((0, 1))), "candidate")
    failure, found = run_stream(prompt, candidate,
                                baseline=handle(Rewired(engines["plain"], completion=stating((2, 3))), "baseline"))
    assert failure and "leaves out other ids" in failure, failure
    (bug,) = [f for f in found if f.severity == "bug"]
    assert bug.details["rule"] == "ids" and not excused(found)
    failure, found = run_stream(prompt, candidate,
                                baseline=handle(Rewired(engines["plain"], completion=stating((0, 1))), "baseline"))
    assert failure is None and excused(found) == {"ids"}, failure
