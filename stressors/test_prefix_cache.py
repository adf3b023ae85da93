"""Prefix cache with speculation: a request that hits the cache must give the cold run's output.

Bug class: the second request that hits the prefix cache crashes the engine or answers
wrongly (sglang#19796, sglang#32459). Each run uses a shared prefix no cache has seen
(a fresh session nonce in the system message). The first variant is sent cold; then the
same prompt again (full hit), the other variants sharing the prefix (partial hits), all
of them again serially and in one burst (full hits, batched). Every repeat must equal the
prompt's first output; each variant's first output, computed with a warm prefix, must
equal the baseline's first output for it. The route must still be healthy.
A baseline that batches runs the same sequence (stressors/control.py): its first outputs are the parity
reference, and repeats that differ on it too make the candidate's cache-dependent outputs engine behaviour,
charged only by their excess; a baseline that does not sends each variant alone, in the same order. Either way
the reference is a cold computation for the first variant only, and for the others only on a baseline without a
prefix cache: on one with its own cache they come after the shared prefix was cached there too, so a cache bug
both engines share is not seen by this comparison (the summary finding says which reference it had).
"""
from __future__ import annotations

import secrets

import pytest

from spec_route_suite.stressors.control import record
from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.prefix_cache import CHECK, PrefixCacheCheck

pytestmark = pytest.mark.check("prefix-cache")


def test_cache_hits_give_the_cold_output(candidate, baseline, tokenizer, sized_workload, stress_budget, stress_max_tokens,
                                         suite_config, near_tie_policy, stress_control, findings):
    nonce = secrets.token_hex(3)
    variants = sized_workload(size=stress_budget.prefix_variants, seed=suite_config.seed + 7919, task_share=0.0,
                              nonce=nonce)
    cache = PrefixCacheCheck(LoadPair(candidate, baseline, tokenizer, near_tie_policy, stress_max_tokens), variants,
                             nonce=nonce, level=stress_budget.batch(max(stress_budget.levels)), control=stress_control)
    cache.send(findings)
    comparison = cache.comparison()
    charged = record(findings, comparison, check=CHECK, control=stress_control, candidate=candidate,
                     examples=[label for *_, label in cache.theirs.changed] if cache.theirs else [])
    cache.judge(charged=charged)
    healthy = candidate.health()
    cache.record(findings, comparison, healthy=healthy, budget=stress_budget)
    failing = cache.failing()
    if failing or not healthy:
        pytest.fail(f"candidate '{candidate.name}' vs baseline '{baseline.name}': "
                    + "; ".join(failing[:5] or ["unhealthy after cache hits"]), pytrace=False)
