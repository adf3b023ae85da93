"""The spec-path check's evidence: which requests each family sends, and its answers read or its refusal recorded.

Why a module: equivalence/spec_path.py judges shares from counts alone; choosing the prompts (the chat family's
sized as the candidate's server renders them, the others cycled from the lean picks) and sending them is the
test's evidence, which a self-test sizes on its own server (tests/test_server_rendering.py). Environment: none.
"""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.delivery import is_dropped
from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.equivalence.spec_path import MAX_TOKENS, REQUESTS, Family
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.chat import chat_request
from spec_route_suite.routes.errors import CapabilityMissing, FeatureUnsupported

CHAT_CHOICES = 4   # chat prompts tried per one sent: those the server renders longer than the context are left out


def could_detect(family: Family) -> str:
    return f"speculation silently off for {family.name} requests (parity checks then never test its speculative path)"


def family_requests(family: Family, candidate, tokenizer, fitted_prompts,
                    suite_config) -> tuple[list[Request], list[Request]]:
    """(plain requests, the family's requests), greedy, on a few varied prompts. Chat requests are the first chat
    prompts that fit whole as the candidate's server renders them (its template may be longer than ours): a
    request it must refuse is never sent."""
    if family.name == "chat":
        sized = (chat_request(tokenizer, r.messages, max_tokens=MAX_TOKENS, request_id=f"spec-chat-{r.id}")
                 for r in chat.chat_records(suite_config, REQUESTS * CHAT_CHOICES))
        fitting = list(itertools.islice((r for r in sized if not fitted_prompts.fit.misfit(r, (candidate,))),
                                        REQUESTS))
        family_reqs = [dataclasses.replace(r, request_id=f"spec-chat-{n}-{r.request_id.removeprefix('spec-chat-')}")
                       for n, r in enumerate(cycled(fitting))]
        plain = [Request(prompt_ids=r.prompt_ids, max_tokens=MAX_TOKENS, request_id=f"spec-plain-chat-{n}")
                 for n, r in enumerate(family_reqs)]
        return plain, family_reqs
    records = cycled(pick_lean(prompt_pool(suite_config), REQUESTS))
    plain = [Request(prompt_ids=fitted_prompts.ids(r, max_tokens=MAX_TOKENS), max_tokens=MAX_TOKENS,
                     request_id=f"spec-plain-{n}-{r.id}") for n, r in enumerate(records)]
    return plain, [family.make(p) for p in plain]


def cycled(records: list) -> list:
    """REQUESTS records, the run's own cycled when it has fewer (each send is its own request: a distinct id)."""
    return [records[n % len(records)] for n in range(REQUESTS)] if records else []


def family_answers(findings, family: Family, candidate, family_reqs: list[Request]) -> list[Completion]:
    """The candidate's answers to the family's requests; a refusal (or an answer without what it asked for) is
    recorded on the coverage row and skips the test."""
    try:
        return [candidate.generate(r) for r in family_reqs]
    except (FeatureUnsupported, CapabilityMissing) as exc:
        if is_dropped(exc):   # an answer without its logprobs is no refusal: the logprobs check judges the drop
            why = (f"an answer to a {family.name} request came back without what it asked for, so its drafting was "
                   f"not read ({exc.describe()[:200]})")
            findings.cover("spec-path", candidate.name, verified=False, could_detect=could_detect(family), reason=why)
            pytest.skip(f"not verified: '{candidate.name}': {why}")
        findings.cover("spec-path", candidate.name, verified=False, supported=False, could_detect=could_detect(family),
                       reason=f"the route refuses {family.name} requests: {exc.describe()[:200]}")
        pytest.skip(f"not verified: '{candidate.name}' refuses {family.name} requests ({exc.describe()[:200]})")
