"""The report's route context: speculation really ran, counter invariants, baseline parity, latency."""
from __future__ import annotations

from pathlib import Path

from spec_route_suite.routes.base import AcceptanceSnapshot
from spec_route_suite.reports.acceptance import DID_NOT_RUN, MISSING, RAN, UNKNOWN, speculation_status
from spec_route_suite.routes.acceptance import acceptance_profile
from spec_route_suite.reports.collector import CheckOutcome, RunCollector, WorkerState
from spec_route_suite.reports.coverage import FAMILIES, CoverageRecord
from spec_route_suite.reports.parity import parity
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.render_markdown import render_summary
from spec_route_suite.reports.run_report import build_run_report

INVENTORY = {"engine": "transformers", "model": "target", "tokenizer_hash": "abc", "dtype": "float32",
             "max_model_len": 512, "speculation": {"method": "assisted_generation"}, "extra": {}}


def _collector(tmp_path: Path, *, candidate_kind: str, workers: list[WorkerState]) -> RunCollector:
    collector = RunCollector(run_dir=tmp_path / "run", run_id="run", redact=Redactor(()), is_worker=False,
                             config_public={"baseline": {"name": "baseline", "kind": "hf"},
                                            "candidates": [{"name": "candidate", "kind": candidate_kind}]})
    collector.outcomes = {f"t::{f}": CheckOutcome(f"t::{f}", f, "passed", 0.1) for f in FAMILIES}
    collector.measurements = {"coverage": [{**CoverageRecord(check=f, route="candidate", verified=True,
                                                             ran={"requests": 4}).as_measurement(),
                                            "test_id": f"t::{f}"} for f in FAMILIES]}
    collector.worker_states = [w.__dict__ for w in workers]
    return collector


def _worker(acceptance: dict | None, *, dtype: str = "float32", latency=((0.5, 10), (1.5, 30))) -> WorkerState:
    return WorkerState(inventories={"baseline": {**INVENTORY, "speculation": {}},
                                    "candidate": {**INVENTORY, "dtype": dtype}},
                       acceptance={"candidate": acceptance} if acceptance else {},
                       latency={"candidate": [list(s) for s in latency]}, memory={"peak_rss_mib": 900.0})


def test_in_process_counters_add_up_across_workers_and_speculation_ran(tmp_path):
    counters = {"drafts": 10, "draft_tokens": 40, "accepted": 20, "accepted_per_pos": [8, 6, 4, 2]}
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(counters), _worker(counters)]))
    acc = report["acceptance"]["candidate"]
    assert (acc["drafts"], acc["accepted"], acc["accepted_per_pos"]) == (20, 40, [16, 12, 8, 4])
    assert acc["mean_acceptance_length"] == 3.0 and acc["invariants_hold"]
    assert report["speculation"][0]["status"] == RAN and report["verdict"] == "adopt"
    assert report["latency"]["candidate"]["requests"] == 4 and report["memory"]["worker_peak_rss_mib"] == 900.0
    assert report["notes"] == [], "no note was recorded"
    assert "| `candidate` | ran | 3.0 |" in render_summary(report)


def test_controller_notes_reach_the_report(tmp_path):
    collector = _collector(tmp_path, candidate_kind="openai", workers=[_worker(None)])
    collector.worker_state.notes.append("managed servers did not start: port 18100 busy")
    report = build_run_report(collector)
    assert report["notes"] == ["managed servers did not start: port 18100 busy"]
    assert "## Notes\n\n- managed servers did not start: port 18100 busy" in render_summary(report)


def test_server_counters_are_not_summed_across_workers(tmp_path):
    """Every worker sees the same cumulative /metrics: only the controller's difference counts."""
    cumulative = {"drafts": 1000, "draft_tokens": 4000, "accepted": 2000, "accepted_per_pos": [800, 600, 400, 200]}
    collector = _collector(tmp_path, candidate_kind="openai", workers=[_worker(cumulative), _worker(cumulative)])
    collector.server_acceptance = {"candidate": acceptance_profile(AcceptanceSnapshot(10, 40, 20, (8, 6, 4, 2)))}
    assert build_run_report(collector)["acceptance"]["candidate"]["drafts"] == 10


def test_speculation_that_did_not_run_keeps_the_route_from_adoption(tmp_path):
    idle = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(idle)]))
    assert report["speculation"][0]["status"] == DID_NOT_RUN
    assert report["verdict"] == "wait" and "speculation did not run" in report["verdict_reason"]


def test_broken_counter_invariants_are_named(tmp_path):
    growing = {"drafts": 10, "draft_tokens": 40, "accepted": 12, "accepted_per_pos": [2, 4, 6, 0]}
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(growing)]))
    assert report["acceptance"]["candidate"]["invariants"]["per_position_non_increasing"] is False
    assert report["verdict"] == "wait" and "per_position_non_increasing" in report["verdict_reason"]


def test_no_counters_means_not_verified_not_adopted(tmp_path):
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(None)]))
    assert report["speculation"][0]["status"] == UNKNOWN and report["verdict"] == "pilot"
    assert speculation_status("c", inventory={"speculation": {}}, profile=None)["status"] == UNKNOWN


def test_a_server_that_died_before_counting_a_draft_is_missing_evidence_not_speculation_off():
    """vLLM F5 kills a speculative engine at its first top_k request, seconds into a run: its counters never
    moved. That says nothing about whether it speculates; a live server that drafted nothing does."""
    inventory = {"speculation": {"method": "ngram"}}
    zero = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": [0, 0, 0, 0]}
    died = speculation_status("c", inventory=inventory, profile={**zero, "server_answering_at_end": False})
    assert died["status"] == MISSING and "stopped answering" in died["reason"]
    alive = speculation_status("c", inventory=inventory, profile={**zero, "server_answering_at_end": True})
    assert alive["status"] == DID_NOT_RUN
    drafted = {"drafts": 5, "draft_tokens": 20, "accepted": 8, "accepted_per_pos": [4, 2, 1, 1],
               "server_answering_at_end": False}
    assert speculation_status("c", inventory=inventory, profile=drafted)["status"] == RAN


def test_baseline_parity_warns_on_anything_but_speculation(tmp_path):
    counters = {"drafts": 10, "draft_tokens": 40, "accepted": 20, "accepted_per_pos": [8, 6, 4, 2]}
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(counters, dtype="bfloat16")]))
    assert report["parity"][0]["differences"] == [{"field": "dtype", "baseline": "float32", "candidate": "bfloat16"}]
    assert "dtype 'float32' vs 'bfloat16'" in render_summary(report)
    same = parity(INVENTORY, {**INVENTORY, "speculation": {"method": "ngram"}, "draft": "d"}, candidate_name="c")
    assert same["warning"] is None and same["differences"] == []
    served = parity({**INVENTORY, "model": "target"},
                    {**INVENTORY, "model": "/srv/models/target", "extra": {"served_model_name": "tiny"}},
                    candidate_name="c")
    assert served["warning"] is None, "a served name or path of the same weights is not a difference"
    unknown = parity(INVENTORY, {**INVENTORY, "dtype": "unknown"}, candidate_name="c")
    assert unknown["unknown"] == ["dtype"] and unknown["warning"] is None


def test_server_memory_gauges_are_read_from_metrics_text():
    from spec_route_suite.servers import _gauges
    text = ("# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 3.2e+09\n"
            'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25\nnot a sample\n')
    assert _gauges(text) == {"resident_memory_mib": 3051.8, "kv_cache_usage": 0.25}
    assert _gauges("vllm:num_requests_running 0.0\n") == {}
