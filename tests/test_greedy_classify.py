"""The greedy check on planted faults: verifier bugs fail as bugs, hardware-like noise is a near-tie.

Calls equivalence/test_greedy.py's test functions with real routes: the embedded AR
baseline against the reference engine, correct and with `kv_no_rollback` /
`accept_count_off_by_one`; the planted `divergence@N` wrapper; and a "noisy hardware"
pair (reference engine with `logit_noise` on both sides, calibrated on the noisy
baseline) whose splits must come out as near-ties, excused under `classify` only. Their rate against the
baseline's own (the near-tie family) is proven at production settings in tests/test_near_tie_power.py.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import spec_route_suite.equivalence.test_greedy as greedy_suite
from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.routes.wrappers.planted import PlantedDivergenceRoute
from tests.test_greedy_routes import (FixedCalibration, Rewired, Sink, baseline_handle, fitted_prompts, handle,
                                      hf_route, prompts, reference_route, suite_config, tokenizer)

FLOOR = calib.Calibration(route="baseline", tau=calib.TAU_FLOOR, logprob_tol=calib.TOL_FLOOR, noise=1e-5)
NOISE = 0.1


def run_greedy(prompt, baseline, candidate, *, policy="strict", calibration=None, sink=None):
    """Run the route-suite greedy test once; returns (failure message or None, findings)."""
    sink = sink or Sink()
    try:
        greedy_suite.test_greedy_matches_baseline(
            prompt=prompt, baseline=baseline, candidate=candidate, tokenizer=tokenizer(),
            fitted_prompts=fitted_prompts(),
            suite_config=suite_config(greedy_policy=policy), calibration=calibration or FixedCalibration(FLOOR),
            eos_token_id=tokenizer().eos_token_id, findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink.items
    return None, sink.items


@pytest.fixture(scope="module")
def routes():
    made = {}

    def get(name, **options):
        if name not in made:
            made[name] = handle(reference_route("candidate", **options), "candidate")
        return made[name]
    yield get
    for h in made.values():
        h.route.batcher.close()


def test_correct_reference_engine_matches_the_ar_baseline(routes):
    candidate = routes("correct")
    for prompt in prompts(("math", "chat", "json", "long"), 2):
        failure, found = run_greedy(prompt, baseline_handle(), candidate)
        assert failure is None and found == [], f"{prompt.id}: {failure}"


@pytest.mark.parametrize("fault", ["kv_no_rollback", "accept_count_off_by_one"])
@pytest.mark.parametrize("policy", ["strict", "classify"])
def test_verifier_faults_fail_and_are_classified_as_bugs(routes, fault, policy):
    candidate = routes(fault, fault=fault)
    failures = []
    for prompt in prompts(("math", "chat", "json", "long", "code"), 3):
        failure, found = run_greedy(prompt, baseline_handle(), candidate, policy=policy)
        if failure is None:
            assert found == []
            continue
        failures.append(prompt.id)
        (finding,) = found
        assert finding.severity == "bug" and finding.details["classification"]["verdict"] == "bug"
        assert "baseline 'baseline'" in failure and "candidate 'candidate'" in failure and "bug" in failure
        if len(failures) == 2:
            break
    assert failures, f"{fault} produced no greedy divergence on 15 prompts"


def test_planted_divergence_is_a_bug_with_a_large_margin():
    inner = hf_route("candidate", True)
    candidate = handle(PlantedDivergenceRoute(inner, 3, 512), "candidate")
    prompt = prompts(("math",), 1)[0]
    failure, (finding,) = run_greedy(prompt, baseline_handle(), candidate, policy="classify")
    classification = finding.details["classification"]
    assert failure and finding.details["divergence"]["position"] == 3
    assert classification["verdict"] == "bug" and classification["method"] == "teacher-forced"
    assert classification["margin"] is None or classification["margin"] > calib.TAU_FLOOR


def test_without_teacher_forcing_the_finding_says_so():
    inner = hf_route("baseline", False)
    no_forcing = handle(Rewired(inner, capabilities=replace(inner.capabilities, prompt_logprobs=False),
                                score_missing=True), "baseline")
    neither = handle(Rewired(inner, capabilities=replace(inner.capabilities, prompt_logprobs=False, logprobs=0),
                             score_missing=True), "baseline")
    candidate = handle(PlantedDivergenceRoute(hf_route("candidate", True), 2, 512), "candidate")
    prompt = prompts(("chat",), 1)[0]
    _, (fallback,) = run_greedy(prompt, no_forcing, candidate, policy="classify")
    assert fallback.details["classification"]["method"] == "baseline-logprobs"
    assert "cannot teacher-force" in fallback.details["classification"]["reason"]
    failure, (blind,) = run_greedy(prompt, neither, candidate, policy="classify")
    assert blind.severity == "bug" and blind.details["classification"]["verdict"] == "unclassified"
    assert "cannot teacher-force" in blind.details["diff"] and "cannot teacher-force" in failure


@pytest.fixture(scope="module")
def noisy_pair():
    """A correct engine on noisy hardware: the baseline shares the noise, so the A/A run sees it."""
    baseline = handle(reference_route("baseline", fault="logit_noise", noise=NOISE, seed=1), "baseline")
    candidate = handle(reference_route("candidate", fault="logit_noise", noise=NOISE, seed=2), "candidate")
    records = prompts(("math", "chat", "json"), 1)
    measured = calib.calibrate(baseline, [encode_prompt(tokenizer(), p.text) for p in records], max_tokens=32)
    yield baseline, candidate, FixedCalibration(measured, records)
    for h in (baseline, candidate):
        h.route.batcher.close()


def _noisy_splits(noisy_pair, policy):
    baseline, candidate, calibration = noisy_pair
    splits = []
    for prompt in prompts(("math", "chat", "json", "long", "code"), 4):
        failure, found = run_greedy(prompt, baseline, candidate, policy=policy, calibration=calibration)
        if found:
            splits.append((prompt, failure, found[0]))
        if len(splits) == 2:
            break
    assert splits, f"noise {NOISE} produced no greedy split on 20 prompts"
    return splits


def test_noise_calibrates_tau_above_the_floor(noisy_pair):
    measured = noisy_pair[2].get()
    assert measured.noise > NOISE and measured.tau == pytest.approx(calib.SAFETY * measured.noise)
    assert "alone vs batch" in measured.noise_by_condition


def test_noise_splits_are_near_ties_excused_under_classify(noisy_pair):
    for prompt, failure, finding in _noisy_splits(noisy_pair, "classify"):
        assert failure is None, f"{prompt.id}: {failure}"
        assert finding.severity == "near-tie" and finding.details["classification"]["verdict"] == "near-tie"


def test_noise_splits_still_fail_under_strict_and_say_near_tie(noisy_pair):
    for prompt, failure, finding in _noisy_splits(noisy_pair, "strict"):
        assert failure is not None and "near-tie" in failure
        assert finding.severity == "bug" and finding.details["classification"]["verdict"] == "near-tie"
