"""The report's route context: speculation really ran, counter invariants, baseline parity, latency."""
from __future__ import annotations

import functools
from pathlib import Path

from spec_route_suite.routes.base import AcceptanceSnapshot
from spec_route_suite.reports.acceptance import (ACCEPTED_NOTHING, ALMOST_NOTHING, DID_NOT_RUN, FLOOR_MIN_DRAFT_TOKENS,
                                                 MISSING, RAN, UNKNOWN, below_floor, speculation_status)
from spec_route_suite.routes.speculation.acceptance import acceptance_profile
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


# ---------------------------------------------------------------- accepted nothing (issue #34 items 3 and 12)

IDLE = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []}
REJECTED = {"drafts": 10, "draft_tokens": 40, "accepted": 0, "accepted_per_pos": [0, 0, 0, 0]}
ACCEPTED = {"drafts": 10, "draft_tokens": 40, "accepted": 20, "accepted_per_pos": [8, 6, 4, 2]}


def test_speculation_that_drafts_but_accepts_nothing_waits(tmp_path):
    """40 drafted tokens, none accepted: the accept path never ran, every answer was the target's own. It read
    "ran" (drafts > 0) and the run adopted; now "accepted nothing", wait, said first. One accepted token adopts."""
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(REJECTED)]))
    assert report["acceptance"]["candidate"]["speculation_ran"] is False
    assert report["acceptance"]["candidate"]["drafted"] is True
    assert report["speculation"][0]["status"] == ACCEPTED_NOTHING
    assert report["verdict"] == "wait"
    assert report["verdict_reason"].startswith("speculation ran but accepted nothing on `candidate` (10 drafts, 40 "
                                               "drafted tokens, none accepted)"), report["verdict_reason"]
    assert "| `candidate` | accepted nothing |" in render_summary(report)
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(ACCEPTED)]))
    assert report["speculation"][0]["status"] == RAN and report["verdict"] == "adopt", report["verdict_reason"]


def _class(category: str, draft_tokens: int, accepted: int) -> dict:
    return {"source": "traffic", "category": category, "answers": 3, "tokens": 72, "method": "per-answer counters",
            "drafts": draft_tokens // 4, "draft_tokens": draft_tokens, "accepted": accepted,
            "accepted_per_pos": [], "why": ""}


def _run_with_classes(tmp_path: Path, classes: list[dict]) -> dict:
    """The report of a run whose route accepts overall and whose class phases measured `classes`."""
    collector = _collector(tmp_path, candidate_kind="hf", workers=[_worker(ACCEPTED)])
    collector.measurements["class_acceptance"] = [{"test_id": "t::class-acceptance", "route": "candidate",
                                                   "measured_by": "in the test", "classes": classes}]
    return build_run_report(collector)


def test_every_class_that_accepted_nothing_is_named_even_when_no_class_accepted(tmp_path):
    """Class phases where no class accepted a draft (a total collapse) named no class, since a class was named
    only beside another that accepts, and the run adopted on the route's other traffic; now each class is named
    and the route waits. One class collapsed beside one that accepts is named too; all classes accepting, none."""
    run = functools.partial(_run_with_classes, tmp_path)
    report = run([_class("short", 40, 0), _class("long", 48, 0)])
    assert report["verdict"] == "wait", report["verdict_reason"]
    for category, tokens in (("short", 40), ("long", 48)):
        assert (f"speculation ran but accepted nothing on prompt class `traffic/{category}` of `candidate` ({tokens} "
                f"drafted tokens, none accepted, nor on any other class)") in report["verdict_reason"]
    report = run([_class("short", 40, 25), _class("long", 48, 0)])
    assert report["verdict"] == "wait" and "`traffic/long` of `candidate` (48 drafted tokens, none accepted, while " \
                                           "other classes accept)" in report["verdict_reason"]
    assert "traffic/short" not in report["verdict_reason"]
    assert run([_class("short", 40, 25), _class("long", 48, 30)])["verdict"] == "adopt"


def test_a_route_whose_speculation_did_not_run_says_so_before_its_findings(tmp_path):
    """A candidate with a correctness finding whose speculation did not run: the reason named the finding only,
    and the user went after a speculation bug on a route that never speculated. It still reads avoid (the answers
    are wrong), but "speculation did not run" comes first; the same for accepted nothing."""
    from spec_route_suite.reports.findings import Finding
    bug = Finding(check="greedy", severity="bug", route="candidate", prompt_id="p", title="diverges", uid="w-1")
    for counters, lead in ((IDLE, "speculation did not run on `candidate`"),
                           (REJECTED, "speculation ran but accepted nothing on `candidate`")):
        collector = _collector(tmp_path, candidate_kind="hf", workers=[_worker(counters)])
        collector.findings = [bug]
        collector.worker_states[0]["findings_recorded"] = 1
        report = build_run_report(collector)
        for reason in (report["verdict_reason"], report["route_verdicts"]["candidate"]["reason"]):
            assert reason.startswith(lead) and reason.endswith("1 correctness finding(s) against the candidate"), reason
        assert report["verdict"] == "avoid"
    collector = _collector(tmp_path, candidate_kind="hf", workers=[_worker(ACCEPTED)])
    collector.findings = [bug]
    collector.worker_states[0]["findings_recorded"] = 1
    assert build_run_report(collector)["verdict_reason"] == "1 correctness finding(s) against the candidate"


def test_a_planted_total_collapse_and_a_plain_route_with_a_divergence_say_so_first(tmp_path):
    """Run for real. The reference engine with collapse_long_prompts on long prompts only drafts 4 tokens a step
    and accepts none: "accepted nothing" first, its class named, wait (it read "ran" and pilot); the correct engine
    on the same prompts ran. The target alone (no draft) with a planted greedy divergence: avoid, and the reason
    starts with "speculation did not run" (it named the finding only)."""
    from tests.mutation import run_route_suite
    args = ["--categories", "long"]
    collapsed = run_route_suite("reference:?fault=collapse_long_prompts", args, tmp_path / "collapsed",
                                paths=["equivalence/test_class_acceptance.py"])
    assert collapsed.exit_code == 0, collapsed.output_tail
    report = collapsed.report
    assert report["speculation"][0]["status"] == ACCEPTED_NOTHING and report["verdict"] == "wait"
    assert report["verdict_reason"].startswith("speculation ran but accepted nothing on `candidate`")
    assert "on prompt class `fixture/long` of `candidate`" in report["verdict_reason"]
    correct = run_route_suite("reference:", args, tmp_path / "correct", paths=["equivalence/test_class_acceptance.py"])
    assert correct.report["speculation"][0]["status"] == RAN and correct.report["verdict"] == "pilot"
    assert "accepted nothing" not in correct.report["verdict_reason"]
    target = Path(__file__).resolve().parent.parent / "fixtures" / "models" / "target"
    plain = run_route_suite(f"hf:{target}?plant=divergence@3", ["--categories", "math", "--prompt-limit", "1"],
                            tmp_path / "plain", paths=["equivalence/test_greedy.py"])
    report = plain.report
    assert report["speculation"][0]["status"] == DID_NOT_RUN and report["verdict"] == "avoid", plain.output_tail
    assert report["verdict_reason"].startswith("speculation did not run on `candidate`"), report["verdict_reason"]


# ---------------------------------------------------------------- accepted almost nothing (issue #42 item 1)

ONE_IN_30000 = {"drafts": 30_000, "draft_tokens": 210_000, "accepted": 1, "accepted_per_pos": [1, 0, 0, 0, 0, 0, 0]}


def _measured(drafts: int, k: int, rates: list[float]) -> dict:
    """A profile from a measured run's drafts and per-position acceptance rates."""
    per_pos = [round(r * drafts) for r in rates]
    return {"drafts": drafts, "draft_tokens": k * drafts, "accepted": sum(per_pos), "accepted_per_pos": per_pos}


# the weakest real routes over a whole run (reports/acceptance.py's docstring): llama.cpp's EAGLE-3 under F4 on the
# full-budget run (1.79, positions as measured; its drafts stand in at 40,000), vLLM's n-gram on the full suite
WEAKEST_DRAFTER = _measured(40_000, 7, [0.23, 0.15, 0.11, 0.09, 0.08, 0.06, 0.06])
WEAKEST_ROUTE = _measured(28_343, 4, [0.105, 0.063, 0.024, 0.009])


def test_one_accepted_token_in_30000_drafts_is_not_ran_and_waits(tmp_path):
    """It read "ran" (one accepted token) and the run adopted; now "ran but accepted almost nothing", wait, said
    first, with the counts and the floor."""
    report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(ONE_IN_30000)]))
    assert report["speculation"][0]["status"] == ALMOST_NOTHING != RAN
    assert report["verdict"] == "wait"
    assert report["verdict_reason"].startswith(
        "speculation ran but accepted almost nothing on `candidate` (1 of 210000 drafted tokens accepted (0.00%), "
        "mean acceptance length 1.00003 over 30000 drafts; the floor is 1.1 and 1% of drafted tokens): its accept "
        "path barely ran"), report["verdict_reason"]
    assert report["route_verdicts"]["candidate"]["verdict"] == "wait"
    assert "| `candidate` | ran but accepted almost nothing |" in render_summary(report)


def test_the_weakest_real_routes_ran_and_adopt(tmp_path):
    for profile, length in ((WEAKEST_DRAFTER, 1.78), (WEAKEST_ROUTE, 1.2)):
        report = build_run_report(_collector(tmp_path, candidate_kind="hf", workers=[_worker(profile)]))
        assert round(report["acceptance"]["candidate"]["mean_acceptance_length"], 2) == length
        assert report["speculation"][0]["status"] == RAN and report["verdict"] == "adopt", report["verdict_reason"]


def test_the_floor_holds_both_limits_and_judges_enough_drafted_tokens_only():
    assert below_floor(drafts=1000, draft_tokens=7000, accepted=100) == ""            # 1.10, 1.4%
    assert "mean acceptance length 1.09" in below_floor(drafts=1000, draft_tokens=1000, accepted=90)   # 9% of 1
    assert "(0.90%)" in below_floor(drafts=1000, draft_tokens=20_000, accepted=180)   # 1.18, but 0.9% of 20
    assert "(0.90%)" in below_floor(drafts=None, draft_tokens=20_000, accepted=180)   # no steps stated: the share
    assert below_floor(drafts=1000, draft_tokens=7000, accepted=0) == ""             # none: "accepted nothing"
    few = {"drafts": 50, "draft_tokens": FLOOR_MIN_DRAFT_TOKENS - 1, "accepted": 1, "accepted_per_pos": [1]}
    inventory = {"speculation": {"method": "x"}}
    status = speculation_status("c", inventory=inventory, profile=few)
    assert status["status"] == RAN and "the floor was not judged" in status["reason"]
    enough = {**few, "draft_tokens": FLOOR_MIN_DRAFT_TOKENS}
    assert speculation_status("c", inventory=inventory, profile=enough)["status"] == ALMOST_NOTHING


def test_a_weak_real_route_falls_below_the_floor_by_chance_rarely_at_the_minimum_sample():
    """The docstring's figure: the weakest real profile (5% of drafted tokens accepted, 4 a step) at
    FLOOR_MIN_DRAFT_TOKENS drafted tokens reads below the floor (or accepts none) with probability 0.004."""
    from scipy.stats import binom
    n = FLOOR_MIN_DRAFT_TOKENS
    chance = sum(binom.pmf(a, n, 0.05) for a in range(n + 1)
                 if a == 0 or below_floor(drafts=n // 4, draft_tokens=n, accepted=a))
    assert 0.003 < chance < 0.005, chance


def test_a_class_that_accepts_almost_nothing_is_named_and_waits(tmp_path):
    """One class at 3 of 2,400 drafted tokens beside one that accepts: that class named, in its own words, wait;
    both classes accepting well: adopt."""
    run = functools.partial(_run_with_classes, tmp_path)
    report = run([_class("short", 400, 250), _class("long", 2400, 3)])
    assert report["verdict"] == "wait", report["verdict_reason"]
    assert ("speculation ran but accepted almost nothing on prompt class `traffic/long` of `candidate` (3 of 2400 "
            "drafted tokens accepted (0.12%), mean acceptance length 1.005 over 600 drafts; the floor is 1.1 and 1% of "
            "drafted tokens): its accept path barely ran there") in report["verdict_reason"], report["verdict_reason"]
    assert "traffic/short" not in report["verdict_reason"]
    assert run([_class("short", 400, 250), _class("long", 2400, 900)])["verdict"] == "adopt"
