"""The near-tie family at production settings: a noisier verifier is caught, the correct engine passes, same budget.

Production settings: the run's alpha (0.01), every prompt of the default set (70, not chosen to split) at the
default 64 new tokens, the calibration the `calibration` fixture computes, --greedy-policy classify. The baseline
is a GPU-like one: the reference engine with its `logit_noise` fault at the default noise (0.3), so tau calibrates
far above the floor and every split is a near-tie, excused one by one; only their rate can tell a verifier at
another precision (the same fault at 1.5, five times the noise) from the correct engine and from a correct engine on
the same hardware (the same fault at 0.3, another seed). The statistics (an exact test of two Poisson rates, its
power, the minimum detectable rate) are checked against simulation. benchmarks/power_near_tie.py measures the
false-alarm rate and the power over seeds.
"""
from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import spec_route_suite.equivalence.test_greedy as greedy_suite
from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.equivalence.near_tie_rate import (DETECT_EXCESS, Exposure, Flips, RateVerdict, excess_finding,
                                                        excess_pvalue, min_detectable_rate, power)
from spec_route_suite.prompts.fit import ContextFit, FittedPrompts, RouteContext
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.routes.base import Completion, Request
from tests.test_greedy_routes import Rewired, Sink, handle, reference_route, suite_config, tokenizer

MAX_NEW_TOKENS = 64   # the suite's default --max-new-tokens
NOISY_BASELINE = {"fault": "logit_noise", "seed": "1"}                    # default noise 0.3
SAME_HARDWARE = {"fault": "logit_noise", "seed": "2"}                     # the same noise: a correct route there
NOISIER_VERIFIER = {"fault": "logit_noise", "noise": "1.5", "seed": "2"}  # five times the baseline's noise


def production(**overrides):
    return suite_config(**{"greedy_policy": "classify", "max_new_tokens": MAX_NEW_TOKENS, **overrides})


def fitted():
    fit = ContextFit((RouteContext("baseline", 512, "embedded model"),
                      RouteContext("candidate", 512, "embedded model")))
    return FittedPrompts(tokenizer(), fit, max_tokens=MAX_NEW_TOKENS)


def lazy_calibration(baseline, config):
    """What the `calibration` fixture builds: the lean calibration prompts, min(32, max_new_tokens) tokens."""
    records = pick_lean(prompt_pool(config), calib.PROMPTS)
    return calib.LazyCalibration(baseline, records, [fitted().ids(r) for r in records],
                                 min(calib.TOKENS, config.max_new_tokens), None)


def run_rate(baseline, candidate, calibration, config):
    """The route suite's near-tie test once: (outcome, failure or skip text, sink)."""
    sink = Sink()
    try:
        greedy_suite.test_near_tie_rate_matches_aa(baseline=baseline, candidate=candidate, fitted_prompts=fitted(),
                                                   suite_config=config, calibration=calibration, findings=sink)
    except pytest.fail.Exception as failure:
        return "failed", str(failure), sink
    except pytest.skip.Exception as skipped:
        return "skipped", str(skipped), sink
    return "passed", "", sink


def coverage(sink) -> dict:
    (row,) = [d for kind, d in sink.measurements if kind == "coverage" and d["check"] == "near-tie"]
    return row


def rates(sink) -> dict:
    (row,) = [d for kind, d in sink.measurements if kind == "near_tie_rate"]
    return row


@pytest.fixture(scope="module")
def noisy():
    """The noisy baseline with its calibration, and candidates by name (made on first use, closed together)."""
    baseline = handle(reference_route("baseline", **NOISY_BASELINE), "baseline")
    made = {}

    def candidate(name: str):
        if name not in made:
            options = {"correct": {}, "same-hardware": SAME_HARDWARE, "noisier": NOISIER_VERIFIER}[name]
            made[name] = handle(reference_route("candidate", **options), "candidate")
        return made[name]
    yield baseline, lazy_calibration(baseline, production()), candidate
    for h in (baseline, *made.values()):
        h.route.batcher.close()


def test_a_noisier_verifier_is_caught_at_the_budget_the_run_states(noisy):
    baseline, calibration, candidate = noisy
    outcome, why, sink = run_rate(baseline, candidate("noisier"), calibration, production())
    assert outcome == "failed" and "near-ties more often" in why, why
    (finding,) = sink.items
    assert finding.check == "near-tie" and finding.severity == "bug" and finding.details["p_value"] < 0.01
    row, measured = coverage(sink), rates(sink)
    assert calibration.get().tau > 1.0, "the noisy baseline calibrates tau far above the floor: splits are near-ties"
    assert row["verified"], row["reason"]   # the run's exposure sees the claimed excess
    assert measured["detectable_excess"] <= DETECT_EXCESS
    excess = (measured["candidate_near_ties"] / measured["candidate_tokens"]
              - measured["aa_near_ties"] / measured["aa_tokens"])
    assert excess >= measured["detectable_excess"], "the fault acts above the excess the run says it can see"
    assert measured["candidate_tokens"] > 1000 and measured["aa_tokens"] > 1000, "every greedy prompt's answer"


@pytest.mark.parametrize("name", ["correct", "same-hardware"])
def test_the_correct_engine_passes_at_the_same_budget(noisy, name):
    baseline, calibration, candidate = noisy
    outcome, why, sink = run_rate(baseline, candidate(name), calibration, production())
    assert outcome == "passed" and sink.items == [], why or sink.items[0].title
    assert coverage(sink)["verified"], coverage(sink)["reason"]
    assert rates(sink)["p_value"] >= 0.01


def test_under_strict_an_excess_is_a_warning_beside_the_failing_greedy_check(noisy):
    baseline, calibration, candidate = noisy
    outcome, _, sink = run_rate(baseline, candidate("noisier"), calibration, production(greedy_policy="strict"))
    (finding,) = sink.items
    assert outcome == "passed" and finding.severity == "warning"


def test_too_little_exposure_reads_not_verified_with_the_excess_it_could_see(noisy):
    """One prompt per category (--prompt-limit 1): about 90 tokens a side cannot see an excess of 2 per 100."""
    baseline, calibration, candidate = noisy
    outcome, _, sink = run_rate(baseline, candidate("correct"), calibration, production(prompt_limit=1))
    row = coverage(sink)
    assert outcome == "passed" and not row["verified"]
    assert "per 1000 tokens" in row["reason"] and "claims" in row["reason"]
    assert "near-tie flips per 1000 tokens" in row["could_detect"]


def test_a_baseline_that_cannot_teacher_force_is_not_verified(noisy):
    baseline, calibration, candidate = noisy
    blind = handle(Rewired(baseline.route, capabilities=replace(baseline.capabilities, prompt_logprobs=False),
                           score_missing=True), "baseline")
    outcome, why, sink = run_rate(blind, candidate("correct"), calibration, production())
    assert outcome == "skipped" and "cannot teacher-force" in why
    assert not coverage(sink)["verified"]


def test_near_tie_findings_reach_the_verdict_under_classify(tmp_path):
    """The route suite as a user runs it (two workers, one routes file): the noisier verifier reads avoid on its
    near-tie finding, the correct engine's near-tie row reads verified, at the same budget in the same run."""
    from tests.mutation import run_route_suite
    uri = "reference:?" + "&".join(f"{k}={v}" for k, v in NOISIER_VERIFIER.items())
    result = run_route_suite({"correct": "reference:", "noisier": uri},
                             ["--greedy-policy", "classify", "-k", "near_tie"], tmp_path,
                             paths=("equivalence/test_greedy.py",), workers=2,
                             baseline_uri="reference:?" + "&".join(f"{k}={v}" for k, v in NOISY_BASELINE.items()))
    report = result.report
    assert result.exit_code == 1, result.output_tail
    assert [(f["check"], f["route"], f["severity"]) for f in report["findings"]] == [("near-tie", "noisier", "bug")]
    assert report["route_verdicts"]["noisier"]["verdict"] == "avoid"
    cells = report["matrix"]["near-tie"]
    assert cells["correct"]["status"] == "yes" and cells["noisier"]["status"] == "failed", cells


# ---- the statistics ------------------------------------------------------------------------------

def test_the_exact_rate_test_keeps_its_false_alarm_rate_and_reaches_its_power():
    """Simulated Poisson counts at the default run's exposure: equal rates reject at most alpha (+ 3 standard
    errors) of the time; a candidate at the minimum detectable rate is caught with power 0.9 (within 3 s.e.)."""
    rng = np.random.default_rng(0)
    alpha, tokens, runs = 0.01, 1250, 4000
    for aa_rate in (0.0, 0.003):
        for rate, expected in ((aa_rate, None),
                               (min_detectable_rate(aa_rate=aa_rate, candidate_tokens=tokens, aa_tokens=tokens,
                                                    alpha=alpha), 0.9)):
            b, a = rng.poisson(rate * tokens, runs), rng.poisson(aa_rate * tokens, runs)
            rejected = np.mean([excess_pvalue(candidate=Flips(tokens, int(x)), aa=Flips(tokens, int(y))) < alpha
                                for x, y in zip(b, a)])
            predicted = power(candidate_rate=rate, aa_rate=aa_rate, candidate_tokens=tokens, aa_tokens=tokens,
                              alpha=alpha)
            error = 3 * math.sqrt(max(predicted * (1 - predicted), alpha * (1 - alpha)) / runs)
            assert abs(rejected - predicted) <= error, (aa_rate, rate, rejected, predicted)
            if expected is None:
                assert rejected <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs), (aa_rate, rejected)
            else:
                assert predicted >= expected and rejected >= expected - error, (aa_rate, rate, rejected)


def test_the_detectable_excess_shrinks_with_exposure_and_the_claim_needs_a_full_prompt_set():
    small = RateVerdict.of(candidate=Flips(90, 0), aa=Flips(90, 0), alpha=0.01)
    full = RateVerdict.of(candidate=Flips(1250, 0), aa=Flips(1250, 0), alpha=0.01)
    assert full.detectable_excess < DETECT_EXCESS < small.detectable_excess
    assert full.powered and not small.powered and small.shortfall() and not full.shortfall()
    assert RateVerdict.of(candidate=Flips(0, 0), aa=Flips(100, 0), alpha=0.01).shortfall().startswith("no exposure")
    assert excess_pvalue(candidate=Flips(1000, 7), aa=Flips(1000, 0)) < 0.01 < excess_pvalue(
        candidate=Flips(1000, 6), aa=Flips(1000, 0))


# ---- the judgement, from values ----------------------------------------------------------------------

def _route(name: str) -> SimpleNamespace:
    """A handle as a finding's repro sees one: its name, and how it puts a request on the wire."""
    return SimpleNamespace(name=name, repro_wire=lambda req: {"request_id": req.request_id})


def _exposure(candidate: Flips, aa: Flips, splits: int = 0) -> Exposure:
    req = Request(prompt_ids=(1, 2), max_tokens=4, temperature=0.0, request_id="greedy-math-00")
    answer = Completion(token_ids=(3, 4), text="", finish_reason="length", route="r")
    return Exposure(aa=aa, candidate=candidate, splits=[(req, answer, answer)] * splits)


def test_an_excess_is_a_bug_under_classify_a_warning_under_strict_and_no_excess_is_no_finding():
    calibration = SimpleNamespace(describe=lambda: "tau 0.5")
    names = dict(candidate=_route("fast"), baseline=_route("ref"), calibration=calibration)
    excess = RateVerdict.of(candidate=Flips(1000, 12), aa=Flips(1000, 0), alpha=0.01)
    finding = excess_finding(excess, _exposure(excess.candidate, excess.aa, splits=4), policy="classify", **names)
    assert finding.check == "near-tie" and finding.severity == "bug" and finding.route == "fast"
    assert finding.title.startswith("candidate 'fast' leaves the baseline's top-1 at near-ties more often than "
                                    "baseline 'ref' does itself: 12 in 1000 tokens vs 0 in 1000")
    assert finding.details["policy"] == "classify" and finding.details["calibration"] == "tau 0.5"
    assert len(finding.details["repro"]["case"]["requests"]) == 3, "the repro resends three of the four splits"
    strict = excess_finding(excess, _exposure(excess.candidate, excess.aa), policy="strict", **names)
    assert strict.severity == "warning" and strict.details["repro"] is None   # no split recorded: no repro
    even = RateVerdict.of(candidate=Flips(1000, 1), aa=Flips(1000, 1), alpha=0.01)
    assert excess_finding(even, _exposure(even.candidate, even.aa), policy="classify", **names) is None
