"""KV pressure and the batch-size ramp: each passes the correct engine and catches its planted fault.

Route level: stressors/test_kv_pressure.py and stressors/test_batch_ramp.py called with real handles on the
reference engine (a small KV pool for the pressure test), correct and with `preempt_loses_draft_state` /
`batch_threshold`; the baseline is the hf route (it serialises, so no load control is run). Unit level: the
ramp's sizes and the pressure plan's sizing against a stated pool.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import spec_route_suite.stressors.test_batch_ramp as ramp_suite
import spec_route_suite.stressors.test_kv_pressure as pressure_suite
from spec_route_suite.prompts.fit import ContextFit, RouteContext
from spec_route_suite.stressors.canary import build_workload, serial_references
from spec_route_suite.stressors.control import LoadControl
from spec_route_suite.stressors.driver import budget_for
from spec_route_suite.stressors.near_tie import NearTiePolicy
from spec_route_suite.stressors.kv_pressure.pressure import plan_pressure
from spec_route_suite.stressors.ramp import ramp_sizes
from tests.test_greedy_routes import (FixedCalibration, Sink, baseline_handle, fitted_prompts, handle, reference_route,
                                      tokenizer)
from tests.test_stated_boundaries import FLOOR

CONFIG = SimpleNamespace(categories=("math", "code", "chat", "json", "long"), seed=0, alpha=0.01, prompt_sources=(),
                         prompt_limit=None)
POOL = 768           # KV tokens of the pressure engine: 8 requests of ~30 + 96 tokens do not fit
RAMP_MAX_TOKENS = 24


def policy():
    return NearTiePolicy(mode="strict", calibration=FixedCalibration(FLOOR))


def outcome_of(call):
    sink = Sink()
    try:
        call(sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink
    return None, sink


def run_pressure(fault=None):
    route = reference_route("candidate", kv_capacity=str(POOL), **({"fault": fault} if fault else {}))
    fit = ContextFit((RouteContext("baseline", 512, "model"), RouteContext("candidate", 512, "model")))
    try:
        return outcome_of(lambda sink: pressure_suite.test_outputs_survive_kv_pressure(
            candidate=handle(route, "candidate"), baseline=baseline_handle(), tokenizer=tokenizer(),
            fitted_prompts=fitted_prompts(), context_fit=fit,
            stress_budget=budget_for(batched=True, levels=(8,), stress_requests=40), suite_config=CONFIG,
            near_tie_policy=policy(), findings=sink))
    finally:
        route.batcher.close()


def test_kv_pressure_passes_the_correct_engine_with_preemptions():
    failure, sink = run_pressure()
    assert failure is None, failure
    (record,) = [d for name, d in sink.measurements if name == "coverage"]
    assert record["verified"] and record["ran"]["preemptions"] > 0, record


def test_kv_pressure_catches_preemption_that_loses_draft_state():
    failure, sink = run_pressure("preempt_loses_draft_state")
    assert failure and "under KV pressure differ from their serial output" in failure, failure
    assert any(f.check == "kv-pressure" and f.severity == "bug" for f in sink.items)


@pytest.fixture(scope="module")
def ramp_bench():
    correct = reference_route("refs")
    workload = build_workload(tokenizer(), size=12, seed=0)
    refs = serial_references(handle(correct, "candidate").generate, workload, max_tokens=RAMP_MAX_TOKENS)
    correct.batcher.close()
    return workload, refs


def run_ramp(ramp_bench, fault=None):
    workload, refs = ramp_bench
    route = reference_route("candidate", max_batch="16", **({"fault": fault} if fault else {}))
    base = baseline_handle()
    try:
        return outcome_of(lambda sink: ramp_suite.test_outputs_equal_serial_through_a_batch_size_ramp(
            candidate=handle(route, "candidate"), baseline=base, tokenizer=tokenizer(),
            stress_budget=budget_for(batched=True, levels=(32,), stress_requests=40), stress_workload=workload,
            stress_references=refs, stress_max_tokens=RAMP_MAX_TOKENS, suite_config=CONFIG, near_tie_policy=policy(),
            stress_control=LoadControl(base, None, alpha=0.01), findings=sink))
    finally:
        route.batcher.close()


def test_ramp_passes_the_correct_engine_up_to_its_slots(ramp_bench):
    failure, sink = run_ramp(ramp_bench)
    assert failure is None, failure
    (info,) = [f for f in sink.items if f.severity == "info"]
    assert info.details["sizes"] == [1, 3, 7, 15, 7, 3, 1] and info.details["slots"] == 16   # slots cap the ramp
    (record,) = [d for name, d in sink.measurements if name == "coverage"]
    assert record["verified"], record


def test_ramp_catches_a_batch_size_threshold_fault_only_above_it(ramp_bench):
    failure, sink = run_ramp(ramp_bench, "batch_threshold")
    assert failure and "batch sizes [7, 15]" in failure, failure


def test_ramp_sizes_and_pressure_plan():
    assert ramp_sizes(32) == [1, 3, 7, 15, 31, 15, 7, 3, 1] and ramp_sizes(9) == [1, 3, 7, 9, 7, 3, 1]
    assert ramp_sizes(1) == [1]
    big = plan_pressure(capacity=262144, concurrency=32, prompt_tokens=[30], room=480, requests=192)
    assert big.why_not and "holds the whole offered load" in big.why_not
    tight = plan_pressure(capacity=2048, concurrency=16, prompt_tokens=[30, 40], room=400, requests=64)
    assert not tight.why_not and tight.offered > 2048 and tight.max_tokens >= 96
    unknown = plan_pressure(capacity=None, concurrency=8, prompt_tokens=[30], room=480, requests=64)
    assert not unknown.why_not and unknown.max_tokens == 96
    assert "no limit" in plan_pressure(capacity=0, concurrency=8, prompt_tokens=[30], room=480, requests=64).why_not
    assert plan_pressure(capacity=1536, concurrency=32, prompt_tokens=[30], room=480, requests=64, slots=12).offered > 1536
