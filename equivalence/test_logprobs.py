"""Logprob consistency: the candidate's returned logprobs are the baseline target's, within A/A noise.

Runs at temperature 0 on the lean prompts. The baseline teacher-forces the candidate's own
tokens; without teacher forcing, its own logprobs over the shared prefix are used.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.delivery import candidate_answer
from spec_route_suite.equivalence.logprobs import (ZERO_RUN, all_zero_logprobs, baseline_reference, compare_logprobs,
                                                  mismatch_finding, summarize)
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import CapabilityMissing
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import logprobs_repro

pytestmark = pytest.mark.check("logprobs")

TOP_K = 5


def test_logprobs_match_baseline(lean_prompt, baseline, candidate, fitted_prompts, suite_config, calibration, findings):
    candidate.require("logprobs")
    k = min(TOP_K, int(candidate.capabilities.logprobs))
    req = Request(prompt_ids=fitted_prompts.ids(lean_prompt), max_tokens=suite_config.max_new_tokens,
                  temperature=0.0, logprobs=k, request_id=f"logprobs-{lean_prompt.id}")
    # an answer without its logprobs is judged against the baseline's answer to the same request (delivery.py)
    actual = candidate_answer(req, baseline=baseline, candidate=candidate, findings=findings, check="logprobs",
                              prompt_id=lean_prompt.id)
    try:
        reference, method = baseline_reference(baseline, req, actual.token_ids, top_k=k)
    except CapabilityMissing as exc:
        pytest.skip(f"not verified: {exc}")
    aa = calibration.get()
    mismatches = compare_logprobs(candidate=actual.logprobs, baseline=reference, tokens=actual.token_ids,
                                  tol=aa.logprob_tol, tau=aa.tau, greedy=True)
    compared = min(len(reference), len(actual.token_ids))
    findings.cover("logprobs", candidate.name, verified=compared > 0,
                   ran={"prompts": 1, "tokens compared with the baseline": compared},
                   could_detect=f"logprobs that are not the target's ({method})",
                   reason="" if compared else f"nothing compared: {method} (no token shared with the candidate's)")
    if not mismatches:
        return
    findings.add(mismatch_finding(req, actual, mismatches, method=method, calibration=aa, candidate=candidate,
                                  baseline=baseline, prompt_id=lean_prompt.id))
    pytest.fail(f"prompt {lean_prompt.id}: candidate '{candidate.name}' vs baseline '{baseline.name}' "
                f"({method}; {aa.describe()}):\n{summarize(mismatches)}", pytrace=False)


SAMPLED_TOKENS = 16


def test_sampled_logprobs_are_not_all_zero(lean_prompt, baseline, candidate, fitted_prompts, suite_config, findings):
    """A sampled answer whose logprobs are all exactly 0.0 (vllm#17876), while the baseline is not that sure."""
    candidate.require("logprobs")
    req = Request(prompt_ids=fitted_prompts.ids(lean_prompt),
                  max_tokens=min(SAMPLED_TOKENS, suite_config.max_new_tokens), temperature=1.0, seed=suite_config.seed,
                  ignore_eos=True, logprobs=1, request_id=f"logprobs-sampled-{lean_prompt.id}")
    actual = candidate_answer(req, baseline=baseline, candidate=candidate, findings=findings, check="logprobs",
                              prompt_id=lean_prompt.id)
    checked = len(actual.logprobs or ())
    findings.cover("logprobs", candidate.name, verified=checked >= ZERO_RUN,
                   ran={"sampled tokens checked": checked},
                   could_detect="sampled answers whose logprobs are all exactly 0.0",
                   reason="" if checked >= ZERO_RUN else f"only {checked} sampled logprob(s) returned, fewer than the "
                                                         f"{ZERO_RUN} an all-zero run needs")
    if not actual.logprobs or any(t.logprob != 0.0 for t in actual.logprobs):
        return
    try:
        reference, method = baseline_reference(baseline, req, actual.token_ids, top_k=1)
    except CapabilityMissing as exc:
        pytest.skip(f"not verified: {exc}")
    problem = all_zero_logprobs(actual, reference)
    if problem is None:
        return
    findings.add(Finding(check="logprobs", severity="bug", route=candidate.name, prompt_id=lean_prompt.id,
                         title=f"candidate '{candidate.name}' reports logprob 0.0 for every sampled token "
                               f"(prompt {lean_prompt.id})",
                         details={"diff": problem, "reference": method, "prompt_ids": list(req.prompt_ids),
                                  "candidate_tokens": list(actual.token_ids),
                                  "repro": logprobs_repro(req, candidate=candidate, baseline=baseline, tolerance=0.0,
                                                          mode="zero")}))
    pytest.fail(f"prompt {lean_prompt.id}: candidate '{candidate.name}': {problem}", pytrace=False)
