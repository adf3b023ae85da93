"""Holm (written here, not in scipy) and BH: hand-checked examples and their defining properties."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spec_route_suite.equivalence.stats.multiple import benjamini_hochberg, holm


def test_holm_matches_a_hand_worked_example():
    # m = 4, alpha = 0.05. Sorted p: .01 (x4 = .04 <= .05 reject), .02 (x3 = .06 > .05 stop).
    p = [0.04, 0.01, 0.03, 0.02]
    rejected, adjusted = holm(p, alpha=0.05)
    assert rejected.tolist() == [False, True, False, False]
    # adjusted: .01*4=.04, max(.04, .02*3=.06)=.06, max(.06, .03*2=.06)=.06, max(.06, .04*1)=.06
    np.testing.assert_allclose(adjusted, [0.06, 0.04, 0.06, 0.06])


def test_holm_step_down_rejects_more_than_bonferroni():
    # Bonferroni at .05/3 = .0167 rejects only .01; Holm then tests .02 at .05/2 = .025: rejected too.
    rejected, _ = holm([0.01, 0.02, 0.5], alpha=0.05)
    assert rejected.tolist() == [True, True, False]


def test_weighted_holm_gives_the_heavy_hypothesis_most_of_alpha():
    # weights .8/.2 at alpha .05: p/w = .05 and .1. Step 1 (remaining weight 1): .05 <= .05, rejected.
    # Step 2 (remaining weight .2): p/w = .1 <= .05/.2 = .25, rejected.
    rejected, adjusted = holm([0.04, 0.02], alpha=0.05, weights=[0.8, 0.2])
    assert rejected.tolist() == [True, True]
    np.testing.assert_allclose(adjusted, [0.05, 0.05])
    rejected, _ = holm([0.045, 0.02], alpha=0.05, weights=[0.8, 0.2])
    assert rejected.tolist() == [False, False]  # .045/.8 = .056 and .02/.2 = .1, both above .05


def test_holm_controls_familywise_error_under_the_global_null():
    rng = np.random.default_rng(0)
    p = rng.random((20000, 8))
    any_rejected = np.mean([holm(row, alpha=0.05, weights=[4, 1, 1, 1, 1, 1, 1, 1])[0].any() for row in p])
    assert any_rejected <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(p))


def test_holm_rejects_bad_weights():
    with pytest.raises(ValueError):
        holm([0.1, 0.2], alpha=0.05, weights=[1, 0])


def test_bh_matches_a_hand_worked_example_and_scipy():
    # m = 5, q = .05: sorted p .001 .008 .039 .041 .042; thresholds .01 .02 .03 .04 .05.
    # The largest i with p_(i) <= i q / m is 5 (.042 <= .05): all five are discoveries.
    p = [0.041, 0.001, 0.042, 0.008, 0.039]
    discoveries, adjusted = benjamini_hochberg(p, q=0.05)
    assert discoveries.all()
    np.testing.assert_allclose(adjusted, stats.false_discovery_control(p))
    # raise one p-value: now only .001 and .008 survive (.008 <= .02, .039 > .03, .041 > .04, .09 > .05)
    discoveries, _ = benjamini_hochberg([0.041, 0.001, 0.09, 0.008, 0.039], q=0.05)
    assert discoveries.tolist() == [False, True, False, True, False]


def test_bh_on_nothing():
    discoveries, adjusted = benjamini_hochberg([], q=0.1)
    assert len(discoveries) == 0 and len(adjusted) == 0
