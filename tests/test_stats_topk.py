"""Exact probabilities from top-K logprobs: where they exist (top_k <= K, or T=1 untruncated) and nowhere else."""
from __future__ import annotations

import numpy as np
import pytest

from spec_route_suite.equivalence.stats.topk import TopSource, top_inexact_why
from spec_route_suite.equivalence.stats.warp import SamplingSetting, processed_probs

K = 20


def _row(seed: int, vocab: int = 64) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(0, 2.5, vocab)
    return logits - np.log(np.exp(logits).sum())


def _top(row: np.ndarray, k: int = K) -> np.ndarray:
    kept = np.full_like(row, -np.inf)
    best = np.argsort(-row)[:k]
    kept[best] = row[best]
    return kept


@pytest.mark.parametrize("setting", [SamplingSetting("k20", 1.6, top_k=20, min_p=0.05),
                                     SamplingSetting("k5p", 0.7, top_p=0.9, top_k=5), SamplingSetting("t1", 1.0)])
def test_top_k_rows_give_the_processed_distribution_exactly_where_they_can(setting):
    assert top_inexact_why(setting, K) == ""
    first, second = int(np.argmax(_row(1))), int(np.argmax(_row(2)))   # a path through returned tokens
    rows = {(0, ()): _row(1), (0, (first,)): _row(2)}
    source = TopSource(lambda prompt, prefix: _top(rows[(prompt, prefix)]), setting, K)
    for (prompt, prefix), row in rows.items():
        exact = processed_probs(row, setting)
        got = source.next_probs(prompt, prefix)
        returned = np.isfinite(_top(row))
        np.testing.assert_allclose(got[returned], exact[returned], rtol=1e-12, atol=1e-15)
        if setting.top_k:
            assert got.sum() == pytest.approx(1.0)
        else:   # T=1 untruncated: the tokens outside the top K are one lump of known mass, left to "other"
            assert got.sum() == pytest.approx(1 - np.exp(row[~returned]).sum())
    assert source.prefix_prob(0, (first, second)) == pytest.approx(processed_probs(_row(1), setting)[first]
                                                                   * processed_probs(_row(2), setting)[second])


@pytest.mark.parametrize("setting", [SamplingSetting("T1.5", 1.5), SamplingSetting("k50", 0.7, top_p=0.9, top_k=50),
                                     SamplingSetting("p", 1.0, top_p=0.9)])
def test_settings_that_need_the_whole_vocabulary_are_refused_with_the_reason(setting):
    why = top_inexact_why(setting, K)
    assert why.startswith(setting.name) and f"top {K}" in why
    with pytest.raises(ValueError):
        TopSource(lambda prompt, prefix: _row(0), setting, K)


def test_a_row_with_fewer_tokens_than_top_k_is_an_error_not_a_guess():
    source = TopSource(lambda prompt, prefix: _top(_row(0), k=5), SamplingSetting("k20", 1.6, top_k=20), K)
    with pytest.raises(ValueError, match="fewer than top_k"):
        source.next_probs(0, ())


def test_rows_of_the_whole_vocabulary_are_exact_at_every_setting():
    """A server asked for every token's logprob (llama.cpp's n_probs up to the vocabulary) scores any setting."""
    setting = SamplingSetting("T1.5", 1.5)
    assert top_inexact_why(setting, 64, vocab=64) == ""
    source = TopSource(lambda prompt, prefix: _row(4), setting, 64, vocab=64)
    np.testing.assert_allclose(source.next_probs(0, ()), processed_probs(_row(4), setting), rtol=1e-12)
