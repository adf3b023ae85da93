"""Streaming parity: a streamed (SSE) answer is the non-streamed answer, delivered in pieces.

Speculative engines emit several tokens per step, so stream chunking is where tokens get
duplicated, dropped or counted twice. Greedy requests, on the lean prompts, with and
without a stop string. The adapter folds the events and raises when a stream carries no
finish_reason or more than one, or closes before [DONE] (that error becomes a finding);
this test compares the folded result with the plain request.
A token split between the two deliveries is classified like a greedy divergence (the
baseline teacher-forces the streamed token): under --greedy-policy classify a near-tie is
reported as nondeterminism, not as a streaming bug; strict fails it like any split.
Routes that cannot stream are skipped and reported "not verified". The chat shape (check family
"chat", equivalence/chat.py) streams a chat request the same way (delta.content chunks). A server without token
ids is compared at text level (fixtures/routes/textlevel.py): streamed and plain text, finish
and usage, without the usage-equals-token-count check (its ids are re-derived from text).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.divergence import classify_divergence
from spec_route_suite.equivalence.greedy import compare_greedy
from spec_route_suite.fixtures.routes.base import Completion, Request
from spec_route_suite.fixtures.routes.textlevel import aligned, describe, is_text_level, title_suffix
from spec_route_suite.reports.findings import Finding

pytestmark = pytest.mark.check("streaming")

FINISH_REASONS = ("stop", "length")


def delivery_differences(*, plain: Completion, streamed: Completion) -> list[str]:
    """Where the two deliveries of one greedy request differ, naming both sides."""
    problems = []
    if streamed.token_ids != plain.token_ids and not is_text_level(plain, streamed):
        problems.append(f"token ids differ: stream {list(streamed.token_ids)[:24]} "
                        f"vs non-stream {list(plain.token_ids)[:24]}")
    if streamed.text != plain.text:
        problems.append(f"text differs: stream {streamed.text[:120]!r} vs non-stream {plain.text[:120]!r}")
    if streamed.finish_reason != plain.finish_reason:
        problems.append(f"finish_reason differs: stream {streamed.finish_reason!r} "
                        f"vs non-stream {plain.finish_reason!r}")
    return problems


def accounting_problems(*, plain: Completion, streamed: Completion) -> list[str]:
    """finish_reason and usage that do not add up, on either delivery."""
    problems = []
    for side, c in (("stream", streamed), ("non-stream", plain)):
        if c.finish_reason not in FINISH_REASONS:
            problems.append(f"{side} finish_reason {c.finish_reason!r} is not one of {FINISH_REASONS}")
        if c.usage_completion_tokens is None:
            problems.append(f"{side} reports no usage.completion_tokens")
        elif c.usage_completion_tokens != len(c.token_ids) and not c.text_level:
            problems.append(f"{side} usage.completion_tokens={c.usage_completion_tokens} "
                            f"but {len(c.token_ids)} tokens returned")
    if streamed.stream_events is not None and streamed.token_ids and streamed.stream_events < 1:
        problems.append("stream returned tokens without any event")
    return problems


def stream_problems(*, plain: Completion, streamed: Completion) -> list[str]:
    return delivery_differences(plain=plain, streamed=streamed) + accounting_problems(plain=plain, streamed=streamed)


@pytest.mark.parametrize("with_stop", [False, True], ids=["plain", "stop-string"])
def test_stream_matches_non_stream(lean_prompt, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                                   calibration, eos_token_id, with_stop, findings):
    candidate.require("stream")
    req = Request(prompt_ids=fitted_prompts.ids(lean_prompt), max_tokens=suite_config.max_new_tokens,
                  temperature=0.0, request_id=f"stream-{lean_prompt.id}")
    judge_stream(req, lean_prompt.id, with_stop=with_stop, baseline=baseline, candidate=candidate,
                 tokenizer=tokenizer, suite_config=suite_config, calibration=calibration, eos_token_id=eos_token_id,
                 findings=findings)


@pytest.mark.check(chat.CHECK)
@pytest.mark.parametrize("with_stop", [False, True], ids=["plain", "stop-string"])
def test_chat_stream_matches_non_stream(chat_lean_prompt, baseline, candidate, tokenizer, fitted_prompts,
                                        suite_config, calibration, eos_token_id, with_stop, findings):
    """The chat shape: a streamed chat answer (delta.content) is the non-streamed chat answer."""
    chat.skip_without_chat(findings, candidate, candidate)
    candidate.require("stream")
    req = chat.chat_shape(chat_lean_prompt, tokenizer, fitted_prompts, max_tokens=suite_config.max_new_tokens,
                          request_id=f"chat-stream-{chat_lean_prompt.id}")
    with chat.chat_path(findings, candidate):
        judge_stream(req, chat_lean_prompt.id, with_stop=with_stop, baseline=baseline, candidate=candidate,
                     tokenizer=tokenizer, suite_config=suite_config, calibration=calibration,
                     eos_token_id=eos_token_id, findings=findings, check=chat.CHECK)


def judge_stream(req, prompt_id, *, with_stop, baseline, candidate, tokenizer, suite_config, calibration,
                 eos_token_id, findings, check: str = "streaming") -> None:
    """Send `req` plain and streamed (with a stop string from the plain answer when asked) and compare."""
    shape = "chat " if req.chat else ""
    plain = candidate.generate(req)
    if with_stop:
        stop = _stop_inside(plain, tokenizer)
        if stop is None:
            pytest.skip(f"not verified: no usable stop string in the output of prompt {prompt_id}")
        req = replace(req, stop=(stop,))
        plain = candidate.generate(req)
    streamed = candidate.generate(replace(req, stream=True, request_id=req.request_id + "-sse"))
    plain, streamed = aligned(plain, streamed, tokenizer)
    level = describe(plain, streamed)
    if is_text_level(plain, streamed):
        findings.measure("comparison", check=check, prompt_id=prompt_id, route=candidate.name, **level)
    problems = delivery_differences(plain=plain, streamed=streamed)
    verdict = None
    if problems:
        verdict = _classify_split(baseline, req, plain, streamed, tokenizer, calibration, eos_token_id)
        if verdict is not None and verdict.is_near_tie and suite_config.greedy_policy == "classify":
            findings.add(Finding(
                check=check, severity="near-tie", route=candidate.name, prompt_id=prompt_id,
                title=(f"candidate '{candidate.name}' stream and non-stream split at a near-tie "
                       f"(prompt {prompt_id})"),
                details={"diff": "\n".join(problems + [f"classification: {verdict.summary()}"]), **level,
                         "classification": verdict.to_details(), "prompt_ids": list(req.prompt_ids)}))
            problems = []
        elif verdict is not None:
            problems.append(f"first split classified against baseline '{baseline.name}': {verdict.summary()}")
    problems += accounting_problems(plain=plain, streamed=streamed)
    if req.chat:
        findings.cover(check, candidate.name, verified=True, ran={"chat streams": 1},
                       could_detect="a streamed chat answer (delta.content) that differs from the plain chat answer")
    if not problems:
        return
    findings.add(Finding(
        check=check, severity="bug", route=candidate.name, prompt_id=prompt_id,
        title=(f"candidate '{candidate.name}' streams a different {shape}answer than it returns (prompt {prompt_id})"
               + title_suffix(plain, streamed)),
        details={"diff": "\n".join(problems), "stop": list(req.stop), "prompt_ids": list(req.prompt_ids), **level,
                 "stream_events": streamed.stream_events,
                 "classification": verdict.to_details() if verdict is not None else None}))
    pytest.fail(f"{shape}prompt {prompt_id}: candidate '{candidate.name}' stream vs non-stream:\n" + "\n".join(problems),
                pytrace=False)


def _classify_split(baseline, req, plain, streamed, tokenizer, calibration, eos_token_id):
    """A token split between the deliveries is nondeterminism; classify it like a greedy divergence."""
    divergence = compare_greedy(baseline=plain, candidate=streamed, decode=tokenizer.decode)
    if divergence is None:
        return None
    return classify_divergence(baseline=baseline, prompt_ids=req.prompt_ids, divergence=divergence,
                               baseline_completion=plain, candidate_completion=streamed, max_tokens=req.max_tokens,
                               tau=calibration.get().tau, eos_token_id=eos_token_id, decode=tokenizer.decode)


def _stop_inside(completion: Completion, tokenizer) -> str | None:
    """A short piece of the output's middle, so the stop lands inside a speculative block."""
    tokens = completion.token_ids
    for position in range(len(tokens) // 3, len(tokens)):
        piece = tokenizer.decode([tokens[position]]).strip()
        if len(piece) >= 2 and piece.isprintable():
            return piece
    return None
