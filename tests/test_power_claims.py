"""What docs/checks.md (the page the README links) and the docstrings say about the detectors' budgets is what the
code does.

The lean checks take LEAN_PROMPTS prompts (two classes, not "one prompt per class"); the near-tie and spec-path
claims quote their constants; "TV per prompt" is a shift in every prompt, and the README's figure for a shift in
one prompt of 20 follows from the planner; the prefix-cache reference says when it is a cold computation.
"""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

from spec_route_suite.equivalence import conftest as equivalence_fixtures
from spec_route_suite.equivalence.near_tie_rate import DETECT_EXCESS
from spec_route_suite.equivalence.spec_path import DETECT_RATIO, REQUESTS
from spec_route_suite.equivalence.stats.partition import MAX_CELLS
from spec_route_suite.equivalence.stats.planner import (chisquare_power, min_detectable_tv, required_noncentrality,
                                                        two_sample_chisquare_n)
from spec_route_suite.stressors.prefix_cache import reference_kind

CHECKS = (Path(__file__).resolve().parent.parent / "docs" / "checks.md").read_text()   # what the README links


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_lean_checks_take_two_prompts_and_the_checks_page_says_so():
    assert equivalence_fixtures.LEAN_PROMPTS == 2
    flat = _flat(CHECKS)
    assert "on one prompt per class" not in flat
    assert "logprobs, boundaries, streaming and seeds on two prompts of two classes" in flat


def test_the_checks_page_quotes_the_near_tie_and_spec_path_claims():
    flat = _flat(CHECKS)
    assert DETECT_EXCESS == 0.02 and "claims an excess of 2 flips per 100 tokens at power 0.9" in flat
    assert REQUESTS == 10 and "10 answers of each family against 10 plain ones" in flat
    assert DETECT_RATIO == 0.25 and "a family share down to a quarter of the plain share at power 0.9" in flat


def test_tv_per_prompt_is_a_shift_in_every_prompt_and_one_prompt_needs_sqrt_p_times_it():
    """The planner's budget for TV 0.05 over 20 prompts (the gate's level at alpha 0.01): its noncentrality is
    reached by a shift of 0.05 in every prompt; a shift in one prompt alone adds 2 n d^2 only, so 0.05 there is seen
    with little power, and the shift one prompt must carry for power 0.9 is docs/checks.md's 0.22."""
    prompts, alpha, power = 20, 0.0019, 0.9
    n = two_sample_chisquare_n(0.05, alpha=alpha, power=power, prompts=prompts)
    df = (MAX_CELLS - 1) * prompts
    assert min_detectable_tv(n, alpha=alpha, power=power, prompts=prompts) <= 0.05
    assert chisquare_power(df, alpha, prompts * 2 * n * 0.05 ** 2) >= power        # 0.05 in every prompt
    assert chisquare_power(df, alpha, 2 * n * 0.05 ** 2) < 0.1                       # 0.05 in one prompt only
    one = math.sqrt(required_noncentrality(df, alpha, power) / (2 * n))
    assert round(one, 2) == 0.22 and "one prompt in 20 must move it by about 0.22" in _flat(CHECKS)
    assert "a shift of that size in *every* one of the check's P prompts" in _flat(CHECKS)


def _route(extra):
    return SimpleNamespace(inventory=lambda: SimpleNamespace(extra=extra))


def test_the_prefix_cache_reference_says_when_it_is_cold():
    assert reference_kind(_route({"prefix_cache": False})).startswith("cold:")
    for extra in ({"prefix_cache": True}, {}, None):
        assert reference_kind(_route(extra)).startswith("cold for the first variant only")
    assert "independent cold computation" not in (Path(__file__).resolve().parent.parent / "stressors"
                                                  / "test_prefix_cache.py").read_text()
