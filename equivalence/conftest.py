"""Fixtures shared by the equivalence checks: lean prompt picks.

Checks that are costly per prompt (boundary sweeps, logprobs, streaming, seeds) run on a
few "lean" prompts, one per category in order, instead of the whole prompt set, so the
default suite stays inside its time budget. The chat shape (equivalence/chat.py) takes a few chat
prompts (`chat_prompt`, `chat_lean_prompt`). Every check sends a record's `fitted_prompts`
ids (sized into the pair's context, fixtures/prompts/fit.py), never the record's text. The A/A
calibration fixture lives in the plugin: the stressors judge near-ties with the same tau.
Environment: none.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.chat import GREEDY_PROMPTS, LEAN_PROMPTS as CHAT_LEAN_PROMPTS, chat_records
from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.fixtures.config import SUITE_CONFIG_KEY
from spec_route_suite.fixtures.prompts.records import load_prompt_set

LEAN_PROMPTS = 2


def _categories(config: pytest.Config) -> tuple[str, ...]:
    return config.stash[SUITE_CONFIG_KEY].categories


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lean_prompt" in metafunc.fixturenames:
        prompts = pick_lean(load_prompt_set(_categories(metafunc.config)), LEAN_PROMPTS)
        metafunc.parametrize("lean_prompt", prompts, ids=[p.id for p in prompts])
    for name, n in (("chat_prompt", GREEDY_PROMPTS), ("chat_lean_prompt", CHAT_LEAN_PROMPTS)):
        if name in metafunc.fixturenames:
            prompts = chat_records(_categories(metafunc.config), n)
            metafunc.parametrize(name, prompts, ids=[p.id for p in prompts])


@pytest.fixture(scope="session")
def eos_token_id(tokenizer) -> int | None:
    return getattr(tokenizer, "eos_token_id", None)
