"""The distribution check on the real embedded tiny models: the adapters are exact and A/A runs stay quiet."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from spec_route_suite.equivalence.distribution import GRID
from spec_route_suite.equivalence.distribution_prompts import greedy_path_rows, position_entropies, select_prompts
from spec_route_suite.equivalence.distribution_routes import RouteArm, RouteScorer
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Request, RouteWrapper
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import default_baseline
from spec_route_suite.session import RouteHandle

ALPHA = 0.01
PLAN = SequentialPlan()
TOKENS = 5
AA_RUNS = 200   # route verdicts (every grid setting each) on the real models: enough to fail a 5% false-alarm rate
AA_TOKENS = 3


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
    prompt = select_prompts(_entropies(handle, ids, vocab, setting), 1)[0]
    batched = RouteArm(handle, [ids[prompt]], tokens=TOKENS).draw(0, setting, 300, seed=1)
    single = [handle.generate(Request(prompt_ids=ids[prompt], max_tokens=TOKENS, temperature=setting.temperature,
                                      top_p=setting.top_p, top_k=setting.top_k, seed=10_000 + i)).token_ids
              for i in range(100)]
    from spec_route_suite.equivalence.stats.chisquare import two_sample_chisquare
    from spec_route_suite.equivalence.stats.partition import build_partition
    part = build_partition(batched + [tuple(s) for s in single], max_depth=TOKENS)
    result = two_sample_chisquare([np.vstack([part.counts(batched), part.counts(single)])])
    assert result.pvalue > 1e-3, (result, part.describe())


def aa_bound(runs: int, alpha: float) -> int:
    """The most false alarms a procedure at level `alpha` shows in `runs` A/A verdicts, but for a 0.5% chance."""
    return int(stats.binom.isf(0.005, runs, alpha))


def test_the_aa_bound_fails_a_procedure_at_five_percent():
    """The assertion below is one a miscalibrated procedure fails: at a true false-alarm rate of 5% (five times
    alpha) it fails with probability 0.88; a calibrated one passes with probability above 0.995."""
    bound = aa_bound(AA_RUNS, ALPHA)
    assert stats.binom.sf(bound, AA_RUNS, 0.05) > 0.85 and stats.binom.sf(bound, AA_RUNS, ALPHA) < 0.005


def test_aa_false_alarms_on_the_real_tiny_models(hf):
    """The null the default run faces, on the real models: the AR baseline against the correct speculative engine
    (the reference engine, same weights), the whole family at every grid setting in the scoring design (the
    baseline scores; its samples are the premise control, the two-sample test the fallback), AA_RUNS route verdicts
    on independent seeds at alpha 0.01, planned for TV 0.2 (the CI budget) on the shortest prompt of highest entropy
    (3 tokens: one verdict costs about a second). At most aa_bound(AA_RUNS, alpha) false alarms."""
    from spec_route_suite.equivalence.exact_verdict import ExactBaseline, verdict
    from spec_route_suite.routes.spec import parse_route_uri
    handle, ids, vocab = hf
    spec = parse_route_uri("reference", "reference:", base=Path(__file__).resolve().parent.parent, environ={})
    speculative = RouteHandle(build_route(spec), spec, handle.loop, 300)
    short = sorted(range(len(ids)), key=lambda i: len(ids[i]))[:20]
    prompt = [ids[short[select_prompts(_entropies(handle, [ids[i] for i in short], vocab, GRID[0], AA_TOKENS),
                                       1)[0]]]]
    exact = ExactBaseline(RouteScorer(handle, prompt, vocab=vocab), stop_ids=(handle.route.tokenizer.eos_token_id,))
    alarms = 0
    for run in range(AA_RUNS):
        results = verdict(exact, RouteArm(handle, prompt, tokens=AA_TOKENS), RouteArm(speculative, prompt,
                          tokens=AA_TOKENS), prompts=1, tokens=AA_TOKENS, seed=run, detect_tv=0.2, alpha=ALPHA,
                          plan=PLAN)
        alarms += results[-1].failed
    speculative.close()
    low, high = stats.binomtest(alarms, AA_RUNS).proportion_ci(0.95)
    print(f"\nreal tiny models, AR baseline vs the correct speculative engine: {alarms}/{AA_RUNS} route verdicts "
          f"failed (95% CI {low:.3f}-{high:.3f}; alpha {ALPHA}, bound {aa_bound(AA_RUNS, ALPHA)})")
    assert alarms <= aa_bound(AA_RUNS, ALPHA), f"{alarms} false alarms in {AA_RUNS} A/A verdicts at alpha {ALPHA}"


def _entropies(handle, ids, vocab, setting, tokens=TOKENS):
    scorer = RouteScorer(handle, ids, vocab=vocab)
    paths = [greedy_path_rows(handle, p, tokens, lambda prompt, path, i=i: scorer.score_many(i, [path])[0])
             for i, p in enumerate(ids)]
    return [position_entropies(rows, path, setting, tokens) for path, rows in paths]


def test_prompt_choice_covers_the_first_token_and_the_bonus_position():
    scores = [[3.0, 0.1, 0.1, 0.1, 0.0], [0.2, 0.1, 0.1, 0.1, 2.5], [1.0, 1.0, 1.0, 1.0, 1.0], [0.0] * 5]
    assert select_prompts(scores, 2) == [0, 1]
    assert select_prompts(scores, 3) == [0, 1, 2]
    assert select_prompts(None, 3, categories=["math", "math", "code", "chat"]) == [0, 2, 3]


class _NoTeacherForcing(RouteWrapper):
    """The hf route seen as a server that cannot teacher-force but returns top logprobs of what it generates
    (llama.cpp's n_probs, an OpenAI server's top_logprobs)."""

    @property
    def capabilities(self):
        from dataclasses import replace
        return replace(self.inner.capabilities, prompt_logprobs=False)


@pytest.mark.parametrize("teacher_forcing", [True, False], ids=["prompt_logprobs", "greedy-per-prefix"])
def test_top_k_scores_equal_the_whole_vocabulary_rows_on_their_tokens(hf, teacher_forcing):
    """TopScorer through the Route protocol: each prefix's top-20 raw logprobs are the whole-vocabulary rows'
    20 largest entries, whether they come from teacher forcing or from one greedy request per prefix."""
    from spec_route_suite.equivalence.distribution_plan import BaselineScores
    from spec_route_suite.equivalence.distribution_routes import TopScorer
    handle, ids, vocab = hf
    if not teacher_forcing:
        handle = RouteHandle(_NoTeacherForcing(handle.route), handle.spec, handle.loop, 300)
    top = TopScorer(handle, ids[:1], vocab=vocab, k=20, depth=TOKENS)
    path = handle.generate(Request(prompt_ids=ids[0], max_tokens=TOKENS)).token_ids
    whole = RouteScorer(handle, ids[:1], vocab=vocab).score_many(0, [tuple(path)])[0]
    rows = top.path_rows(0, path)
    for got, want in zip(rows, whole):
        kept = np.isfinite(got)
        assert kept.sum() == 20 and set(np.flatnonzero(kept)) == set(np.argsort(-want)[:20])
        np.testing.assert_allclose(got[kept], want[kept], atol=1e-4)
    assert top.requests == 1   # a path's rows in one request either way
    scores = BaselineScores(top=top)
    assert [scores.design_why(s)[0] for s in GRID] == ["scoring", "two-sample", "two-sample", "scoring"]
    assert "top 20 only" in scores.design_why(GRID[2])[1]


def test_reference_engine_scores_every_token_in_one_batch(hf):
    """The reference engine as a baseline gives whole-vocabulary rows too (its `score_rows` hook), equal to its own
    teacher forcing; a route with neither a hook nor logprobs up to the vocabulary is never asked for them."""
    from pathlib import Path
    from spec_route_suite.routes.spec import parse_route_uri
    handle, ids, vocab = hf
    spec = parse_route_uri("reference", "reference:", base=Path("."))
    ref = RouteHandle(build_route(spec), spec, handle.loop, 300)
    scorer = RouteScorer(ref, ids[:1], vocab=vocab)
    assert scorer.full_vocabulary()
    rows = scorer.score_many(0, [(30, 31, 32)])[0]
    own = ref.score(ids[0], (30, 31, 32), vocab)
    for row, tokens in zip(rows, own):
        assert row[tokens.token_id] == pytest.approx(tokens.logprob, abs=1e-4)
    ref.close()
    capped = RouteHandle(_NoTeacherForcing(handle.route), handle.spec, handle.loop, 300)
    capped.route.hidden = ("score_rows",)   # a server: teacher forcing capped at its top logprobs, no batched hook
    assert not RouteScorer(capped, ids[:1], vocab=vocab).full_vocabulary()


def test_a_look_drawn_in_one_batch_gives_each_prompt_its_own_samples():
    """`draw_many` puts every prompt's share of the reference engine's batch together (a bigger batch is cheaper
    per sample); each row keeps its seed, so each prompt gets exactly what its own `draw` gives it, pooled
    n-choice share included."""
    import torch
    torch.set_num_threads(1)
    from spec_route_suite.routes.spec import parse_route_uri
    loop = BackgroundLoop()
    try:
        spec = parse_route_uri("candidate", "reference:", base=Path(__file__).resolve().parent.parent, environ={})
        route = build_route(spec)
        handle = RouteHandle(route, spec, loop, 300)
        by_length = sorted((encode_prompt(route.tokenizer, r.text) for r in load_prompt_set()), key=len)
        ids = [by_length[0], by_length[-1], by_length[1]]   # a short, the longest, a short: two length groups
        setting = GRID[1]
        one_by_one = RouteArm(handle, ids, tokens=TOKENS, n_choices=4)
        calls, own = [], route.sample_many

        async def spied(jobs):
            calls.append(len(jobs))
            return await own(jobs)
        route.sample_many = spied
        together = RouteArm(handle, ids, tokens=TOKENS, n_choices=4)
        jobs = [(prompt, 24, 100 + prompt) for prompt in range(len(ids))]
        expected = [one_by_one.draw(prompt, setting, n, seed) for prompt, n, seed in jobs]
        got = together.draw_many(setting, jobs)
        assert got == expected and all(len(samples) == 24 for samples in got)
        assert calls == [2 * len(ids)]   # one call: each prompt's pooled and single shares
        assert together.pooled == one_by_one.pooled > 0 and together.requests == one_by_one.requests
        assert len({s for samples in got for s in samples}) > len(ids)   # samples, not one sequence per prompt
    finally:
        loop.close()


def test_sample_many_batches_rows_of_similar_prompt_length():
    """A batch's KV is padded to its longest row: short prompts are not batched with a 440-token one."""
    from spec_route_suite.reference.route import _length_groups
    rows = [Request(prompt_ids=(1,) * length, max_tokens=1) for length in (30, 440, 32, 100, 31, 430)]
    assert _length_groups(rows, 8) == [[0, 4, 2], [3], [5, 1]]
    assert _length_groups(rows, 2) == [[0, 4], [2], [3], [5, 1]]
