"""Prefix bins: a partition of the sample space, independent of sample order, at most 10 cells, exact probabilities."""
from __future__ import annotations

import numpy as np
import pytest

from spec_route_suite.equivalence.stats.partition import MAX_CELLS, MIN_POOLED_COUNT, build_partition
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.equivalence.stats.synthetic import SyntheticModel

T1 = SamplingSetting("t1", 1.0)


@pytest.fixture(scope="module")
def sample():
    model = SyntheticModel(prompts=1, vocab=24, concentration=0.05)  # peaked: one first token dominates
    return model, model.arm("a", tokens=4).draw(0, T1, 3000, seed=7)


def test_cells_partition_the_sample_and_respect_the_limits(sample):
    _, seqs = sample
    part = build_partition(seqs, max_depth=4)
    counts = part.counts(seqs)
    assert counts.sum() == len(seqs)
    assert part.size <= MAX_CELLS
    kept = np.delete(counts, part.other) if part.other_into is None else counts
    assert (kept[kept > 0] >= MIN_POOLED_COUNT).all()
    assert max(len(prefix) for prefix, cell, _ in part.nodes if cell >= 0) > 2  # likely paths are followed deep


def test_bins_do_not_depend_on_sample_order(sample):
    _, seqs = sample
    shuffled = list(seqs)
    np.random.default_rng(0).shuffle(shuffled)
    assert build_partition(seqs, max_depth=4) == build_partition(shuffled, max_depth=4)


def test_exact_probabilities_match_frequencies(sample):
    model, seqs = sample
    part = build_partition(seqs, max_depth=4)
    start, trans = model.chain(0)

    def prefix_prob(prefix):
        prob = start[prefix[0]]
        for a, b in zip(prefix, prefix[1:]):
            prob *= trans[a, b]
        return prob

    probs = part.probabilities(prefix_prob)
    assert probs.sum() == pytest.approx(1.0)
    fresh = model.arm("b", tokens=4).draw(0, T1, 20000, seed=8)
    np.testing.assert_allclose(part.counts(fresh) / len(fresh), probs, atol=0.012)


def test_refining_keeps_a_first_token_shift_visible():
    """Remainders stay cells of their own, so bins deep in the trie still separate first tokens."""
    base = [(1, 2, 3)] * 300 + [(1, 2, 4)] * 200 + [(1, 5, 5)] * 100 + [(7, 7, 7)] * 400
    cand = [(1, 2, 3)] * 240 + [(1, 2, 4)] * 160 + [(1, 5, 5)] * 80 + [(7, 7, 7)] * 520
    part = build_partition(base + cand, max_depth=3)
    a, b = part.counts(base), part.counts(cand)
    tv = 0.5 * np.abs(a / a.sum() - b / b.sum()).sum()
    assert tv == pytest.approx(0.12)  # the whole first-token shift


def test_degenerate_samples():
    assert build_partition([], max_depth=3).counts([]).sum() == 0
    one = build_partition([(5,)] * 30, max_depth=3)
    assert one.counts([(5,)] * 30).max() == 30


def test_bins_from_probabilities_partition_the_space_with_their_exact_probabilities(sample):
    """Bins fixed from the scores alone: cells of mass >= min_prob, probabilities that sum to 1 and match a fresh
    sample's frequencies, nothing grown past a stop token, the same bins whatever was sampled."""
    from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
    from spec_route_suite.equivalence.stats.partition import probability_partition
    from spec_route_suite.equivalence.stats.synthetic import EOS
    model, _ = sample
    oracle = ProbabilityOracle(model, T1)
    part = probability_partition(lambda prefix: oracle.next_probs(0, prefix), max_depth=4, min_prob=0.01,
                                 stop_ids=[EOS])
    probs = part.probabilities(lambda prefix: oracle.prefix_prob(0, prefix))
    assert part.size <= MAX_CELLS and probs.sum() == pytest.approx(1.0)
    # every cell but "other" holds at least min_prob; when "other" was merged into the smallest cell, its own
    # slot (the last) is empty and no sample can land there
    dead = [part.cells] if part.other_into is not None else []
    assert (np.delete(probs, [part.other, *dead]) >= 0.01 - 1e-12).all()
    assert all(probs[i] == 0.0 for i in dead)
    assert not any(len(prefix) > 1 and prefix[-2] == EOS for prefix, _, _ in part.nodes)
    assert max(len(prefix) for prefix, cell, _ in part.nodes if cell >= 0) > 2   # likely paths are followed deep
    fresh = model.arm("b", tokens=4).draw(0, T1, 20000, seed=9)
    np.testing.assert_allclose(part.counts(fresh) / len(fresh), probs, atol=0.012)
    again = probability_partition(lambda prefix: oracle.next_probs(0, prefix), max_depth=4, min_prob=0.01,
                                  stop_ids=[EOS])
    assert again == part
