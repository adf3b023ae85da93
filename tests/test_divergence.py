"""Divergence classification and A/A calibration, on hand-built numbers and on the embedded baseline.

The classifier's arithmetic is checked with a stand-in baseline whose teacher-forced
numbers are chosen by the test; the calibration is checked on a route with known noise
(tau must follow it) and on the real float32 baseline (tau must sit on its floor).
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.equivalence.divergence import BUG, NEAR_TIE, UNCLASSIFIED, classify_divergence, margin_verdict
from spec_route_suite.equivalence.greedy import compare_greedy
from spec_route_suite.routes.base import Capabilities, Completion, Route, TokenLogprobs
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.routes.errors import CapabilityMissing
from tests.test_greedy_routes import baseline_handle, prompts, tokenizer

EOS = 2
TAU = 0.01


def decode(ids):
    return " ".join(f"t{i}" for i in ids)


class Table(Route):
    """A stand-in baseline whose logprobs after any context are one fixed table."""

    def __init__(self, table: dict[int, float], *, prompt_logprobs=True, logprobs=5, missing=False):
        self.name = "stand-in"
        self.table = table
        self.capabilities = Capabilities(prompt_logprobs=prompt_logprobs, logprobs=logprobs)
        self.missing = missing
        self.scored = []

    def _step(self, token):
        top = tuple(sorted(self.table.items(), key=lambda p: -p[1])[:5])
        return TokenLogprobs(token_id=token, logprob=self.table.get(token, -30.0), top=top)

    def score(self, prompt_ids, continuation_ids, top_k):
        if self.missing:
            raise CapabilityMissing("prompt_logprobs", route=self.name)
        self.scored.append((tuple(prompt_ids), tuple(continuation_ids)))
        return [self._step(t) for t in continuation_ids]

    def generate(self, req):
        best = max(self.table, key=self.table.get)
        return Completion(token_ids=(best,), text="", finish_reason="length", route=self.name,
                          logprobs=(self._step(best),) if req.logprobs else None)


def completion(tokens, finish="length"):
    return Completion(token_ids=tuple(tokens), text="", finish_reason=finish, route="x",
                      usage_completion_tokens=len(tokens))


def classify(table, base_tokens, cand_tokens, *, base_finish="length", cand_finish="length", max_tokens=None,
             tau=TAU):
    a, b = completion(base_tokens, base_finish), completion(cand_tokens, cand_finish)
    divergence = compare_greedy(baseline=a, candidate=b, decode=decode)
    assert divergence is not None
    return classify_divergence(baseline=table, prompt_ids=(1, 7), divergence=divergence, baseline_completion=a,
                               candidate_completion=b, max_tokens=max_tokens or max(len(base_tokens), len(cand_tokens)),
                               tau=tau, eos_token_id=EOS, decode=decode)


# ---- the verdict arithmetic -----------------------------------------------------------------

def test_margin_within_tau_is_a_near_tie():
    step = TokenLogprobs(token_id=11, logprob=-0.695, top=((10, -0.690), (11, -0.695), (12, -4.0)))
    verdict, margin, rank, _ = margin_verdict(scored=step, tau=TAU)
    assert verdict == NEAR_TIE and rank == 2 and margin == pytest.approx(0.005)


def test_margin_above_tau_is_a_bug():
    step = TokenLogprobs(token_id=11, logprob=-1.2, top=((10, -0.4), (11, -1.2)))
    verdict, margin, rank, _ = margin_verdict(scored=step, tau=TAU)
    assert verdict == BUG and rank == 2 and margin == pytest.approx(0.8)


def test_token_outside_top_k_is_a_bug_even_with_a_small_margin():
    flat = tuple((i, -2.0 - 1e-4 * i) for i in range(5))
    step = TokenLogprobs(token_id=40, logprob=-2.003, top=flat)
    verdict, _, rank, reason = margin_verdict(scored=step, tau=TAU)
    assert verdict == BUG and rank is None and "outside" in reason


def test_candidate_token_preferred_by_the_baseline_is_a_near_tie_with_zero_margin():
    step = TokenLogprobs(token_id=11, logprob=-0.5, top=((11, -0.5), (10, -0.9)))
    assert margin_verdict(scored=step, tau=0.0)[:2] == (NEAR_TIE, 0.0)


# ---- classification of whole divergences ----------------------------------------------------

def test_classifier_teacher_forces_the_candidate_token_after_the_shared_prefix():
    table = Table({5: -0.69, 6: -0.695, 9: -5.0})
    result = classify(table, [3, 4, 5, 8], [3, 4, 6, 8])
    assert result.verdict == NEAR_TIE and result.method == "teacher-forced" and result.forced_token == 6
    assert table.scored == [((1, 7, 3, 4), (6,))]
    assert result.baseline_top[0][:2] == (5, -0.69) and "near-tie" in result.summary()


def test_classifier_calls_a_large_margin_a_bug():
    result = classify(Table({5: -0.1, 6: -3.0}), [5], [6])
    assert result.verdict == BUG and result.margin == pytest.approx(2.9) and "> tau" in result.summary()


def test_candidate_that_stopped_is_scored_as_choosing_eos():
    table = Table({5: -0.69, EOS: -0.695})
    result = classify(table, [3, 5, 8], [3], cand_finish="stop", max_tokens=10)
    assert result.forced_token == EOS and result.verdict == NEAR_TIE


def test_early_length_stop_and_finish_only_differences_are_bugs_without_scoring():
    table = Table({5: -0.1})
    early = classify(table, [3, 5, 8], [3], cand_finish="length", max_tokens=10)
    assert early.verdict == BUG and "finish 'length' after 1 of max_tokens=10" in early.reason
    finish = classify(table, [3, 5], [3, 5], base_finish="length", cand_finish="stop")
    assert finish.verdict == BUG and "finish_reason differs" in finish.reason
    over = classify(table, [3, 5], [3, 5, 8, 9], base_finish="length", max_tokens=2)
    assert over.verdict == BUG and "4 tokens for max_tokens=2" in over.reason
    assert table.scored == []


def test_without_teacher_forcing_the_baseline_own_logprobs_are_used_and_named():
    table = Table({5: -0.69, 6: -0.695}, prompt_logprobs=False)
    result = classify(table, [5], [6])
    assert result.method == "baseline-logprobs" and result.verdict == NEAR_TIE
    assert "cannot teacher-force" in result.reason


def test_capability_missing_at_score_time_falls_back_too():
    result = classify(Table({5: -0.69, 6: -0.695}, missing=True), [5], [6])
    assert result.method == "baseline-logprobs"


def test_no_teacher_forcing_and_no_logprobs_is_unclassified_and_says_so():
    result = classify(Table({5: -0.69, 6: -0.695}, prompt_logprobs=False, logprobs=0), [5], [6])
    assert result.verdict == UNCLASSIFIED and "cannot teacher-force" in result.reason
    assert "counts as a bug" in result.reason


# ---- calibration arithmetic -----------------------------------------------------------------

def test_threshold_is_safety_times_noise_with_a_floor():
    assert calib.derive_threshold(0.01) == pytest.approx(calib.SAFETY * 0.01)
    assert calib.derive_threshold(1e-7) == calib.TAU_FLOOR
    assert calib.derive_threshold(None) == calib.TAU_FLOOR
    assert calib.derive_threshold(float("nan")) == calib.TAU_FLOOR


def test_logprob_deltas_compare_same_tokens_and_shared_top_entries_until_tokens_differ():
    a = [TokenLogprobs(5, -0.1, ((5, -0.1), (6, -2.0))), TokenLogprobs(7, -0.3), TokenLogprobs(8, -1.0)]
    b = [TokenLogprobs(5, -0.12, ((5, -0.12), (9, -3.0))), TokenLogprobs(7, -0.3), TokenLogprobs(4, -0.2)]
    assert calib.logprob_deltas(a=a, b=b) == pytest.approx([0.02, 0.02, 0.0])


def test_argmax_flips_find_tokens_that_are_not_the_one_pass_top_1():
    scored = [TokenLogprobs(5, -0.1, ((5, -0.1), (6, -3.0))), TokenLogprobs(6, -0.70, ((7, -0.69), (6, -0.70)))]
    flips = calib.argmax_flips(tokens=[5, 6], scored=scored)
    assert len(flips) == 1 and flips[0][0] == 1 and flips[0][1] == pytest.approx(0.01)


def test_fisher_flags_an_excess_of_near_ties_and_not_an_equal_rate():
    assert calib.near_tie_excess(ab_near_ties=8, ab_tokens=200, aa_near_ties=0, aa_tokens=2000) < 0.001
    assert calib.near_tie_excess(ab_near_ties=1, ab_tokens=1000, aa_near_ties=1, aa_tokens=1000) > 0.5
    assert calib.near_tie_excess(ab_near_ties=0, ab_tokens=0, aa_near_ties=0, aa_tokens=10) is None


def test_calibration_cache_is_computed_once_and_read_back(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return calib.Calibration(route="b", tau=0.5, logprob_tol=0.25, noise=0.125, notes=("n",))

    path = tmp_path / "cal.json"
    first, second = calib.cached(path, compute), calib.cached(path, compute)
    assert calls == [1] and first == second and second.notes == ("n",)
    assert calib.with_override(first, 0.05).tau == 0.05 and calib.with_override(first, 0.05).overridden


class Noisy(Route):
    """A baseline whose decode logprobs differ from its teacher forcing by exactly `noise`."""

    name = "noisy"
    capabilities = Capabilities(prompt_logprobs=True, logprobs=5)

    def __init__(self, noise):
        self.noise = noise

    def _table(self, shift):
        return ((5, -0.2 + shift), (6, -2.0))

    def generate(self, req):
        steps = tuple(TokenLogprobs(5, -0.2 + self.noise, self._table(self.noise)) for _ in range(req.max_tokens))
        return Completion(token_ids=(5,) * req.max_tokens, text="", finish_reason="length", route=self.name,
                          logprobs=steps if req.logprobs else None)

    def score(self, prompt_ids, continuation_ids, top_k):
        return [TokenLogprobs(t, -0.2, self._table(0.0)) for t in continuation_ids]


def test_tau_follows_the_measured_noise():
    result = calib.calibrate(Noisy(0.02), [(1, 2, 3)], max_tokens=4)
    assert result.noise == pytest.approx(0.02) and result.tau == pytest.approx(calib.SAFETY * 0.02)
    assert result.logprob_tol == pytest.approx(calib.SAFETY * 0.02)
    assert any("one request at a time" in n for n in result.notes)
    assert result.aa_tokens == 4 and result.aa_flips == 0


def test_embedded_float32_baseline_calibrates_to_the_floor():
    baseline = baseline_handle()
    ids = [encode_prompt(tokenizer(), p.text) for p in prompts(("math", "chat", "json"), 1)]
    result = calib.calibrate(baseline, ids, max_tokens=24)
    assert result.noise is not None and result.noise < calib.TAU_FLOOR / calib.SAFETY
    assert result.tau == calib.TAU_FLOOR and result.compared > 50 and result.aa_flips == 0
    assert result.seconds < 30
