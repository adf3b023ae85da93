"""Fixtures shared by the equivalence checks: lean prompt picks.

Checks that are costly per prompt (boundary sweeps, logprobs, streaming, seeds) run on
LEAN_PROMPTS (2) "lean" prompts, the first of each class (source, category) in turn, not one per class
and not the whole prompt set, so the default suite stays inside its time budget. The chat shape
(equivalence/chat.py) takes a few chat prompts (`chat_prompt`, `chat_lean_prompt`). Every check sends a record's `fitted_prompts`
ids (sized into the pair's context, spec_route_suite/prompts/fit.py), never the record's text. The A/A
calibration fixture lives with the route fixtures (fixtures/route_fixtures.py): the stressors judge
near-ties with the same tau.
Environment: none.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.chat import GREEDY_PROMPTS, LEAN_PROMPTS as CHAT_LEAN_PROMPTS, chat_records
from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.stash import CONFIG_KEY

LEAN_PROMPTS = 2


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    suite = metafunc.config.stash[CONFIG_KEY]
    if "lean_prompt" in metafunc.fixturenames:
        prompts = pick_lean(prompt_pool(suite), LEAN_PROMPTS)
        metafunc.parametrize("lean_prompt", prompts, ids=[p.id for p in prompts])
    for name, n in (("chat_prompt", GREEDY_PROMPTS), ("chat_lean_prompt", CHAT_LEAN_PROMPTS)):
        if name in metafunc.fixturenames:
            prompts = chat_records(suite, n)
            metafunc.parametrize(name, prompts, ids=[p.id for p in prompts])


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory, pytestconfig):
    """A folder every xdist worker of this run sees (None without xdist): work one worker did, the others read."""
    if not hasattr(pytestconfig, "workerinput"):
        return None
    return tmp_path_factory.getbasetemp().parent


@pytest.fixture(scope="session")
def eos_token_id(tokenizer) -> int | None:
    return getattr(tokenizer, "eos_token_id", None)
