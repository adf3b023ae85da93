"""The logprob check: the target's numbers pass, the draft's, zeros or none fail, ties are allowed.

Route level: equivalence/test_logprobs.py's test against the reference engine (correct
and `logprobs_from_draft`), transformers assisted generation, and wrappers that zero or
drop the logprobs. Unit level: compare_logprobs on hand-built entries, and the finding mismatch_finding makes.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import spec_route_suite.equivalence.test_logprobs as logprob_suite
from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.equivalence.logprobs import (LOGPROB_REPRO_FLOOR, LogprobMismatch, compare_logprobs,
                                                  mismatch_finding)
from spec_route_suite.routes.base import Completion, Request, TokenLogprobs
from tests.test_greedy_routes import (FixedCalibration, Rewired, Sink, baseline_handle, fitted_prompts, handle,
                                      hf_route, prompts, reference_route, suite_config, tokenizer)

FLOOR = calib.Calibration(route="baseline", tau=calib.TAU_FLOOR, logprob_tol=calib.TOL_FLOOR, noise=1e-5)


def run_logprobs(prompt, candidate, baseline=None):
    sink = Sink()
    try:
        logprob_suite.test_logprobs_match_baseline(
            lean_prompt=prompt, baseline=baseline or baseline_handle(), candidate=candidate,
            fitted_prompts=fitted_prompts(),
            suite_config=suite_config(), calibration=FixedCalibration(FLOOR), findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink.items
    return None, sink.items


@pytest.fixture(scope="module")
def reference():
    made = {}

    def get(fault=None):
        if fault not in made:
            options = {"fault": fault} if fault else {}
            made[fault] = handle(reference_route("candidate", **options), "candidate")
        return made[fault]
    yield get
    for h in made.values():
        h.route.batcher.close()


@pytest.mark.parametrize("kind", ["reference", "hf-assisted"])
def test_target_logprobs_pass(reference, kind):
    candidate = reference() if kind == "reference" else handle(hf_route("candidate", True), "candidate")
    for prompt in prompts(("math", "chat", "json"), 1):
        failure, found = run_logprobs(prompt, candidate)
        assert failure is None and found == [], f"{prompt.id}: {failure}"


def test_draft_logprobs_fail_with_value_mismatches(reference):
    failure, (finding,) = run_logprobs(prompts(("chat",), 1)[0], reference("logprobs_from_draft"))
    assert failure and "baseline 'baseline'" in failure and "candidate 'candidate'" in failure
    kinds = {m["kind"] for m in finding.details["mismatches"]}
    assert "value" in kinds and finding.severity == "bug" and finding.check == "logprobs"


def test_all_zero_logprobs_fail():
    def zero(req, c):
        return replace(c, logprobs=tuple(TokenLogprobs(s.token_id, 0.0, tuple((t, 0.0) for t, _ in s.top))
                                         for s in c.logprobs or ()))
    candidate = handle(Rewired(hf_route("candidate", True), completion=zero), "candidate")
    failure, (finding,) = run_logprobs(prompts(("math",), 1)[0], candidate)
    assert failure and "value" in finding.details["diff"]


def test_missing_logprobs_fail_and_unsupported_logprobs_skip():
    inner = hf_route("candidate", True)
    dropped = handle(Rewired(inner, completion=lambda req, c: replace(c, logprobs=None)), "candidate")
    failure, (finding,) = run_logprobs(prompts(("math",), 1)[0], dropped)
    assert "returned no logprobs" in failure and finding.severity == "bug"
    blind = handle(Rewired(inner, capabilities=replace(inner.capabilities, logprobs=0)), "candidate")
    with pytest.raises(pytest.skip.Exception, match="not verified"):
        run_logprobs(prompts(("math",), 1)[0], blind)


def test_kv_rollback_fault_also_breaks_rank_one(reference):
    kinds = set()
    for prompt in prompts(("math", "json", "long"), 2):
        failure, found = run_logprobs(prompt, reference("kv_no_rollback"))
        kinds |= {m["kind"] for f in found for m in f.details["mismatches"]}
    assert "rank" in kinds


# ---- unit level -------------------------------------------------------------------------------

def lp(token, value, *top):
    return TokenLogprobs(token_id=token, logprob=value, top=tuple(top))


def test_identical_logprobs_pass_and_ties_within_tau_count_as_rank_one():
    mine = [lp(5, -0.6935, (4, -0.693), (5, -0.6935))]
    ref = [lp(5, -0.6936, (4, -0.6931), (5, -0.6936))]
    assert compare_logprobs(candidate=mine, baseline=ref, tokens=[5], tol=1e-3, tau=1e-3, greedy=True) == []


def test_each_kind_of_mismatch_is_named():
    tokens = [5, 6, 7, 8]
    mine = [lp(5, -0.1, (5, -0.1), (9, -2.0)), lp(6, -2.0, (6, -1.0)), lp(7, 0.5), lp(8, -0.4, (8, -0.4))]
    ref = [lp(5, -0.1, (5, -0.1), (9, -2.5)), lp(6, -2.0), lp(7, -0.2), lp(8, -0.4, (3, -0.1), (8, -0.4))]
    found = compare_logprobs(candidate=mine, baseline=ref, tokens=tokens, tol=1e-3, tau=1e-3, greedy=True)
    assert [(m.position, m.kind) for m in found] == [(0, "top-value"), (1, "self-inconsistent"), (2, "invalid"),
                                                     (2, "value"), (3, "rank")]
    short = compare_logprobs(candidate=mine[:2], baseline=ref, tokens=tokens, tol=1e-3, tau=1e-3, greedy=True)
    assert short[0].kind == "missing" and "2 logprob entries for 4 tokens" in short[0].detail


def test_rank_is_only_checked_at_temperature_zero_and_only_within_the_scored_prefix():
    mine = [lp(8, -0.4, (8, -0.4)), lp(9, -0.2)]
    ref = [lp(8, -0.4, (3, -0.1), (8, -0.4))]
    assert compare_logprobs(candidate=mine, baseline=ref, tokens=[8, 9], tol=1e-3, tau=1e-3, greedy=False) == []
    found = compare_logprobs(candidate=mine, baseline=ref, tokens=[8, 9], tol=1e-3, tau=1e-3, greedy=True)
    assert [m.kind for m in found] == ["rank"]


class Named:
    """A route handle as the repro builders see it: a name and the wire form of a request."""

    def __init__(self, name):
        self.name = name

    def repro_wire(self, req):
        return {"path": "/v1/completions", "body": {"prompt": list(req.prompt_ids), "route": self.name}}


def test_mismatch_finding_quotes_the_mismatches_and_repros_at_no_less_than_printed_precision():
    req = Request(prompt_ids=(1, 2), max_tokens=3, temperature=0.0, logprobs=5, request_id="logprobs-p")
    actual = Completion(token_ids=(7, 8, 9), text="xyz", finish_reason="length", route="candidate")
    mismatches = [LogprobMismatch(position=i, token_id=7 + i, kind="value", candidate=-0.1, baseline=-2.0,
                                  detail="off") for i in range(60)]
    finding = mismatch_finding(req, actual, mismatches, method="teacher-forced", calibration=FLOOR,
                               candidate=Named("cand"), baseline=Named("base"), prompt_id="p")
    assert (finding.check, finding.severity, finding.route, finding.prompt_id) == ("logprobs", "bug", "cand", "p")
    assert finding.title == "candidate 'cand' logprobs disagree with baseline 'base' on prompt p (60 mismatches)"
    assert finding.details["diff"].startswith("60 value") and len(finding.details["mismatches"]) == 50
    assert finding.details["candidate_tokens"] == [7, 8, 9] and finding.details["calibration"] == FLOOR.describe()
    assert finding.details["repro"]["case"]["tolerance"] == max(FLOOR.logprob_tol, LOGPROB_REPRO_FLOOR)
