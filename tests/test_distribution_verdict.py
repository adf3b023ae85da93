"""What one sampling setting's run says (equivalence/distribution_verdict.py), judged from values alone.

A real `run_check` on the synthetic sampler (equivalence/stats/synthetic.py) gives the result, a RoutePlan
and stand-in handles the rest: the verdict's findings, measurements, coverage rows and failure message, the
min_p row, and the repro's sample size, without a route or a findings sink.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from spec_route_suite.equivalence.distribution import GRID, run_check, setting_alpha
from spec_route_suite.equivalence.distribution_plan import RoutePlan, gate_level
from spec_route_suite.equivalence.distribution_verdict import (REPRO_MAX_SAMPLES, REPRO_MIN_SAMPLES,
                                                               REPRO_SCORED_MIN, judge_setting, min_p_row,
                                                               repro_samples)
from spec_route_suite.equivalence.features import Refusal
from spec_route_suite.equivalence.stats.planner import plan_budget
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.equivalence.stats.synthetic import SyntheticModel

ALPHA, PLAN, PROMPTS, TOKENS = 0.05, SequentialPlan(), 4, 3


def _handle(name: str):
    return SimpleNamespace(name=name, capabilities=SimpleNamespace(seed=True),
                           repro_wire=lambda req: {"path": "/v1/completions", "body": {"prompt": list(req.prompt_ids)}})


def _verdict(*, shift: float, setting=GRID[0], refusal=None, detect_tv=0.3):
    model = SyntheticModel(prompts=PROMPTS, vocab=8, concentration=1.0)
    budget = plan_budget(detect_tv=detect_tv, level=gate_level(ALPHA, PLAN), power=0.9, prompts=PROMPTS,
                         tokens=TOKENS, inflation=PLAN.inflation)
    result = run_check(baseline=model.arm("baseline", tokens=TOKENS),
                       candidate=model.arm("candidate", tokens=TOKENS, shift=shift, first_only=True),
                       prompts=PROMPTS, setting=setting, budget=budget, alpha=setting_alpha(ALPHA), seed=1, plan=PLAN)
    records = [SimpleNamespace(id=f"p-{i}", source="fixture", category=f"c{i % 2}") for i in range(PROMPTS)]
    run = RoutePlan(prompt_ids=[(10 + i, 11 + i) for i in range(PROMPTS)], prompt_names=[r.id for r in records],
                    tokens=TOKENS, serial=False, budget=budget, scorer=None, why="the baseline cannot score")
    arm = SimpleNamespace(pooled=0, n_refused="")
    verdict = judge_setting(run, result, arm, setting=setting, records=records, min_p_refusal=refusal, seed=1,
                            detect_tv=detect_tv, baseline=_handle("base"), candidate=_handle("cand"),
                            decode=lambda ids: " ".join(map(str, ids)))
    return verdict, result


def test_a_passing_setting_records_its_budget_its_row_and_an_info_finding():
    verdict, result = _verdict(shift=0.0)
    assert not result.failed and verdict.failure == ""
    kinds = [kind for kind, _ in verdict.measures]
    assert kinds == ["class_outcome"] * PROMPTS + ["p_value"] * len(result.hypotheses) + ["distribution_budget"]
    assert {data["outcome"] for kind, data in verdict.measures if kind == "class_outcome"} == {"no shift found"}
    [row] = verdict.coverage
    assert row["route"] == "cand" and row["verified"] == (result.budget.min_detectable_tv <= 0.3)
    assert "two-sample test: the baseline cannot score" in row["could_detect"]
    [finding] = verdict.findings
    assert finding.severity == "info" and finding.route == "cand"
    assert finding.title.startswith("T1.0: no distribution shift found by the two-sample test")
    assert finding.details["why"] == "the baseline cannot score" and "families" in finding.details


def test_a_shifted_candidate_gets_a_bug_with_its_repro_and_a_failure_message():
    verdict, result = _verdict(shift=0.4)
    assert result.failed
    [finding] = verdict.findings
    top = finding.details["prompts_by_significance"][0]
    assert finding.severity == "bug" and finding.prompt_id == top["prompt_id"]
    assert finding.title.startswith("T1.0: sampled tokens differ from the baseline's distribution")
    assert finding.details["repro"]["judge"] == "distribution"
    assert finding.details["repro"]["case"]["samples"] == repro_samples(top)
    assert "shift" in {data["outcome"] for kind, data in verdict.measures if kind == "class_outcome"}
    assert verdict.failure.startswith("candidate 'cand' does not sample from baseline 'base''s distribution at T1.0")
    assert f"most significant prompt {top['prompt_id']}" in verdict.failure


def test_the_min_p_point_adds_its_row_and_says_who_refused():
    min_p = GRID[-1]
    assert min_p.min_p and min_p_row(GRID[0], "cand", None, verified=True, could_detect="x", ran={}) is None
    verified = min_p_row(min_p, "cand", None, verified=False, could_detect="x", ran={"n": 1})
    assert verified["part"] == "min_p" and not verified["verified"] and "misses --detect-tv" in verified["reason"]
    ours = min_p_row(replace(min_p, min_p=0.0), "cand", Refusal("cand", "min_p", "HTTP 400"), verified=True,
                     could_detect="x", ran={})
    assert ours["supported"] is False and ours["reason"] == "route 'cand' does not support min_p (HTTP 400)"
    theirs = min_p_row(replace(min_p, min_p=0.0), "cand", Refusal("base", "min_p", "HTTP 400"), verified=True,
                       could_detect="x", ran={})
    assert theirs["supported"] is True and theirs["reason"].startswith("the baseline refuses min_p")
    verdict, _ = _verdict(shift=0.0, setting=replace(min_p, min_p=0.0),
                          refusal=Refusal("cand", "min_p", "HTTP 400"))
    assert [row.get("part", "") for row in verdict.coverage] == ["", "min_p"]


def test_repro_samples_scale_with_the_shift_seen_and_stay_in_bounds():
    assert repro_samples({"expected_counts": [1.0], "candidate_counts": [10, 10]}) == REPRO_SCORED_MIN
    assert repro_samples({"expected_counts": [1.0], "candidate_counts": [100, 100]}) == REPRO_MAX_SAMPLES
    assert repro_samples({"baseline_counts": [], "statistic": 0.0, "df": 0}) == REPRO_MAX_SAMPLES
    assert repro_samples({"baseline_counts": [50, 50], "statistic": 1000.0, "df": 2}) == REPRO_MIN_SAMPLES
    assert repro_samples({"baseline_counts": [150, 150], "statistic": 45.0, "df": 2}) == 300
    assert repro_samples({"baseline_counts": [100, 100], "statistic": 23.5, "df": 2}) == 400
