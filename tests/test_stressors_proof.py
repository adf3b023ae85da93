"""The proof: the stressors catch the reference engine's planted mixing faults, name the right source,
reach >= 95% detection at a 1% mixing rate within the default budget, and pass the correct engine.

Ground truth is the engine's `fault_log` (victim request, source request), which the suite's
detectors never see. The detection probability is estimated from a 5% run: the per-request
event rate at concurrency 8 and the share of events the detector catches and attributes
correctly give P(detect within N requests at 1%) = 1 - (1 - 0.01 * company * caught)^N.
benchmarks/mixing_detection.py measures the same thing directly by repeated 1% runs.
These tests run the embedded models (tens of seconds each on CPU).
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from spec_route_suite.embedded import DRAFT_DIR, TARGET_DIR
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.session import RouteHandle
from spec_route_suite.stressors.canary import build_workload, mean_latency, renderer, serial_references
from spec_route_suite.stressors.conftest import STRESS_MAX_TOKENS
from spec_route_suite.stressors.driver import BATCHED_DEFAULT, drive_handle, mixed_load, round_robin
from spec_route_suite.stressors.mixing.detect import CONTEXT_PROBE, FOREIGN_CANARY, detect, probe_contexts

ROOT = Path(__file__).resolve().parent.parent
TRAINED = all((d / "model.safetensors").exists() for d in (TARGET_DIR, DRAFT_DIR))
pytestmark = pytest.mark.skipif(not TRAINED, reason="embedded models not trained yet (python -m spec_route_suite.training.train)")
POOL = 48
LOAD = 384            # every in-process load run below, the correct engine's included: one budget
ROUTE_SUITE_LOAD = 128   # --stress-requests of every route-suite run below, the correct engine's included


@pytest.fixture(scope="module")
def bench():
    from spec_route_suite.tokenizers import load_tokenizer
    from spec_route_suite.reference.route import ReferenceRoute, load_model
    from spec_route_suite.routes.spec import parse_route_uri

    torch.set_num_threads(1)
    loop = BackgroundLoop()
    spec = parse_route_uri("candidate", "reference:", base=ROOT)
    models = (load_model(spec.model), load_model(spec.draft))
    tokenizer = load_tokenizer(spec.tokenizer)

    def handle(query: str) -> RouteHandle:
        s = parse_route_uri("candidate", "reference:" + (f"?{query}" if query else ""), base=ROOT)
        return RouteHandle(ReferenceRoute(s, models=models), s, loop, timeout_s=120.0)

    correct = handle("")
    workload = build_workload(tokenizer, size=POOL, seed=0)
    refs = serial_references(correct.generate, workload, max_tokens=STRESS_MAX_TOKENS)
    correct.close()
    yield {"handle": handle, "workload": workload, "refs": refs, "tokenizer": tokenizer}
    loop.close()


def mixing_run(bench, query: str, *, n: int, seed: int):
    handle = bench["handle"](query)
    workload, refs = bench["workload"], bench["refs"]
    rng = random.Random(seed)
    latency = mean_latency(refs)
    keys = round_robin(workload.keys, n, rng=rng)
    subs = mixed_load([(k, workload.get(k).request(max_tokens=STRESS_MAX_TOKENS)) for k in keys], level=8, rng=rng,
                      mean_latency_s=latency, tag=f"proof{seed}")
    run = drive_handle(handle, subs, concurrency=8, mean_latency_s=latency)
    report = probe_contexts(detect(workload=workload, references=refs, outcomes=run.outcomes), workload=workload,
                            outcomes=run.outcomes, generate=handle.generate, render=renderer(bench["tokenizer"]),
                            max_tokens=STRESS_MAX_TOKENS)
    truth = handle.route.fault_log
    handle.close()
    return run, report, truth


def test_cross_context_mixing_is_caught_and_attributed_and_reaches_95_percent_at_1_percent(bench):
    run, report, truth = mixing_run(bench, "fault=cross_context_mixing&mix_rate=0.05&seed=7", n=LOAD, seed=7)
    key_of = {o.request_id: o.key for o in run.outcomes}
    sources = dict(truth)
    assert len(run.completed) == LOAD and len(truth) >= 8, run.describe()
    assert report.contaminated, "planted mixing must be detected"
    for att in report.contaminated:
        assert att.victim_request in sources, f"attributed a request the engine never mixed: {att.line()}"
        true_source = key_of[sources[att.victim_request]]
        assert true_source in (att.source_key, *att.alternatives), f"wrong source (true {true_source}): {att.line()}"
    exact = sum(key_of[sources[a.victim_request]] == a.source_key for a in report.contaminated)
    caught = len(report.contaminated) / len(truth)
    company = len(truth) / (0.05 * LOAD)
    budget = BATCHED_DEFAULT["mixing_requests"]
    p_detect = 1 - (1 - 0.01 * min(company, 1.0) * caught) ** budget
    print(f"\ncross_context_mixing @5%: {len(truth)} events in {LOAD} requests at c=8, {len(report.contaminated)} "
          f"caught and attributed ({exact} to the exact source, the rest with the source among equal candidates), "
          f"{len(report.unattributed)} unattributed; P(detect within {budget} at 1%) ~= {p_detect:.3f}")
    assert caught >= 0.6
    assert p_detect >= 0.95


def test_kv_slot_swap_is_caught(bench):
    run, report, truth = mixing_run(bench, "fault=kv_slot_swap&mix_rate=0.1&seed=3", n=LOAD, seed=3)
    key_of = {o.request_id: o.key for o in run.outcomes}
    touched = {v for v, _ in truth}
    assert truth, "the fault should have fired"
    assert report.mismatches, "a KV slot swap must change some output"
    assert {a.victim_request for a in report.mismatches} <= touched, "only swapped rows may differ"
    right, proofs, misnamed = 0, 0, []
    for att in report.contaminated:
        partners = {key_of[s] for v, s in truth if v == att.victim_request}
        named = bool(partners & {att.source_key, *att.alternatives})
        right += named
        # A fact of a request in flight in the output, or the victim's question reproduced in a neighbour's
        # context, is strong evidence. Closeness alone (FOREIGN_ANSWER) is a hint: a one-step KV swap leaves
        # garbled text near every answer of the same template (code, JSON), so only its share is reported. So is
        # a fact of a request that was not in flight: the line says "stale state?", a hypothesis the swap (of
        # rows in one batch) never makes true. The detector drops two coincidences CI run 29 counted here: a
        # garbled own answer ("Your lucky number is 2." for 286) equal to a neighbour's guess, and a canary the
        # victim's own conversation guesses when asked for it. What is left may still coincide: at most one in ten.
        strong = att.method == CONTEXT_PROBE or (att.method == FOREIGN_CANARY and bool(att.source_requests_in_flight))
        if strong:
            proofs += 1
            if not named:
                misnamed.append(att.line())
    print(f"\nkv_slot_swap @10%: {len(touched)} rows swapped, {len(report.mismatches)} outputs changed, "
          f"{len(report.contaminated)} attributed ({right} to their swap partner; {proofs} strong, "
          f"{len(misnamed)} of them misnamed)")
    assert len(misnamed) <= max(1, proofs // 10), misnamed


def test_correct_engine_shows_no_mismatch_under_load(bench):
    run, report, truth = mixing_run(bench, "seed=1", n=LOAD, seed=1)
    assert truth == [] and len(run.completed) == LOAD and report.mismatches == (), [a.line() for a in report.mismatches]


def route_suite(tmp_path, candidate: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-m", "pytest", "stressors", "-q", "-p", "no:cacheprovider", "--candidate", candidate,
           "--report-dir", str(tmp_path), *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    reports = list(tmp_path.glob("*/report.json"))
    return done, json.loads(reports[0].read_text()) if reports else {}


def test_correct_reference_engine_passes_every_stressor(tmp_path):
    done, report = route_suite(tmp_path, "reference:", "--stress-requests", str(ROUTE_SUITE_LOAD), "--concurrency", "1,8")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    checks = {f["check"] for f in report["findings"] if f["severity"] == "info"}
    assert checks == {"mixing", "accuracy", "batch-invariance", "prefix-cache", "aborts", "batch-ramp"}
    assert not [f for f in report["findings"] if f["severity"] in ("bug", "error")]
    rows = {r["check"]: r for r in report["coverage"] if r["route"] == "candidate"}
    for check in ("mixing", "accuracy", "batch-invariance", "aborts", "batch-ramp"):
        assert rows[check]["status"] == "verified" and "engine's own gauge" in rows[check]["could_detect"], rows[check]
    assert rows["prefix-cache"]["status"] == "not applicable", "the reference engine has no prefix cache"


def test_route_suite_fails_a_kv_slot_swap_engine(tmp_path):
    done, report = route_suite(tmp_path, "reference:?fault=kv_slot_swap&mix_rate=0.1", "-k", "mixing",
                               "--stress-requests", str(ROUTE_SUITE_LOAD), "--concurrency", "1,8")
    assert done.returncode == 1, done.stdout[-3000:]
    bugs = [f for f in report["findings"] if f["check"] == "mixing" and f["severity"] == "bug"]
    assert bugs and any("beyond a near-tie" in f["title"] or "mixing" in f["title"] for f in bugs), bugs


def test_route_suite_fails_a_mixing_engine_with_matrix_and_repro(tmp_path):
    done, report = route_suite(tmp_path, "reference:?fault=cross_context_mixing&mix_rate=0.1", "-k", "mixing",
                               "--stress-requests", str(ROUTE_SUITE_LOAD), "--concurrency", "1,8")
    assert done.returncode == 1, done.stdout[-3000:]
    (bug,) = [f for f in report["findings"] if f["check"] == "mixing" and "cross-request mixing" in f["title"]]
    assert bug["severity"] == "bug" and bug["details"]["contamination_matrix"]
    assert bug["details"]["requests_checked"] == ROUTE_SUITE_LOAD
    compile(bug["details"]["replay"]["script"], "replay.py", "exec")
    assert "fault=cross_context_mixing" in bug["details"]["replay"]["script"]
    assert bug["details"]["repro"]["judge"] == "load" and bug["details"]["repro"]["case"]["steps"]
    assert any(path.startswith("repro/") and "mixing" in path for path in report["repro_scripts"])
