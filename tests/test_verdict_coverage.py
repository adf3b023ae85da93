"""A verdict that means what it says (issue #12): each rule proven both ways.

Unit level: the coverage table and the verdict it drives (a serialising route's stressors, an
underpowered distribution budget, a finding about the baseline, deselected families), the hf
route's draft counter, the stressors' load witness, the baseline boundary attribution.
Run level (subprocess, small budgets): a candidate that is the baseline itself waits because
speculation did not run; a speculative baseline or a candidate on the baseline's own endpoint
exits 4; --greedy-policy and a pinned tau reach the stressors.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spec_route_suite.equivalence.boundaries import Case, run_sweep
from spec_route_suite.routes.base import Completion, Request, RouteWrapper
from spec_route_suite.routes.spec import EMBEDDED_MODELS
from spec_route_suite.reports.acceptance import DID_NOT_RUN, MISSING, UNKNOWN, speculation_status
from spec_route_suite.reports.collector import CheckOutcome, RunCollector, WorkerState
from spec_route_suite.reports.coverage import FAMILIES, STRESSOR_FAMILIES, CoverageRecord
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.render_markdown import render_summary
from spec_route_suite.reports.run_report import build_run_report
from spec_route_suite.reports.writer import write_run_folder
from spec_route_suite.stressors.coverage import LoadWitness, lifetime_overlap
from spec_route_suite.stressors.driver import burst, drive_handle, plan
from tests.test_greedy_routes import handle, hf_route, reference_route

ROOT = Path(__file__).resolve().parent.parent
TARGET, DRAFT = EMBEDDED_MODELS / "target", EMBEDDED_MODELS / "draft"
SEEN = {"requests": 4}   # a passing test's evidence: what it compared
COUNTERS = {"drafts": 10, "draft_tokens": 40, "accepted": 20, "accepted_per_pos": [8, 6, 4, 2]}


def collector(tmp_path: Path, *, records=(), findings=(), families=FAMILIES, candidates=("candidate",),
              with_evidence: bool = True) -> RunCollector:
    """A finished run where every family in `families` passed on every candidate, plus coverage records: `records`
    where given, else (with_evidence) each passing test's own record of a few requests compared."""
    run = RunCollector(run_dir=tmp_path / "run", run_id="run", redact=Redactor(()), is_worker=False,
                       config_public={"baseline": {"name": "baseline", "kind": "hf"},
                                      "candidates": [{"name": c, "kind": "hf"} for c in candidates]})
    run.outcomes = {f"t::{f}[{c}]": CheckOutcome(f"t::{f}[{c}]", f, "passed", 0.1) for f in families for c in candidates}
    run.findings = list(findings)
    stated = {(r.check, r.route) for r in records}
    evidence = [CoverageRecord(check=f, route=c, verified=True, ran={"requests": 4}) for f in families
                for c in candidates if (f, c) not in stated] if with_evidence else []
    run.measurements = {"coverage": [{**r.as_measurement(), "test_id": f"t::{r.check}[{r.route}]"}
                                     for r in [*records, *evidence]]}
    inventory = {"engine": "transformers", "speculation": {"method": "assisted_generation"}, "extra": {}}
    run.worker_states = [WorkerState(findings_recorded=len(run.findings), inventories={c: inventory for c in candidates},
                                     acceptance={c: COUNTERS for c in candidates}).__dict__]
    return run


def serialised(route: str) -> list[CoverageRecord]:
    why = "the route serialises requests (capability concurrency=False): no two requests ever share an engine step"
    return [CoverageRecord(check=f, route=route, verified=False, reason=why) for f in STRESSOR_FAMILIES]


def test_every_family_verified_adopts(tmp_path):
    report = build_run_report(collector(tmp_path))
    assert report["verdict"] == "adopt", report["verdict_reason"]
    assert {row["status"] for row in report["coverage"]} == {"verified"}
    assert "## Coverage" in render_summary(report)


def test_passing_tests_that_recorded_no_evidence_do_not_adopt(tmp_path):
    """Every family passed, but no test said what it compared: nothing is verified (it was adopt before)."""
    report = build_run_report(collector(tmp_path, with_evidence=False))
    assert report["verdict"] == "pilot" and "recorded no evidence" in report["verdict_reason"]
    vacuous = [CoverageRecord(check=f, route="candidate", verified=True, ran={"tokens compared": 0}) for f in FAMILIES]
    report = build_run_report(collector(tmp_path, records=vacuous))
    assert report["verdict"] == "pilot" and "vacuous: the test(s) passed with nothing compared" in report["verdict_reason"]


def test_a_serialising_route_gets_stressors_not_verified_and_pilot(tmp_path):
    report = build_run_report(collector(tmp_path, records=serialised("candidate")))
    assert report["verdict"] == "pilot"
    for family in STRESSOR_FAMILIES:
        row = next(r for r in report["coverage"] if r["check"] == family)
        assert row["status"] == "not verified" and "serialises requests" in row["why"]
        assert f"{family} not verified" in report["verdict_reason"]


def test_each_candidate_is_judged_on_its_own_evidence(tmp_path):
    """The default pair: hf serialises, the batching engine verifies the stressors. The batching route earns
    adopt; the serial one does not borrow its coverage, and the headline never says more than it earned."""
    records = serialised("hf") + [CoverageRecord(check=f, route="batched", verified=True, ran=SEEN) for f in STRESSOR_FAMILIES]
    report = build_run_report(collector(tmp_path, records=records, candidates=("hf", "batched")))
    rows = {(r["check"], r["route"]): r["status"] for r in report["coverage"]}
    assert rows[("mixing", "hf")] == "not verified" and rows[("mixing", "batched")] == "verified"
    assert report["route_verdicts"]["batched"]["verdict"] == "adopt", report["route_verdicts"]
    hf = report["route_verdicts"]["hf"]
    assert hf["verdict"] == "pilot" and "mixing not verified" in hf["reason"] and "batched" not in hf["reason"]
    assert report["verdict"] == "pilot" and "`hf` pilot, `batched` adopt" in report["verdict_reason"]
    summary = render_summary(report)
    assert "| `hf` | **PILOT** |" in summary and "| `batched` | **ADOPT** |" in summary
    alone = build_run_report(collector(tmp_path, records=[CoverageRecord(check=f, route="batched", verified=True, ran=SEEN)
                                                          for f in STRESSOR_FAMILIES], candidates=("batched",)))
    assert alone["verdict"] == "adopt" and "| `batched` | **ADOPT** | 0 |" in render_summary(alone)


def test_a_finding_against_one_candidate_is_not_held_against_the_other(tmp_path):
    records = [CoverageRecord(check=f, route=r, verified=True, ran=SEEN) for f in STRESSOR_FAMILIES for r in ("a", "b")]
    bug = Finding(check="greedy", severity="bug", route="a", prompt_id="p", title="diverges")
    report = build_run_report(collector(tmp_path, records=records, candidates=("a", "b"), findings=[bug]))
    assert report["verdict"] == "avoid"
    assert report["route_verdicts"]["a"]["verdict"] == "avoid" and report["route_verdicts"]["b"]["verdict"] == "adopt"


def test_an_underpowered_distribution_budget_is_pilot_with_its_detectable_tv(tmp_path):
    weak = CoverageRecord(check="distribution", route="candidate", verified=False,
                          could_detect="T1.0: TV >= 0.231 per prompt (power 0.9)",
                          reason="T1.0: minimum detectable TV 0.231 is above --detect-tv 0.05 (a serial route's capped budget)")
    report = build_run_report(collector(tmp_path, records=[weak]))
    assert report["verdict"] == "pilot" and "minimum detectable TV 0.231" in report["verdict_reason"]
    strong = CoverageRecord(check="distribution", route="candidate", verified=True, ran=SEEN, could_detect="T1.0: TV >= 0.049")
    assert build_run_report(collector(tmp_path, records=[strong]))["verdict"] == "adopt"


def test_deselected_families_are_not_run_and_keep_the_run_from_adopt(tmp_path):
    report = build_run_report(collector(tmp_path, families=("greedy",)))
    assert report["verdict"] == "pilot" and "not run: near-tie, logprobs" in report["verdict_reason"]
    assert {r["check"] for r in report["coverage"] if r["status"] == "not run"} == set(FAMILIES) - {"greedy"}


def test_no_prefix_cache_is_not_applicable_and_does_not_block_adopt(tmp_path):
    na = CoverageRecord(check="prefix-cache", route="candidate", verified=False, applicable=False,
                        reason="the engine has no prefix cache (its inventory says so)")
    assert build_run_report(collector(tmp_path, records=[na]))["verdict"] == "adopt"
    never_hit = CoverageRecord(check="prefix-cache", route="candidate", verified=False, reason="zero prefix-cache hits")
    report = build_run_report(collector(tmp_path, records=[never_hit]))
    assert report["verdict"] == "pilot" and "zero prefix-cache hits" in report["verdict_reason"]


def test_a_refused_feature_is_listed_not_supported_never_a_pass(tmp_path):
    """A candidate that refuses a request feature (HTTP 400 / documented refusal) gets that feature's row
    "not supported by this route": listed, not verified, and the run cannot adopt."""
    refused = CoverageRecord(check="features", route="candidate", verified=False, supported=False, part="n",
                             could_detect="sampled choices copying one random stream",
                             reason="route 'candidate' does not support n (HTTP 400: n must be 1)")
    report = build_run_report(collector(tmp_path, records=[refused]))
    row = next(r for r in report["coverage"] if r["check"] == "features")
    assert (row["part"], row["status"]) == ("n", "not supported by this route") and "HTTP 400" in row["why"]
    assert report["verdict"] == "pilot" and "features: n not supported by this route" in report["verdict_reason"]
    summary = render_summary(report)
    assert "| features | not supported 0/1 |" in summary and "| not supported by this route | features |" in summary


def test_each_feature_is_its_own_row_and_must_be_covered_on_its_own(tmp_path):
    """One feature verified does not cover another refused everywhere; verified on another candidate, it is
    covered there: that candidate earns adopt, the refusing one does not."""
    def record(part, route, supported=True):
        return CoverageRecord(check="features", route=route, verified=supported, supported=supported, part=part,
                              ran=SEEN if supported else {},
                              reason="" if supported else f"route '{route}' does not support {part}")
    records = [record("logit_bias", "hf"), record("n", "hf", supported=False), record("n", "batched")]
    run = collector(tmp_path, records=records, candidates=("hf", "batched"))
    run.outcomes = {k: v for k, v in run.outcomes.items() if "features" not in k}
    for i, r in enumerate(records):   # one test per feature record, each passed unless refused (then skipped)
        nodeid = f"t::features_{i}[{r.route}]"
        run.outcomes[nodeid] = CheckOutcome(nodeid, "features", "passed" if r.supported else "skipped", 0.1,
                                            reason="" if r.supported else f"not verified: {r.reason}")
    others = [m for m in run.measurements["coverage"] if m["check"] != "features"]
    run.measurements["coverage"] = others + [{**r.as_measurement(), "test_id": f"t::features_{i}[{r.route}]"}
                                             for i, r in enumerate(records)]
    report = build_run_report(run)
    rows = {(r["part"], r["route"]): r["status"] for r in report["coverage"] if r["check"] == "features"}
    assert rows == {("logit_bias", "hf"): "verified", ("n", "hf"): "not supported by this route",
                    ("n", "batched"): "verified"}
    verdicts = report["route_verdicts"]
    assert verdicts["batched"]["verdict"] == "adopt", verdicts
    assert verdicts["hf"]["verdict"] == "pilot" and "features: n not supported by this route" in verdicts["hf"]["reason"]
    assert report["verdict"] == "pilot"
    run.measurements["coverage"] = run.measurements["coverage"][:-1]   # n refused on hf, not run on batched
    del run.outcomes["t::features_2[batched]"]
    assert "features: n not supported by this route" in build_run_report(run)["verdict_reason"]


def test_a_test_stating_two_parts_decides_both_rows(tmp_path):
    """The distribution point with min_p records its family row and a `min_p` row: a failure fails both,
    and a candidate's min_p refusal (the point ran without it) is "not supported" while the point passed."""
    records = [CoverageRecord(check="distribution", route="candidate", verified=True, ran=SEEN),
               CoverageRecord(check="distribution", route="candidate", verified=True, ran=SEEN, part="min_p")]
    run = collector(tmp_path, records=records)
    run.outcomes["t::distribution[candidate]"].outcome = "failed"
    rows = {r["part"]: r["status"] for r in build_run_report(run)["coverage"] if r["check"] == "distribution"}
    assert rows == {"": "failed", "min_p": "failed"}
    records[1] = CoverageRecord(check="distribution", route="candidate", verified=False, supported=False, part="min_p",
                                reason="route 'candidate' does not support min_p (HTTP 400)")
    report = build_run_report(collector(tmp_path, records=records))
    rows = {r["part"]: r["status"] for r in report["coverage"] if r["check"] == "distribution"}
    assert rows == {"": "verified", "min_p": "not supported by this route"}
    assert report["verdict"] == "pilot" and "distribution: min_p not supported" in report["verdict_reason"]


def test_warnings_that_weaken_the_evidence_move_adopt_to_pilot(tmp_path):
    weak = Finding(check="accuracy", severity="warning", route="candidate", uid="w-1",
                   title="accuracy under load weakly verified: only 3 of 12 answers right serially")
    report = build_run_report(collector(tmp_path, findings=[weak]))
    assert report["verdict"] == "pilot" and "weakly verified" in report["verdict_reason"]


def test_a_finding_about_the_baseline_is_not_a_candidate_bug_but_blocks_adopt(tmp_path):
    about_baseline = Finding(check="boundary", severity="bug", route="baseline", uid="w-1",
                             title="the baseline 'baseline' itself breaks stop_string boundary rules")
    report = build_run_report(collector(tmp_path, findings=[about_baseline]))
    assert report["verdict"] == "pilot" and "about the baseline `baseline` itself" in report["verdict_reason"]
    against_candidate = Finding(check="boundary", severity="bug", route="candidate", uid="w-2", title="overshoot")
    assert build_run_report(collector(tmp_path, findings=[against_candidate]))["verdict"] == "avoid"


def test_a_wait_names_route_errors_and_speculation_that_did_not_run_together():
    """A server given a draft but no --spec-type that also had a transport error must still read "speculation
    did not run": the error count alone would send the user after the wrong cause."""
    from spec_route_suite.reports.run_report import verdict_of
    verdict, reason = verdict_of(failed=2, bug_findings=0, error_findings=4, not_verified=0, complete=True,
                                 problems=["speculation did not run on `draft_no_type` (no draft was verified)"])
    assert verdict == "wait" and "4 route error(s)" in reason and "speculation did not run" in reason
    assert verdict_of(failed=0, bug_findings=0, error_findings=1, not_verified=0, complete=True) == (
        "wait", "0 failed check(s), 1 route error(s): investigate before promoting")


def test_a_baseline_that_speculated_keeps_the_run_waiting(tmp_path):
    run = collector(tmp_path)
    run.worker_states[0]["acceptance"]["baseline"] = COUNTERS
    report = build_run_report(run)
    assert report["verdict"] == "wait" and "the baseline `baseline` speculated" in report["verdict_reason"]


def _stated_inventory(flavour: str, bodies: dict) -> dict:
    """A route inventory as an HTTP route builds it from what the server's GET endpoints say."""
    from spec_route_suite.routes.flavours import Probes, by_name
    from spec_route_suite.routes.wire.http import stated
    facts = by_name(flavour).facts(Probes(bodies=bodies, notes={}, model="m"))
    return {"engine": facts.engine, "speculation": dict(facts.speculation), "draft": facts.draft,
            "extra": stated(facts)}


def test_a_plain_vllm_server_posing_as_candidate_did_not_speculate():
    plain = _stated_inventory("vllm", {"/metrics": "vllm:num_requests_running 0\n"})
    status = speculation_status("c", inventory=plain, profile=None)
    assert status["status"] == DID_NOT_RUN and "without spec_decode series" in status["reason"]
    no_metrics = _stated_inventory("vllm", {})
    assert speculation_status("c", inventory=no_metrics, profile=None)["status"] == UNKNOWN
    sglang = _stated_inventory("sglang", {"/get_server_info": {"speculative_algorithm": "EAGLE"}})
    # through its OpenAI endpoint SGLang states it speculates but no answer says how much: not proven
    assert speculation_status("c", inventory=sglang, profile=None)["status"] == UNKNOWN
    # its native /generate answers carry spec_verify_ct: none in a whole run is evidence missing (wait)
    native = {**sglang, "extra": {**sglang["extra"], "per_response_evidence": True}}
    status = speculation_status("c", inventory=native, profile=None)
    assert status["status"] == MISSING and "although the route is configured to speculate" in status["reason"]
    # an SGLang server whose own args name no speculative algorithm states that it does not speculate
    plain_sglang = _stated_inventory("sglang", {"/get_server_info": {"context_length": 512}})
    assert speculation_status("c", inventory=plain_sglang, profile=None)["status"] == DID_NOT_RUN
    llama_md_only = _stated_inventory("llama.cpp", {"/slots": [{"speculative": False, "params": {
        "speculative.types": "none"}}], "/props": {"default_generation_settings": {"n_ctx": 512}}})
    status = speculation_status("c", inventory=llama_md_only, profile=None)
    assert status["status"] == DID_NOT_RUN and "does not speculate" in status["reason"]
    llama_no_slots = _stated_inventory("llama.cpp", {"/props": {"default_generation_settings": {"n_ctx": 512}}})
    assert speculation_status("c", inventory=llama_no_slots, profile=None)["status"] == MISSING
    generic = _stated_inventory("generic", {})
    assert speculation_status("c", inventory=generic, profile=None)["status"] == UNKNOWN


# ---------------------------------------------------------------- the routes' own witnesses

def test_hf_counts_the_drafters_proposals_not_target_passes(loop):
    request = Request(prompt_ids=(1, 5, 9, 13, 20), max_tokens=24)
    plain, assisted = hf_route("plain-witness", False), hf_route("assisted-witness", True)
    for route in (plain, assisted):
        loop.run(route.generate(request), timeout=120)
    idle, ran = loop.run(plain.acceptance(), timeout=10), loop.run(assisted.acceptance(), timeout=10)
    assert (idle.drafts, idle.draft_tokens, idle.accepted) == (0, 0, 0), "plain decoding must not read as speculation"
    assert ran.drafts > 0 and 0 < ran.draft_tokens <= 4 * ran.drafts and ran.accepted <= ran.draft_tokens
    per_pos = list(ran.accepted_per_pos)
    assert sum(per_pos) == ran.accepted and per_pos == sorted(per_pos, reverse=True)


def _burst_run(route, n: int):
    target = handle(route)
    witness = LoadWitness(target)
    subs = plan(((f"k{i}", Request(prompt_ids=(1, 5, 9 + i, 13), max_tokens=8)) for i in range(n)),
                offsets=burst(n), tag="witness")
    witness.add(drive_handle(target, subs, concurrency=n, mean_latency_s=0.2))
    return witness.verdict()


class _Proxy(RouteWrapper):
    """A route seen through a gateway: the same engine, less of what it states (no gauge, or one slot)."""

    def __init__(self, inner, *, gauge: bool = True, slots: int | None = None):
        super().__init__(inner)
        self._gauge, self._slots = gauge, slots

    async def engine_batch_peak(self, reset: bool = False):
        return await super().engine_batch_peak(reset) if self._gauge else None

    async def inventory(self):
        from dataclasses import replace as dc_replace
        inv = await self.inner.inventory()
        return dc_replace(inv, extra={**inv.extra, "slots": self._slots}) if self._slots else inv


def test_load_witness_serialising_route_is_not_verified_and_batching_route_is():
    verified, why, ran = _burst_run(hf_route("candidate", True), 4)
    assert not verified and "serialises requests" in why and "max 1 together by the engine's own gauge" in why
    verified, why, _ = _burst_run(reference_route("batched"), 6)
    assert verified and "together by the engine's own gauge" in why, why


def test_load_witness_without_an_engine_gauge_or_with_one_slot_is_not_verified():
    """Client-side overlap alone proves nothing (a gateway may serialise); a server stating one slot serialises."""
    verified, why, _ = _burst_run(_Proxy(reference_route("no-gauge"), gauge=False), 6)
    assert not verified and why.startswith("not proven") and "max 6 requests open together at the client" in why
    verified, why, _ = _burst_run(_Proxy(reference_route("one-slot"), slots=1), 6)
    assert not verified and why.startswith("serialises: the server states it runs one request at a time"), why


def test_lifetime_overlap_counts_requests_open_together():
    from spec_route_suite.stressors.driver import LoadRun, Outcome

    def run(*spans):
        return LoadRun(outcomes=tuple(Outcome(f"k{i}", f"r{i}", None, None, None, a, b, 1)
                                      for i, (a, b) in enumerate(spans)),
                       concurrency=4, max_in_flight=4, wall_s=1.0, started_at=0.0)
    assert lifetime_overlap([run((0, 1), (1, 2), (2, 3))]) == 1
    assert lifetime_overlap([run((0, 2), (1, 3), (1.5, 4), (3.5, 5))]) == 3


# ---------------------------------------------------------------- boundary attribution

class _Fixed:
    """A RouteHandle stand-in that answers every request with fixed tokens."""

    def __init__(self, name: str, tokens: tuple[int, ...], finish: str):
        self.name, self._tokens, self._finish = name, tokens, finish

    def generate(self, req: Request) -> Completion:
        return Completion(token_ids=self._tokens, text="", finish_reason=self._finish, route=self.name)


def test_a_baseline_boundary_violation_is_the_baselines_not_the_candidates():
    stop = 7
    case = Case(variant="stop_token_ids", request=Request(prompt_ids=(1, 2), max_tokens=8, stop_token_ids=(stop,)),
                stop_ids=frozenset({stop}))
    correct = _Fixed("candidate", (4, 5, stop), "stop")
    overshoot = _Fixed("baseline", (4, 5, stop, 9), "stop")
    result = run_sweep(baseline=overshoot, candidate=correct, cases=[case], decode=lambda t: "")
    assert result.problems == [] and result.baseline_problems and "baseline 'baseline'" in result.baseline_problems[0]
    result = run_sweep(baseline=correct, candidate=overshoot, cases=[case], decode=lambda t: "")
    assert result.problems and result.baseline_problems == []


# ---------------------------------------------------------------- whole runs

def _suite(tmp_path: Path, *args: str, paths=("equivalence/test_greedy.py",), timeout: float = 600):
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "pytest", *paths, "-p", "no:cacheprovider", "-q",
                             "--report-dir", str(out), *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=timeout)
    reports = sorted(out.glob("*/report.json"))
    return result, (json.loads(reports[-1].read_text()) if reports else {})


def test_a_candidate_that_is_the_baseline_itself_waits_because_speculation_did_not_run(tmp_path):
    result, report = _suite(tmp_path, "--candidate", f"hf:{TARGET}", "--prompt-limit", "1", "--categories", "math")
    assert result.returncode == 0, result.stdout[-2000:]
    assert report["speculation"][0]["status"] == DID_NOT_RUN
    assert report["verdict"] == "wait" and "speculation did not run" in report["verdict_reason"]
    result, report = _suite(tmp_path / "assisted", "--candidate", f"hf:{TARGET}?draft={DRAFT}",
                            "--prompt-limit", "1", "--categories", "math")
    assert report["speculation"][0]["status"] == "ran" and report["verdict"] == "pilot", report["verdict_reason"]


@pytest.mark.parametrize("args, field", [
    (["--baseline", f"hf:{TARGET}?draft={DRAFT}"], "baseline"),
    (["--baseline", f"hf:{TARGET}?prompt_lookup=3"], "baseline"),
    (["--baseline", "openai:http://127.0.0.1:9/v1?model=tiny&tokenizer=fixtures/models/target", "--candidate", "openai:http://127.0.0.1:9/v1/?model=tiny&tokenizer=fixtures/models/target"],
     "candidate.base_url"),
])
def test_a_speculative_baseline_or_the_baselines_own_endpoint_exits_4(tmp_path, args, field):
    result, _ = _suite(tmp_path, *args, "--collect-only")
    assert result.returncode == 4 and f"bad configuration: {field}:" in result.stderr, result.stderr[-1000:]


def test_a_distinct_ar_baseline_and_endpoint_are_accepted(tmp_path):
    result, _ = _suite(tmp_path, "--baseline", "openai:http://127.0.0.1:9/v1?model=tiny&tokenizer=fixtures/models/target",
                       "--candidate", "openai:http://127.0.0.1:9/v1?model=tiny-spec&tokenizer=fixtures/models/target", "--collect-only")
    assert result.returncode == 0, result.stderr[-1000:]


class _SplitOne(RouteWrapper):
    """A route that answers one identical request with a planted split (the baseline's second choice at
    token SPLIT, then the baseline's own continuation): a numerical near-tie of known margin."""

    def __init__(self, inner, split: Completion):
        super().__init__(inner)
        self.split = split

    async def generate(self, req: Request) -> Completion:
        answer = await self.inner.generate(req)
        return self.split if req.request_id.startswith("identical-1-") else answer


SPLIT = 3


def planted_split(base, prompt_ids, max_tokens: int) -> tuple[Completion, float]:
    """The baseline's greedy output with its second choice at SPLIT, and that choice's margin in nats."""
    expected = base.generate(Request(prompt_ids=prompt_ids, max_tokens=max_tokens))
    scored = base.score(prompt_ids, expected.token_ids[:SPLIT + 1], 2)[SPLIT]
    (_, top), (alt, second) = scored.top[:2]
    head = expected.token_ids[:SPLIT] + (alt,)
    tail = base.generate(Request(prompt_ids=tuple(prompt_ids) + head, max_tokens=max_tokens - len(head)))
    tokens = head + tail.token_ids
    return Completion(token_ids=tokens, text=f"split {tokens}", finish_reason=tail.finish_reason,
                      route="candidate"), top - second


@pytest.mark.parametrize("mode, tau_over_margin, fails", [
    ("strict", 10.0, True), ("classify", 10.0, False), ("classify", 0.5, True)])
def test_greedy_policy_and_tau_reach_the_stressors(mode, tau_over_margin, fails):
    """The identical-requests stressor with one planted near-tie split: strict fails it, classify excuses it
    only when the baseline's teacher-forced margin is below the run's tau."""
    from spec_route_suite.stressors import test_batch_invariance as stressor
    from spec_route_suite.stressors.canary import build_workload, serial_references
    from spec_route_suite.stressors.control import LoadControl
    from spec_route_suite.stressors.driver import budget_for
    from spec_route_suite.stressors.near_tie import NearTiePolicy
    from tests.test_greedy_routes import FixedCalibration, Sink, baseline_handle, tokenizer
    from spec_route_suite.equivalence.calibration import Calibration
    base, tok, max_tokens = baseline_handle(), tokenizer(), 16
    workload = build_workload(tok, size=8, seed=0)
    item = next(iter(workload.recall()), workload.items[0])
    split, margin = planted_split(base, item.prompt_ids, max_tokens)
    candidate = handle(_SplitOne(hf_route("split-candidate", False), split), "candidate")
    refs = serial_references(candidate.generate, workload, max_tokens=max_tokens)
    tau = margin * tau_over_margin
    calibration = Calibration(route="baseline", tau=tau, logprob_tol=1e-3, noise=None, overridden=True)
    sink = Sink()
    budget = budget_for(batched=False, levels=(1, 4), stress_requests=32)
    run = lambda: stressor.test_identical_greedy_requests_agree_under_load(  # noqa: E731
        candidate=candidate, baseline=base, tokenizer=tok, stress_budget=budget, stress_workload=workload,
        stress_references=refs, stress_max_tokens=max_tokens,
        near_tie_policy=NearTiePolicy(mode=mode, calibration=FixedCalibration(calibration)),
        stress_control=LoadControl(base, None, alpha=0.01), findings=sink)   # the hf baseline serialises: no control
    if fails:
        with pytest.raises(pytest.fail.Exception):
            run()
    else:
        run()
    (split_finding,) = [f for f in sink.items if f.severity != "info"]
    assert split_finding.severity == ("bug" if fails else "near-tie")
    assert f"{mode} policy" in json.dumps(split_finding.details)


def test_cached_prompt_tokens_are_read_from_usage():
    from spec_route_suite.routes.wire.openai_shapes import cached_tokens
    assert cached_tokens({"usage": {"prompt_tokens_details": {"cached_tokens": 12}}}) == 12
    assert cached_tokens({"usage": {"prompt_tokens": 30}}) is None and cached_tokens({"usage": None}) is None


def test_a_non_numeric_ran_value_never_breaks_the_report():
    """`ran` values are counts to add up; a label put there by a check must not crash the report writer."""
    from spec_route_suite.reports.coverage import CoverageRecord, coverage_rows
    records = [CoverageRecord(check="greedy", route="c", verified=True, ran={"prompts": 1, "mode": "text-level"}),
               CoverageRecord(check="greedy", route="c", verified=True, ran={"prompts": 2})]
    rows = [r for r in coverage_rows(records=[r.as_measurement() for r in records], outcomes=[], candidates=["c"])
            if r.check == "greedy"]
    assert "3 prompts" in rows[0].ran and "text-level" not in rows[0].ran


def test_settings_that_weaken_the_evidence_are_named_in_the_verdict_line(tmp_path):
    """A budget planned for a coarser TV than the suite's full one, a pinned tau (worse: with classify), a
    server that restarted or stopped answering: each is a gap the verdict line names."""
    run = collector(tmp_path)
    run.config_public.update(detect_tv=0.1, near_tie_tau=5.0, greedy_policy="classify")
    report = build_run_report(run)
    assert report["verdict"] == "pilot"
    assert "planned for TV 0.1" in report["verdict_reason"] and "pinned at 5 nats" in report["verdict_reason"]
    assert "classify excuses every greedy divergence" in report["verdict_reason"]
    run = collector(tmp_path)
    run.config_public.update(detect_tv=0.05)
    run.server_acceptance = {"candidate": {**COUNTERS, "server_restarted": True, "server_answering_at_end": False}}
    reason = build_run_report(run)["verdict_reason"]
    assert "restarted during the run" in reason and "not answering at the end" in reason
    run = collector(tmp_path)
    run.config_public.update(detect_tv=0.05)
    assert build_run_report(run)["verdict"] == "adopt"


def test_a_skipped_part_beside_a_passing_one_is_its_own_gap(tmp_path):
    """logprobs has two tests: the comparison with the baseline skips, the all-zero check passes. Each is a
    part of its own, so the skip is a gap (one passing test used to mark the whole row verified)."""
    run = collector(tmp_path)
    match, zeros = "t::test_logprobs_match_baseline[candidate]", "t::test_sampled_logprobs_are_not_all_zero[candidate]"
    del run.outcomes["t::logprobs[candidate]"]
    run.measurements["coverage"] = [m for m in run.measurements["coverage"] if m["check"] != "logprobs"]
    run.outcomes[match] = CheckOutcome(match, "logprobs", "skipped", 0.1, reason="not verified: no prompt logprobs")
    run.outcomes[zeros] = CheckOutcome(zeros, "logprobs", "passed", 0.1)
    run.measurements["coverage"].append({**CoverageRecord(check="logprobs", route="candidate", verified=True,
                                                          ran=SEEN).as_measurement(), "test_id": zeros})
    run.worker_state.planned = {
        match: {"check": "logprobs", "function": "test_logprobs_match_baseline", "qualifier": ""},
        zeros: {"check": "logprobs", "function": "test_sampled_logprobs_are_not_all_zero", "qualifier": ""}}
    report = build_run_report(run)
    rows = {r["part"]: r["status"] for r in report["coverage"] if r["check"] == "logprobs"}
    assert rows == {"logprobs_match_baseline": "not verified", "sampled_logprobs_are_not_all_zero": "verified"}
    assert report["verdict"] == "pilot" and "logprobs: logprobs_match_baseline not verified" in report["verdict_reason"]


def test_a_part_deselected_by_k_is_not_run_not_absent(tmp_path):
    """The stop_token boundary variant was planned (collected) and removed by -k: its part reads "not run" and
    keeps the run from adopt; the variants that ran are verified."""
    run = collector(tmp_path)
    del run.outcomes["t::boundary[candidate]"]
    run.measurements["coverage"] = [m for m in run.measurements["coverage"] if m["check"] != "boundary"]
    for variant in ("plain", "stop_token"):
        nodeid = f"t::test_boundary_sweep[{variant}-math-00-candidate]"
        run.worker_state.planned[nodeid] = {"check": "boundary", "function": "test_boundary_sweep",
                                            "qualifier": variant}
        if variant == "plain":
            run.outcomes[nodeid] = CheckOutcome(nodeid, "boundary", "passed", 0.1)
            run.measurements["coverage"].append({**CoverageRecord(check="boundary", route="candidate", verified=True,
                                                                  ran={"cases": 6}).as_measurement(), "test_id": nodeid})
    report = build_run_report(run)
    rows = {r["part"]: r["status"] for r in report["coverage"] if r["check"] == "boundary"}
    assert rows == {"plain": "verified", "stop_token": "not run"}
    assert report["verdict"] == "pilot" and "not run: boundary: stop_token" in report["verdict_reason"]


def test_a_check_can_void_another_familys_row_without_lending_it_its_outcome(tmp_path):
    """spec-path found speculation off for logprobs requests: it records the logprobs family's row "on the speculative
    path" not verified (a gap), while its own row stays what its own evidence says, and no row of its own family
    appears under the other family's part name."""
    run = collector(tmp_path)
    voided = CoverageRecord(check="logprobs", route="candidate", verified=False, part="on the speculative path",
                            reason="not verified on the speculative path: speculation is silently off for logprobs")
    run.measurements["coverage"].append({**voided.as_measurement(), "test_id": "t::spec-path[candidate]"})
    report = build_run_report(run)
    rows = {(r["check"], r["part"]): r for r in report["coverage"]}
    assert rows[("logprobs", "on the speculative path")]["status"] == "not verified"
    assert rows[("spec-path", "")]["status"] == "verified" and ("spec-path", "on the speculative path") not in rows
    assert report["verdict"] == "pilot" and "logprobs: on the speculative path not verified" in report["verdict_reason"]


def test_a_crashed_measurement_test_is_a_failed_test_not_silence(tmp_path):
    """The speed gate carries no family (measured, not judged); when it crashes, that is the suite's failure and
    the candidate cannot read adopt beside it (it did, silently, on a run with --prompts). Passing, it counts for
    nothing."""
    from types import SimpleNamespace

    from spec_route_suite.reports.collector import UNJUDGED, UNJUDGED_PROPERTY

    def report(outcome: str) -> SimpleNamespace:
        return SimpleNamespace(nodeid="stressors/test_speed.py::test_speed_gate[candidate]", when="call",
                               outcome=outcome, failed=outcome == "failed", passed=outcome == "passed",
                               skipped=False, duration=0.1, longrepr="IndexError: list index out of range",
                               user_properties=[(UNJUDGED_PROPERTY, "1")])
    passed = collector(tmp_path)
    passed.pytest_runtest_logreport(report("passed"))
    assert build_run_report(passed)["verdict"] == "adopt"
    crashed = collector(tmp_path)
    crashed.pytest_runtest_logreport(report("failed"))
    built = build_run_report(crashed)
    assert crashed.outcomes["stressors/test_speed.py::test_speed_gate[candidate]"].check == UNJUDGED
    assert built["verdict"] == "wait" and "1 failed check(s)" in built["verdict_reason"]
    assert built["route_verdicts"]["candidate"]["verdict"] == "wait"
    assert "1 failed check(s)" in render_summary(built)


# ---------------------------------------------------------------- k of n instances (issue #34 item 2)

def _instances_run(tmp_path: Path, family: str, instances: list[tuple[str, str, str, CoverageRecord | None]]):
    """A run where every family but `family` is verified, and `family` has the given instances on the candidate:
    (nodeid, function, outcome, record) each, all planned (collected) before they ran."""
    run = collector(tmp_path)
    run.outcomes = {k: v for k, v in run.outcomes.items() if v.check != family}
    run.measurements["coverage"] = [m for m in run.measurements["coverage"] if m["check"] != family]
    for nodeid, function, outcome, record in instances:
        run.worker_state.planned[nodeid] = {"check": family, "function": function, "qualifier": ""}
        run.outcomes[nodeid] = CheckOutcome(nodeid, family, outcome, 0.1,
                                            reason="not verified: the server rendered no chat template for this "
                                                   "prompt" if outcome == "skipped" else "")
        if record is not None:
            run.measurements["coverage"].append({**record.as_measurement(), "test_id": nodeid})
    return run


def test_one_passing_prompt_does_not_verify_a_part_whose_other_prompts_skipped(tmp_path):
    """Chat: 1 prompt passed with evidence, 2 skipped. It read "verified" (instances were pooled); it is "not
    verified, 1 of 3 instances verified" in report.json, summary.md and report.html, and the run reads pilot. The
    same three prompts all passing verify it (3 of 3) and adopt."""
    def prompts(outcomes):
        return [(f"t::test_chat_parity[candidate-chat-0{i}]", "test_chat_parity", outcome,
                 CoverageRecord("chat", "candidate", True, ran={"turns compared": 2}) if outcome == "passed" else None)
                for i, outcome in enumerate(outcomes)]
    run = _instances_run(tmp_path, "chat", prompts(["passed", "skipped", "skipped"]))
    report = write_run_folder(run)
    (row,) = [r for r in report["coverage"] if r["check"] == "chat"]
    assert row["status"] == "not verified" and (row["instances"], row["verified_instances"]) == (3, 1), row
    assert row["why"] == "skipped: the server rendered no chat template for this prompt (x2) — 1 of 3 instances verified"
    assert report["verdict"] == "pilot" and f"chat not verified (candidate: {row['why']})" in report["verdict_reason"]
    assert report["matrix"]["chat"]["candidate"]["instances"] == "1 of 3 instances verified"
    assert "| chat | no 1/3 |" in (run.run_dir / "summary.md").read_text()
    assert "<td>chat</td><td>candidate</td><td>1 of 3 instances verified</td>" in (run.run_dir / "report.html").read_text()
    report = build_run_report(_instances_run(tmp_path, "chat", prompts(["passed", "passed", "passed"])))
    (row,) = [r for r in report["coverage"] if r["check"] == "chat"]
    assert row["status"] == "verified" and row["why"] == "3 of 3 instances verified" and report["verdict"] == "adopt"


def test_two_detectors_sharing_a_part_name_verify_it_only_when_both_ran(tmp_path):
    """logit_bias ban and boost both state part "logit_bias": the ban passed, the boost skipped. The part read
    verified on the ban alone; now it is 1 of 2 instances, and both passing verify it."""
    def bias(boost: str):
        return [(f"t::test_logit_bias_acts_and_matches[candidate-{d}]", "test_logit_bias_acts_and_matches", outcome,
                 CoverageRecord("features", "candidate", True, part="logit_bias",
                                ran={"requests": 1} if outcome == "passed" else {}))
                for d, outcome in (("ban", "passed"), ("boost", boost))]
    report = build_run_report(_instances_run(tmp_path, "features", bias("skipped")))
    rows = {r["part"]: r for r in report["coverage"] if r["check"] == "features"}
    assert set(rows) == {"logit_bias"} and rows["logit_bias"]["status"] == "not verified", rows
    assert rows["logit_bias"]["why"].startswith("skipped: ")
    assert rows["logit_bias"]["why"].endswith(" — 1 of 2 instances verified")
    assert report["verdict"] == "pilot" and "features: logit_bias not verified" in report["verdict_reason"]
    both = build_run_report(_instances_run(tmp_path, "features", bias("passed")))
    assert [r["status"] for r in both["coverage"] if r["check"] == "features"] == ["verified"]
    assert both["verdict"] == "adopt", both["verdict_reason"]


def test_an_instance_the_engine_rules_out_does_not_excuse_a_blind_one(tmp_path):
    """Not applicable is counted apart: beside verified instances the part is verified (k of k, m n/a); beside an
    instance that could not detect anything it is not verified (an n/a record used to make the whole row n/a)."""
    na = CoverageRecord("prefix-cache", "candidate", False, applicable=False, reason="the engine has no prefix cache")
    seen = CoverageRecord("prefix-cache", "candidate", True, ran={"requests": 4})
    blind = CoverageRecord("prefix-cache", "candidate", False, ran={"requests": 4}, reason="zero prefix-cache hits")
    def run(second):
        return build_run_report(_instances_run(tmp_path, "prefix-cache", [
            ("t::test_prefix[candidate-a]", "test_prefix", "passed", na),
            ("t::test_prefix[candidate-b]", "test_prefix", "passed", second)]))
    report = run(seen)
    (row,) = [r for r in report["coverage"] if r["check"] == "prefix-cache"]
    assert row["status"] == "verified" and row["why"].startswith("1 of 1 instances verified, 1 not applicable")
    assert report["verdict"] == "adopt"
    report = run(blind)
    (row,) = [r for r in report["coverage"] if r["check"] == "prefix-cache"]
    assert row["status"] == "not verified" and "zero prefix-cache hits" in row["why"] and report["verdict"] == "pilot"


def test_a_baseline_without_prompt_logprobs_leaves_features_n_not_verified(tmp_path):
    """The issue's llama.cpp /v1 case, run for real: the baseline is served like llama.cpp's OpenAI endpoint (ids
    only in logprobs, prompt_logprobs refused with HTTP 400), so the sampled-n detector cannot score and skips,
    while the greedy-n test passes. Both state part "n": the row is "1 of 2 instances verified", not verified (it
    read verified). The same tests against a baseline that scores verify it, 2 of 2."""
    from spec_route_suite.embedded import TARGET_DIR
    from spec_route_suite.servers.inprocess import serve_in_thread
    from tests.mutation import run_route_suite

    def n_row(baseline: str, folder: str) -> dict:
        result = run_route_suite("reference:", ["-k", "test_n_"], tmp_path / folder, baseline_uri=baseline,
                                 paths=["equivalence/test_features.py"])
        assert result.exit_code == 0, result.output_tail
        (row,) = [r for r in result.report["coverage"] if (r["check"], r["part"]) == ("features", "n")]
        return row
    url, stop = serve_in_thread(f"hf:{TARGET_DIR}", model_name="tiny", token_ids="logprobs")
    try:
        row = n_row(f"openai:{url}?model=tiny&tokenizer={TARGET_DIR}", "no-scores")
    finally:
        stop()
    assert row["status"] == "not verified" and (row["instances"], row["verified_instances"]) == (2, 1), row
    assert row["why"].startswith("skipped: ") and "prompt_logprobs" in row["why"]
    assert row["why"].endswith(" — 1 of 2 instances verified")
    row = n_row(f"hf:{TARGET_DIR}", "scores")
    assert row["status"] == "verified" and row["why"] == "2 of 2 instances verified", row
