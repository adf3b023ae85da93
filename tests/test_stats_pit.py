"""The processed distribution matches the engines; PIT values are uniform exactly when they should be."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from spec_route_suite.equivalence.stats.pit import anderson_darling_pvalue, anderson_darling_statistic, uniformity
from spec_route_suite.equivalence.stats.positions import summarize
from spec_route_suite.equivalence.stats.warp import SamplingSetting, processed_probs
from spec_route_suite.equivalence.stats.ztests import TokenZTests

SETTINGS = [SamplingSetting("t1", 1.0), SamplingSetting("t07", 0.7, top_p=0.9, top_k=50),
            SamplingSetting("t13k5", 1.3, top_k=5), SamplingSetting("p05", 1.0, top_p=0.5)]


def _hf_probs(logits: torch.Tensor, setting: SamplingSetting) -> np.ndarray:
    scores = TemperatureLogitsWarper(setting.temperature)(None, logits)
    if setting.top_k:
        scores = TopKLogitsWarper(setting.top_k)(None, scores)
    if setting.top_p < 1:
        scores = TopPLogitsWarper(setting.top_p)(None, scores)
    return torch.softmax(scores, dim=-1).double().numpy()


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_processed_probs_match_transformers_warpers(setting):
    logits = torch.randn(16, 512, generator=torch.Generator().manual_seed(0)) * 3
    ours = processed_probs(torch.log_softmax(logits, -1).double().numpy(), setting)
    np.testing.assert_allclose(ours, _hf_probs(logits, setting), atol=1e-6)


@pytest.mark.parametrize("setting", SETTINGS, ids=[s.name for s in SETTINGS])
def test_processed_probs_match_the_reference_engine(setting):
    from spec_route_suite.reference.sampling import RowParams, process_logits
    logits = torch.randn(8, 512, generator=torch.Generator().manual_seed(1)) * 3
    params = RowParams.of([(setting.temperature, setting.top_k, setting.top_p)] * 8)
    theirs = process_logits(logits.unsqueeze(1), params)[:, 0].double().numpy()
    ours = processed_probs(torch.log_softmax(logits, -1).double().numpy(), setting)
    np.testing.assert_allclose(ours, theirs, atol=1e-6)


def test_anderson_darling_statistic_matches_scipy():
    u = np.random.default_rng(0).random(200)
    reference = stats.goodness_of_fit(stats.uniform, u, known_params={"loc": 0, "scale": 1}, statistic="ad",
                                      n_mc_samples=99, rng=np.random.default_rng(1))
    assert anderson_darling_statistic(u) == pytest.approx(reference.statistic, rel=1e-9)


@pytest.mark.parametrize("n", [10, 100, 2000])
def test_anderson_darling_pvalue_is_calibrated(n):
    """Marsaglia's formula, not a table: no floor at .001, no cap at .25 (the scipy pitfall)."""
    rng = np.random.default_rng(n)
    pvalues = np.array([anderson_darling_pvalue(anderson_darling_statistic(rng.random(n)), n) for _ in range(6000)])
    for alpha in (0.001, 0.01, 0.05, 0.5):
        assert abs(np.mean(pvalues <= alpha) - alpha) <= 4 * np.sqrt(alpha * (1 - alpha) / len(pvalues)) + 1e-3
    assert anderson_darling_pvalue(40.0, n) <= 6.1e-4 / n  # the documented conservative floor


def _sample_pits(rng, probs_rows, sample_rows, count):
    """PIT of tokens drawn from `sample_rows` judged against `probs_rows`."""
    u, z = [], TokenZTests()
    for probs, sampler in zip(probs_rows, sample_rows):
        summary = summarize(probs)
        for token in rng.choice(len(probs), size=count, p=sampler):
            u.append(summary.pit(int(token), rng.random()))
            z.add(summary, int(token))
    return np.array(u), z


def test_pit_is_uniform_and_ztests_quiet_for_correct_sampling():
    rng = np.random.default_rng(5)
    rows = [processed_probs(np.log(rng.dirichlet(np.full(50, 0.2))), SETTINGS[1]) for _ in range(40)]
    pvalues = []
    for _ in range(200):
        u, z = _sample_pits(rng, rows, rows, 5)
        result = uniformity(u)
        pvalues.append(min(result.ks_pvalue, result.ad_pvalue, z.top1.result().pvalue, z.loglik.result().pvalue))
    # four tests at .01 each: any of them below .01 at most ~4% of the time (+ binomial error)
    assert np.mean(np.array(pvalues) <= 0.01) <= 0.04 + 3 * np.sqrt(0.04 * 0.96 / 200)


def test_pit_and_ztests_catch_sharpening():
    rng = np.random.default_rng(6)
    logits = [np.log(rng.dirichlet(np.full(50, 0.5))) for _ in range(40)]
    rows = [processed_probs(l, SamplingSetting("t", 1.0)) for l in logits]
    sharp = [processed_probs(l, SamplingSetting("t", 0.8)) for l in logits]  # a draft temperature bug
    u, z = _sample_pits(rng, rows, sharp, 200)
    result = uniformity(u)
    assert result.ad_pvalue < 1e-6 and result.ks_pvalue < 1e-6
    assert z.top1.result().z > 3 and z.loglik.result().z > 3  # sharper: more top-1, higher log p


def test_support_violation_is_counted_not_hidden():
    summary = summarize(np.array([0.5, 0.5, 0.0]))
    z = TokenZTests()
    z.add(summary, 2)
    assert z.support_violations == 1 and z.top1.n == 0
    assert summary.pit(2, 0.3) == pytest.approx(1.0)
