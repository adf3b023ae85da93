"""Fixtures of the stressor modules: the load budget, the canary workload and its serial greedy references.

With the user's prompts (`--prompts`) the task slots of the pool carry them (stressors/canary.py `padding`):
the canary conversations stay the mixing detector's instrument, the user's prompts are the load around them.
The workload is sized into the pair's context (spec_route_suite/prompts/fit.py): every prompt plus
the stressors' max_tokens fits both routes; a context too small for the shortest canary
conversation ends the run as a configuration error (exit 4) naming the route.
Half of the conversations are chat items when both routes declare chat: sent as messages, so on an
HTTP route the server's chat template builds them (the path of the motivating report).
The references are the candidate's own outputs with one request at a time: every
concurrent run must reproduce them token for token. They are computed once per worker
and candidate (RouteHandle memoises greedy requests). `stress_control` is the baseline's side of each
stressor: its own serial references, so the same load can be run on it (stressors/control.py).
"""
from __future__ import annotations

import random

import pytest

from spec_route_suite.routes.chat import chat_request
from spec_route_suite.routes.errors import CapabilityMissing, RouteError
from spec_route_suite.prompts.prompt_set import prompt_set
from spec_route_suite.stressors.canary import (MAX_PROMPT_TOKENS, WorkItem, WorkloadDoesNotFit, build_workload,
                                               fitting_chats, serial_references)
from spec_route_suite.stressors.control import LoadControl
from spec_route_suite.stressors.driver import budget_for

CHAT_SHARE = 0.5   # of the canary conversations, sent as chat requests (multi-turn sessions, shared prefix)
STRESS_MAX_TOKENS = 48  # recall answers end within ~16 tokens; code and JSON within ~40


@pytest.fixture(scope="session")
def stress_budget(candidate, suite_config):
    budget = budget_for(batched=candidate.capabilities.concurrency, levels=suite_config.concurrency_levels,
                        stress_requests=suite_config.stress_requests_for(candidate.name))
    if not budget.levels:
        pytest.skip("not verified: no concurrency level above 1 configured (--concurrency)")
    return budget


@pytest.fixture(scope="session")
def stress_max_tokens(suite_config) -> int:
    return min(suite_config.max_new_tokens, STRESS_MAX_TOKENS)


@pytest.fixture(scope="session")
def stress_prompt_tokens(context_fit, stress_max_tokens) -> int:
    """The most prompt tokens a stressor request may carry: the pair's room, or a default when unknown."""
    room = context_fit.room(stress_max_tokens)
    return MAX_PROMPT_TOKENS if room is None else room


@pytest.fixture(scope="session")
def sized_workload(tokenizer, context_fit, stress_prompt_tokens, stress_max_tokens, report_note):
    """build_workload(size=, seed=, ...) sized into the pair's context; what sizing cut is noted in the report."""
    def build(*, size: int, seed: int, **options):
        try:
            workload = build_workload(tokenizer, size=size, seed=seed, max_prompt_tokens=stress_prompt_tokens,
                                      **options)
        except WorkloadDoesNotFit as exc:
            raise context_fit.too_small(needed=exc.needed, max_tokens=stress_max_tokens,
                                        what="the stressors' canary conversations") from None
        if workload.cut and not options.get("nonce"):  # the prefix-cache variants are cut alike, by the same room
            report_note(f"stressors: canary workload sized to {context_fit.describe()}: {workload.sizing()}")
        return workload
    return build


@pytest.fixture(scope="session")
def stress_padding(suite_config, fitted_prompts, stress_max_tokens) -> tuple[WorkItem, ...]:
    """The user's prompts as load items (none with our fixture prompts), sized for the stressors' max_tokens,
    in a seeded order so every pool size takes a varied sample of the classes."""
    prompts = prompt_set(suite_config)
    if not prompts.user:
        return ()
    records = list(prompts.records)
    random.Random(f"padding-{suite_config.seed}").shuffle(records)
    return tuple(WorkItem(key=r.id, shape="user", length="user", prompt_text=r.text,
                          prompt_ids=fitted_prompts.ids(r, stress_max_tokens), answer=r.answer or "")
                 for r in records)


@pytest.fixture(scope="session")
def stress_chat(baseline, candidate, tokenizer, report_note) -> bool:
    """Do both routes serve chat? Declared, and answered by one one-token chat request each (a server may lack
    the endpoint its adapter assumes; a broken chat answer is the chat checks' finding, not the stressors')."""
    probe = chat_request(tokenizer, [("user", "Hi.")], max_tokens=1, request_id="chat-probe")
    for handle in (baseline, candidate):
        if not handle.capabilities.chat:
            return False
        try:
            handle.generate(probe)
        except RouteError as exc:
            if not isinstance(exc, CapabilityMissing):
                report_note(f"stressors: no chat sessions for '{candidate.name}': the chat probe on "
                            f"'{handle.name}' failed: {exc.describe()[:200]}")
            return False
    return True


@pytest.fixture(scope="session")
def stress_workload(sized_workload, stress_budget, suite_config, stress_chat, baseline, candidate, context_fit,
                    stress_max_tokens, report_note, stress_padding):
    """The canary pool; a share of its conversations are chat items when both routes serve chat. A chat item
    either server renders too long for the context (its template is longer than ours) is left out, noted."""
    workload = sized_workload(size=stress_budget.pool, seed=suite_config.seed,
                              chat_share=CHAT_SHARE if stress_chat else 0.0, padding=stress_padding)
    workload, too_long = fitting_chats(workload, (baseline, candidate), context_fit, stress_max_tokens)
    if too_long:
        report_note(f"stressors: {len(too_long)} chat conversation(s) left out for '{candidate.name}': the servers "
                    f"render them longer than {context_fit.describe()} holds with {stress_max_tokens} new tokens "
                    f"(e.g. {next(iter(too_long))}: {next(iter(too_long.values()))})")
    return workload


@pytest.fixture(scope="session")
def stress_references(candidate, stress_workload, stress_max_tokens):
    return serial_references(candidate.generate, stress_workload, max_tokens=stress_max_tokens)


@pytest.fixture(scope="session")
def stress_baseline_references(baseline, stress_workload, stress_max_tokens):
    """The baseline's own serial outputs of the workload, or None when it serialises requests (no load control)."""
    if not baseline.capabilities.concurrency:
        return None
    return serial_references(baseline.generate, stress_workload, max_tokens=stress_max_tokens)


@pytest.fixture
def stress_control(baseline, stress_baseline_references, suite_config):
    """One stressor's baseline side (stressors/control.py): the same load, judged against the baseline's own
    serial outputs."""
    return LoadControl(baseline, stress_baseline_references, alpha=suite_config.alpha)
