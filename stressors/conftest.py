"""Fixtures of the stressor modules: the load budget, the canary workload and its serial greedy references.

The references are the candidate's own outputs with one request at a time: every
concurrent run must reproduce them token for token. They are computed once per worker
and candidate (RouteHandle memoises greedy requests).
"""
from __future__ import annotations

import pytest

from spec_route_suite.stressors.canary import build_workload, serial_references
from spec_route_suite.stressors.driver import budget_for

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
def stress_workload(tokenizer, stress_budget, suite_config):
    return build_workload(tokenizer, size=stress_budget.pool, seed=suite_config.seed)


@pytest.fixture(scope="session")
def stress_references(candidate, stress_workload, stress_max_tokens):
    return serial_references(candidate.generate, stress_workload, max_tokens=stress_max_tokens)
