"""The distribution check on the real embedded tiny models: the adapters are exact and A/A runs stay quiet."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spec_route_suite.equivalence.distribution import (GRID, RouteArm, RouteScorer, gate_level, position_entropies, run_check,
                                      select_prompts, setting_alpha)
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.planner import plan_budget
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.fixtures.prompts.encode import encode_prompt
from spec_route_suite.fixtures.prompts.records import load_prompt_set
from spec_route_suite.fixtures.routes.base import Request
from spec_route_suite.fixtures.routes.loop import BackgroundLoop
from spec_route_suite.fixtures.routes.registry import build_route
from spec_route_suite.fixtures.routes.spec import default_baseline
from spec_route_suite.fixtures.session import RouteHandle

ALPHA = 0.01
PLAN = SequentialPlan()
TOKENS = 5
AA_RUNS = 3  # route verdicts (three grid settings each) on the real models; ~15 s of CPU each, batched on both arms


@pytest.fixture(scope="module")
def hf():
    """Two handles on the transformers AR baseline (an A/A pair) and the prompt ids."""
    import torch
    torch.set_num_threads(1)
    loop = BackgroundLoop()
    spec = default_baseline()
    route = build_route(spec)
    handle = RouteHandle(route, spec, loop, 300)
    records = load_prompt_set()
    ids = [encode_prompt(route.tokenizer, r.text) for r in records]
    yield handle, ids, len(route.tokenizer)
    loop.close()


def test_batched_scoring_equals_the_routes_own_teacher_forcing(hf):
    handle, ids, vocab = hf
    scorer = RouteScorer(handle, ids[:1], vocab=vocab)
    continuations = [(30, 31, 32), (40,), (50, 51)]
    batched = scorer.score_many(0, continuations)
    for cont, rows in zip(continuations, batched):
        own = handle.score(ids[0], cont, vocab)
        for row, tokens in zip(rows, own):
            assert row[tokens.token_id] == pytest.approx(tokens.logprob, abs=1e-4)
    assert scorer.full_vocabulary()


def test_batched_sampling_matches_one_request_at_a_time(hf):
    """The batched AR path used for fast baselines draws from the same distribution as single requests."""
    handle, ids, vocab = hf
    setting = GRID[1]
    selector = ProbabilityOracle(RouteScorer(handle, ids, vocab=vocab), setting)
    prompt = select_prompts([position_entropies(selector, i, TOKENS) for i in range(len(ids))], 1)[0]
    batched = RouteArm(handle, [ids[prompt]], tokens=TOKENS).draw(0, setting, 300, seed=1)
    single = [handle.generate(Request(prompt_ids=ids[prompt], max_tokens=TOKENS, temperature=setting.temperature,
                                      top_p=setting.top_p, top_k=setting.top_k, seed=10_000 + i)).token_ids
              for i in range(100)]
    from spec_route_suite.equivalence.stats.chisquare import two_sample_chisquare
    from spec_route_suite.equivalence.stats.partition import build_partition
    part = build_partition(batched + [tuple(s) for s in single], max_depth=TOKENS)
    result = two_sample_chisquare([np.vstack([part.counts(batched), part.counts(single)])])
    assert result.pvalue > 1e-3, (result, part.describe())


def test_aa_false_alarms_on_the_real_tiny_models(hf):
    """The baseline against itself with independent seeds: the whole family, every grid setting."""
    handle, ids, vocab = hf
    prompts = 3
    chosen = {}
    for setting in GRID:
        selector = ProbabilityOracle(RouteScorer(handle, ids, vocab=vocab), setting)
        chosen[setting] = [ids[i] for i in select_prompts([position_entropies(selector, i, TOKENS)
                                                          for i in range(len(ids))], prompts)]
    budget = plan_budget(detect_tv=0.2, level=gate_level(ALPHA, PLAN), power=0.9, prompts=prompts, tokens=TOKENS,
                         inflation=PLAN.inflation)
    alarms = 0
    for run in range(AA_RUNS):
        failed = False
        for setting in GRID:
            prompt_ids = chosen[setting]
            oracle = ProbabilityOracle(RouteScorer(handle, prompt_ids, vocab=vocab), setting)
            result = run_check(baseline=RouteArm(handle, prompt_ids, tokens=TOKENS),
                               candidate=RouteArm(handle, prompt_ids, tokens=TOKENS), prompts=prompts,
                               setting=setting, budget=budget, alpha=setting_alpha(ALPHA), seed=run, oracle=oracle,
                               plan=PLAN)
            failed |= result.failed
        alarms += failed
    print(f"\nreal tiny models A/A: {alarms}/{AA_RUNS} route verdicts failed (alpha {ALPHA})")
    assert alarms <= int(stats.binom.isf(0.005, AA_RUNS, ALPHA))


def test_prompt_choice_covers_the_first_token_and_the_bonus_position():
    scores = [[3.0, 0.1, 0.1, 0.1, 0.0], [0.2, 0.1, 0.1, 0.1, 2.5], [1.0, 1.0, 1.0, 1.0, 1.0], [0.0] * 5]
    assert select_prompts(scores, 2) == [0, 1]
    assert select_prompts(scores, 3) == [0, 1, 2]
    assert select_prompts(None, 3, categories=["math", "math", "code", "chat"]) == [0, 2, 3]
