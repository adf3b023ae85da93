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
ids is compared at text level (spec_route_suite/routes/textlevel.py): streamed and plain text, finish
and usage, without the usage-equals-token-count check (its ids are re-derived from text).
Text and ids are judged apart: a stream whose ids are incomplete (`Completion.id_gap`, or a text-level
stream beside an id-level plain answer) with equal text is no "different answer": its `text` part is verified,
and its ids are judged against the baseline's stream of the same request: the same gap there (the same ids left
out, at the same places) is an engine note, none there or one elsewhere is a finding (the candidate drops what its
engine delivers: llama.cpp's draft-simple streams carry logprob entries, where its ids are, only for tokens sampled
outside draft verification), and a baseline that cannot stream leaves the `ids` part "not verified" (why).
A difference the baseline's own two deliveries of the request show too is excused only when it is the same
difference, kind, place and piece (equivalence/stream_edits.py): a baseline differing in finish_reason does not
excuse a token duplicated in the candidate's answer. Each stream's evidence is what its two deliveries had
to agree on (tokens, or characters): none is "not verified", never a pass. The accounting rules (usage, finish_reason, stream events; equivalence/rules.py)
are judged against the baseline's own plain and streamed answers to the same requests.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.streaming import judge_stream
from spec_route_suite.routes.base import Request

pytestmark = pytest.mark.check("streaming")



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
    with chat.chat_path(findings, candidate):
        req = chat.chat_shape(chat_lean_prompt, tokenizer, fitted_prompts, max_tokens=suite_config.max_new_tokens,
                              request_id=f"chat-stream-{chat_lean_prompt.id}", routes=(candidate,))
        judge_stream(req, chat_lean_prompt.id, with_stop=with_stop, baseline=baseline, candidate=candidate,
                     tokenizer=tokenizer, suite_config=suite_config, calibration=calibration,
                     eos_token_id=eos_token_id, findings=findings, check=chat.CHECK)
