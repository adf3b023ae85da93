"""The chat request shape of the greedy, boundary and streaming checks (check family "chat").

Why: the motivating report answered the last user message of a chat in another request's
context, and it showed on the chat template path (/v1/chat/completions, multi-turn sessions),
which token-id prompts never touch. A chat check sends a prompt record's messages to both
routes (an HTTP route posts them, so the server applies its own template; an in-process route
renders them through its tokenizer's template) and judges the answers exactly like the
completion shape. A route without chat (Capabilities.chat, or a server whose chat endpoint is
missing) makes the chat variant "not verified: route lacks chat", recorded in the coverage
table, never a pass. A handful of chat prompts keeps the added time small.
Environment: none.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator, Sequence

import pytest

from spec_route_suite.embedded.corpus import render_chat
from spec_route_suite.routes.chat import chat_request
from spec_route_suite.prompts.prompt_set import chat_picks, prompt_set
from spec_route_suite.prompts.records import PromptRecord
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import CapabilityMissing

CHECK = "chat"
GREEDY_PROMPTS = 3     # chat prompts of the greedy chat shape
LEAN_PROMPTS = 1       # of the costlier boundary and streaming chat shapes
BOUNDARY_VARIANTS = ("plain", "stop_string")   # the others extend the prompt with output tokens: no chat shape
COULD_DETECT = ("a chat answer (messages through the route's chat template) that differs from the baseline's: "
                "a dropped or swapped last user message, a wrong template, a divergence on the chat path only")


def chat_records(suite: Any, n: int) -> list[PromptRecord]:
    """`n` chat prompts: the first of our `chat` category (none when --categories leaves chat out), or the
    user's prompts that carry messages, one class after another (MT-Bench is multi-turn: its followups are
    asked too, each after the baseline's answer)."""
    prompts = prompt_set(suite)
    return chat_picks(prompts.pool, n, user=prompts.user)


def next_turn(first: PromptRecord, current: PromptRecord, *, answer: str, turn: int) -> PromptRecord:
    """Turn `turn` + 1 of a multi-turn prompt: the conversation so far, the baseline's answer to it, and the next
    user question (both routes get the same conversation, so a later turn is judged on identical input)."""
    messages = current.messages + (("assistant", answer), ("user", first.followups[turn - 1]))
    return replace(current, id=f"{first.id}-turn{turn + 1}", messages=messages,
                   text=render_chat(messages, add_generation_prompt=True), followups=())


def lacking_chat(*handles: Any) -> str | None:
    """Why the chat shape cannot run on these routes (None when every one declares chat)."""
    for handle in handles:
        if not handle.capabilities.chat:
            why = handle.route.chat_unsupported_why or "the route declares no chat capability"
            return f"not verified: route '{handle.name}' lacks chat ({why})"
    return None


def skip_without_chat(findings, candidate, *handles: Any, reason: str | None = None) -> None:
    """Record the chat variant as not verified on `candidate` and skip, when a route lacks chat."""
    reason = reason or lacking_chat(*handles)
    if reason is None:
        return
    findings.cover(CHECK, candidate.name, verified=False, could_detect=COULD_DETECT, reason=reason)
    pytest.skip(reason)


def chat_shape(record: PromptRecord, tokenizer: Any, fitted_prompts: Any, *, max_tokens: int,
               request_id: str, routes: Sequence[Any] = ()) -> Request:
    """The record as a greedy chat request; skipped (not verified) when it does not fit the context whole (a chat
    prompt cannot be trimmed without changing its messages), as rendered here and as each of `routes` renders it:
    a server applies its own chat template, which may be longer than ours (its count comes from the server, so
    call this inside `chat_path`: a server that refuses chat says so there)."""
    req = chat_request(tokenizer, record.messages, max_tokens=max_tokens, request_id=request_id)
    why = fitted_prompts.fit.misfit(req, routes)
    if why:
        pytest.skip(f"not verified: chat prompt {record.id} does not fit whole: {why}")
    return req


@contextmanager
def chat_path(findings, candidate) -> Iterator[None]:
    """A route whose chat endpoint turns out to be missing (CapabilityMissing "chat" from its first chat
    request) skips the check as not verified, like a route that declares no chat."""
    try:
        yield
    except CapabilityMissing as exc:
        if exc.capability != "chat":
            raise
        skip_without_chat(findings, candidate, reason=f"not verified: route '{exc.route}' lacks chat ({exc})")
