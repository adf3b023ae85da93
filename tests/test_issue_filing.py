"""Issue files only for what a maintainer can act on, one per root cause (issue #41 item 2), on findings records.

Each case of the audit, built from the records the checks write (the real `failure_finding`, `Finding.from_route_error`
and RouteError descriptions where a check would make them), beside its control:
- a run whose findings are only the suite's warnings, near-ties, the baseline's own behaviour and context writes no
  issue file, and the same run with one candidate bug writes exactly one;
- one HTTP 400 met by six stressors is one file quoting the server's words, naming all six checks; another message
  is a file of its own;
- the symptoms of one fault under load (mixing attributed and not, serial references, accuracy flips, batch
  composition, KV pressure, hung-up clients) are one file, whatever check saw them;
- a wedge seen by the aborts check and a later load run is one file;
- "cannot connect" from a route that never answered, and an error the baseline meets too, are no file; the same
  refusal after the route had answered is one;
- nothing is ticked for the reporter, the server and the client are apart, a managed server's log tail is attached,
  each engine gets its template and its repository, and each file carries its `gh issue create` line.
The end-to-end cases (a real run) are tests/test_planted_cross_context.py and tests/test_one_cause.py.
Environment: none.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from spec_route_suite.reports.clusters import cluster_findings
from spec_route_suite.reports.collector import CheckOutcome
from spec_route_suite.reports.findings import UNDER_LOAD, UNHEALTHY, Finding
from spec_route_suite.reports.issue_templates import CHECK
from spec_route_suite.reports.issues import write_issue_files
from spec_route_suite.reports.repro import write_repro_scripts
from spec_route_suite.reports.server_words import GONE, REFUSED, STOPPED, cause_of_error, normalise
from spec_route_suite.reports.writer import write_run_folder
from spec_route_suite.routes.errors import RouteDisconnected, RouteHTTPError, RouteTimeout
from spec_route_suite.stressors.driver import LoadRun, Outcome, failure_finding
from tests.test_reports import greedy_finding, make_collector

CANDIDATE, BASELINE = "dflash2", "ar"
PROXY_400 = "All non-assistant messages must contain 'content'"
STRESSORS = ("mixing", "accuracy", "batch-invariance", "kv-pressure", "aborts", "batch-ramp")


def as_record(finding: Finding, test_id: str = "") -> dict:
    return {**finding.__dict__, "test_id": test_id or f"stressors/test_{finding.check}.py::t[{finding.route}]"}


def load_failure(check: str, errors: list[tuple[str, str]], *, route: str = CANDIDATE, hung: str = "") -> dict:
    """A load run whose requests failed with (kind, description) each, as its stressor records it."""
    outcomes = tuple(Outcome(key=f"k{i}", request_id=f"{check}-c8-{i:03d}", completion=None, error_kind=kind,
                             error=text, started_s=0.1 * i, ended_s=0.5 + 0.7 * i, in_flight_at_start=8)
                     for i, (kind, text) in enumerate(errors))
    run = LoadRun(outcomes=outcomes, concurrency=8, max_in_flight=8, wall_s=9.0, started_at=1_700_000_000.0,
                  hung=hung)
    return as_record(failure_finding(run, check=check, route=route, what=f"{check} load"))


def http_400(request_id: str, route: str = CANDIDATE, message: str = PROXY_400) -> tuple[str, str]:
    error = RouteHTTPError(f"chat: HTTP 400: {message}", status=400, route=route, request_id=request_id)
    return error.kind, error.describe()


def load_bug(check: str, title: str, **details) -> dict:
    return as_record(Finding(check=check, severity="bug", route=CANDIDATE, title=title,
                             details={"cause": UNDER_LOAD, **details}))


def report_for(findings: list[dict], *, engine: str = "vllm", **extra) -> dict:
    spec = {"kind": "openai", "base_url": "http://127.0.0.1:18001/v1", "model": "m"}
    return {"run_id": "run-41", "suite_version": "0.1.0", "command": "spec-route-suite", "findings": findings,
            "tests": [], "config": {"baseline": {"name": BASELINE, **spec},
                                    "candidates": [{"name": CANDIDATE, **spec}]},
            "inventories": {name: {"engine": engine, "version": "9.9.9", "model": "target-model",
                                   "hardware": "unknown (remote server)"} for name in (BASELINE, CANDIDATE)},
            "client": {"os": "PlantedOS-41.0-x86_64", "system": "PlantedOS", "cpu": "planted cpu, 2 cores",
                       "python": "3.11.7"},
            "latency": {CANDIDATE: {"requests": 500}, BASELINE: {"requests": 500}},
            "started_unix": 1_700_000_000.0, "finished_unix": 1_700_000_600.0, **extra}


def filed(tmp_path: Path, report: dict) -> tuple[list[dict], list[str]]:
    """(clusters, issue files written) of a report, as the run folder writes them."""
    clusters = cluster_findings(report["findings"], report["tests"], [CANDIDATE])
    write_repro_scripts(tmp_path, report, clusters)
    return clusters, write_issue_files(tmp_path, report, clusters)


def only_issue(tmp_path: Path, report: dict) -> tuple[dict, str]:
    clusters, written = filed(tmp_path, report)
    assert len(written) == 1, [(c["title"], c["not_filed"]) for c in clusters]
    cluster = next(c for c in clusters if c["issue"])
    return cluster, (tmp_path / written[0]).read_text()


# ---------------------------------------------------------------- what is never filed
def suite_statements(candidate: str = "candidate", baseline: str = "baseline") -> list[Finding]:
    """A run's findings that are no engine bug of the candidate (the routes of tests/test_reports.py's run): the
    suite's warning about its own power, a near-tie, the baseline's own boundary behaviour, info and engine lines."""
    return [Finding(check="accuracy", severity="warning", route=candidate,
                    title="accuracy under load weakly verified: only 0 of 60 answers right serially",
                    test_id="stressors/test_accuracy_under_load.py::t[dflash2]", uid="w0-1"),
            Finding(check="greedy", severity="near-tie", route=candidate, prompt_id="math-01",
                    title="greedy output diverges at a near-tie at token 3 of prompt math-01",
                    test_id="equivalence/test_greedy.py::t[dflash2-math-01]", uid="w0-2"),
            Finding(check="boundary", severity="bug", route=baseline, prompt_id="math-00",
                    title=f"the baseline '{baseline}' itself breaks eos boundary rules on prompt math-00",
                    test_id="equivalence/test_boundaries.py::t[dflash2-math-00]", uid="w0-3"),
            Finding(check="mixing", severity="info", route=candidate, title="mixing: 100 outputs checked",
                    test_id="stressors/test_mixing.py::t[dflash2]", uid="w0-4"),
            Finding(check="greedy", severity="engine", route=baseline, title="engine behaviour on both routes: x",
                    test_id="equivalence/test_greedy.py::t[dflash2-math-02]", uid="w0-5")]


def test_a_run_without_a_candidate_finding_writes_no_issue_file_and_one_bug_writes_one(tmp_path):
    collector = make_collector(tmp_path / "none", findings=suite_statements(), outcomes=[])
    report = write_run_folder(collector)
    assert report["issue_files"] == [] and not (collector.run_dir / "issues").exists()
    clustered = {(c["severity"], c["route"]) for c in report["clusters"]}
    assert clustered == {("warning", "candidate"), ("near-tie", "candidate"), ("bug", "baseline")}, clustered
    assert all(c["issue"] is None and c["not_filed"] for c in report["clusters"]), report["clusters"]
    summary = (collector.run_dir / "summary.md").read_text()
    assert "no issue: a suite warning" in summary and "no issue: about the baseline" in summary
    # the control: the same run with one candidate bug writes exactly one issue file, for it
    collector = make_collector(tmp_path / "one", findings=[*suite_statements(), greedy_finding()], outcomes=[
        CheckOutcome(greedy_finding().test_id, "greedy", "failed", 0.5, "diverges")])
    report = write_run_folder(collector)
    (issue,) = report["issue_files"]
    assert [c["issue"] for c in report["clusters"] if c["route"] == "candidate" and c["check"] == "greedy"
            and c["severity"] == "bug"] == [issue] and issue.endswith("-openai-greedy.md")


def test_clusters_keep_the_fields_the_summary_reads(tmp_path):
    """id, severity, check and checks, route, count, title, issue, repro: the summary's findings table reads them."""
    clusters, _ = filed(tmp_path, report_for([load_failure(s, [http_400(f"r{s}")]) for s in STRESSORS[:2]]))
    assert {"id", "severity", "check", "checks", "route", "count", "cause", "title", "issue", "repro",
            "not_filed"} <= set(clusters[0]), clusters[0].keys()
    assert [row["check"] for row in clusters[0]["checks"]] == list(STRESSORS[:2])


# ---------------------------------------------------------------- one root cause, one file
def test_one_http_400_met_by_six_stressors_is_one_file_quoting_the_servers_words(tmp_path):
    findings = [load_failure(check, [http_400(f"{check}-c8-{7 * i + 3:03d}")]) for i, check in enumerate(STRESSORS)]
    assert len({f["title"] for f in findings}) == 6 and all(PROXY_400 not in f["title"] for f in findings)
    cluster, text = only_issue(tmp_path, report_for(findings))
    assert cluster["count"] == 6 and sorted(row["check"] for row in cluster["checks"]) == sorted(STRESSORS)
    assert cluster["signature"] == f"HTTP 400: {PROXY_400}" and PROXY_400 in cluster["title"]
    assert f"HTTP 400: {PROXY_400}" in text and all(f"| {check} |" in text for check in STRESSORS)
    # the control: a second message from the same proxy is a second root cause, a second file
    other = load_failure("mixing", [http_400("x-1", message="Invalid 'tool_choice' for request 4711")])
    clusters, written = filed(tmp_path / "two", report_for([*findings, other]))
    assert len(written) == 2 and {c["count"] for c in clusters if c["issue"]} == {6, 1}, written


def test_numbers_and_ids_vary_the_words_not_the_cause():
    words = [f"This model's maximum context length is {n} tokens (request chatcmpl-{h}, id {u})" for n, h, u in
             ((4096, "9f3a", "1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
              (512, "77c1", "6fa459ea-ee8a-3ca4-894e-db77e160355e"))]
    assert len({normalise(w) for w in words}) == 1 and "'" not in normalise(words[0]).replace("model's", "")
    made = [as_record(Finding.from_route_error(RouteHTTPError(f"completion: HTTP 400: {w}", status=400, route="c",
                                                              request_id=f"greedy-math-0{i}"), check="greedy"))
            for i, w in enumerate(words)]
    assert len({cause_of_error(f) for f in made}) == 1
    assert cause_of_error(made[0]) != cause_of_error({**made[0], "title": made[0]["title"].replace("400", "413")})


def test_the_symptoms_of_one_fault_under_load_are_one_file(tmp_path):
    """The cross-context plant's symptoms in every stressor, attributed or not, with one route error beside them:
    one file for the mixing, naming every check, and one for the server's error."""
    symptoms = [load_bug("mixing", "cross-request mixing: 2 of 100 outputs answered in another request's context"),
                load_bug("mixing", "3 outputs under load differ from their serial reference beyond a near-tie, with "
                                   "no identifiable source (corrupted batch state?)"),
                load_bug("mixing", "2 serial greedy references of the candidate differ from the AR baseline and do "
                                   "not reproduce serially"),
                load_bug("accuracy", "1 answers right when sent alone turned wrong under load"),
                load_bug("batch-invariance", "2 greedy outputs changed with batch composition (bug)"),
                load_bug("kv-pressure", "3 of 48 outputs under KV pressure differ from their serial output"),
                load_bug("aborts", "1 requests beside hung-up clients lost their serial output"),
                load_bug("agentic", "agentic concurrent session turn of s1: output tokens diverge at token 4")]
    error = load_failure("batch-ramp", [http_400("ramp-1")])
    clusters, written = filed(tmp_path, report_for([*symptoms, error]))
    assert len(written) == 2, [(c["title"], c["not_filed"]) for c in clusters]
    mixing = next(c for c in clusters if c["signature"] == UNDER_LOAD)
    assert mixing["count"] == len(symptoms) and mixing["check"] == "mixing"
    assert {row["check"] for row in mixing["checks"]} == {f["check"] for f in symptoms}
    text = (tmp_path / mixing["issue"]).read_text()
    assert "Every check that saw it" in text and all(f"| {f['check']} |" in text for f in symptoms)
    # the control: the same titles without the stressors' named cause stay per check (what the audit saw)
    unnamed = [{**f, "details": {}} for f in symptoms]
    assert len(cluster_findings(unnamed)) > 1


def test_a_wedge_seen_by_the_aborts_check_and_a_later_load_is_one_file(tmp_path):
    unhealthy = as_record(Finding(check="aborts", severity="error", route=CANDIDATE, details={"error_kind": UNHEALTHY},
                                  title="route unhealthy after 8 client disconnects: health check at 10:01:02 "
                                        "unanswered or false"))
    dead = as_record(Finding(check="aborts", severity="error", route=CANDIDATE, prompt_id="012-chat",
                             details={"request_id": "post-abort-canary-012-chat", "error_kind": "timeout"},
                             title="route dead or hung after 8 disconnects: canary post-abort-canary-012-chat at "
                                   "10:01:05: timeout [dflash2 request post-abort-canary-012-chat]: no answer"))
    later = load_failure("accuracy", [("timeout", "no answer within 60.0s under load")] * 3,
                         hung="health check unanswered")
    cluster, text = only_issue(tmp_path, report_for([unhealthy, dead, later], engine="llama.cpp"))
    assert cluster["signature"] == STOPPED and cluster["count"] == 3
    assert {row["check"] for row in cluster["checks"]} == {"aborts", "accuracy"}
    assert text.count("Misc. bug: ") == 1 and "llama-server" in text   # a hang: llama.cpp's misc. template


def test_connection_refused_before_any_answer_is_the_clients_problem_after_answers_the_servers(tmp_path):
    refused = RouteDisconnected("completion: cannot connect: [Errno 111] Connection refused", route=CANDIDATE,
                                request_id="greedy-math-00")
    finding = as_record(Finding.from_route_error(refused, check="greedy"))
    swapped = as_record(Finding.from_route_error(RouteDisconnected("completion: cannot connect: [Errno 111]",
                                                                   route=BASELINE), check="greedy"))
    assert cause_of_error(finding) == REFUSED
    never = report_for([finding, swapped], latency={})
    clusters, written = filed(tmp_path / "closed", never)
    assert written == [] and all(c["not_filed"] for c in clusters)
    assert any("client-side" in c["not_filed"] for c in clusters if c["route"] == CANDIDATE)
    clusters, written = filed(tmp_path / "gone", report_for([finding]))   # it had answered 500 requests
    assert len(written) == 1
    assert "answered 500 request(s) in this run before" in (tmp_path / "gone" / written[0]).read_text()
    lost = as_record(Finding.from_route_error(RouteDisconnected("chat: connection lost: RemoteProtocolError",
                                                                route=CANDIDATE), check="mixing"))
    assert cause_of_error(lost) == GONE


def test_an_error_the_baseline_meets_too_is_no_file(tmp_path):
    def error(route: str, check: str) -> dict:
        failed = RouteHTTPError("completion: HTTP 500: EngineCore encountered an issue", status=500, route=route,
                                request_id=f"{check}-{route}")
        return as_record(Finding.from_route_error(failed, check=check))
    shared = [error(CANDIDATE, "greedy"), error(BASELINE, "features")]
    clusters, written = filed(tmp_path / "shared", report_for(shared))
    assert written == [] and "the baseline `ar` shows the same cause" in clusters[0]["not_filed"] + clusters[1][
        "not_filed"]
    clusters, written = filed(tmp_path / "alone", report_for(shared[:1]))
    assert len(written) == 1
    timeout = as_record(Finding.from_route_error(RouteTimeout("completion: no complete answer within 60s",
                                                              route=CANDIDATE), check="greedy"))
    assert cause_of_error(timeout) == STOPPED


# ---------------------------------------------------------------- the file itself
ENGINES = {"vllm": ("vllm-project/vllm", "[Bug]: "), "sglang": ("sgl-project/sglang", "[Bug] "),
           "llama.cpp": ("ggml-org/llama.cpp", "Eval bug: "), "reference": ("OWNER/REPO", "Bug: ")}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_gets_its_template_its_repository_and_a_gh_line_ticking_nothing(tmp_path, engine):
    findings = [load_bug("mixing", "cross-request mixing: 2 of 100 outputs answered in another request's context")]
    cluster, text = only_issue(tmp_path, report_for(findings, engine=engine))
    repo, prefix = ENGINES[engine]
    comment = re.match(r"<!--\n(.*?)\n-->\n", text, re.DOTALL)
    assert comment, text[:500]
    command = next(line for line in comment.group(1).splitlines() if line.startswith("gh issue create"))
    argv = shlex.split(command)
    assert argv[argv.index("--repo") + 1] == repo and argv[argv.index("--body-file") + 1] == cluster["issue"]
    assert argv[argv.index("--title") + 1] == prefix + cluster["cause"][:200]
    assert cluster["title"].startswith(cluster["cause"]) and "cross-request mixing" in cluster["title"]
    assert "[x]" not in text.lower() and CHECK in text
    if engine == "vllm":
        assert "- [ ] Make sure you already searched for relevant issues" in text
    if engine == "sglang":
        assert text.count("- [ ] ") == 5 and "- [ ] The bug persists in the latest version." in text
    if engine == "llama.cpp":   # wrong output: the eval template, which asks for backends and hardware
        assert "### GGML backends" in text and "### Hardware" in text and "### Models" in text


def test_server_and_client_are_apart_and_a_managed_servers_log_is_attached(tmp_path):
    findings = [load_bug("mixing", "cross-request mixing: 2 of 100 outputs answered in another request's context")]
    _, text = only_issue(tmp_path / "outside", report_for(findings, engine="llama.cpp"))
    assert "os: PlantedOS-41.0-x86_64" in text and "version: 9.9.9" in text and "model: target-model" in text
    assert "### Operating systems\n\nunknown: the suite did not start this server" in text
    assert "holds no log of it" in text and "2023-11-14 22:13:20 UTC" in text
    log = "\n".join(f"srv  update_slots: id {i} | task {i}: stop processing" for i in range(120))
    launch = {CANDIDATE: {"command": ["llama-server", "-m", "t.gguf", "--spec-type", "draft-simple"],
                          "start": "started", "log_tail": "\n".join(log.splitlines()[-50:])}}
    _, text = only_issue(tmp_path / "managed", report_for(findings, engine="llama.cpp", server_launch=launch))
    assert "task 119: stop processing" in text and "task 69: stop" not in text and "task 70: stop" in text
    assert "llama-server -m t.gguf --spec-type draft-simple" in text
    assert "### Operating systems\n\nPlantedOS (the suite started the server" in text
    assert "planted cpu, 2 cores (the machine the suite started the server on)" in text


def test_a_run_against_closed_ports_writes_no_issue_file(tmp_path):
    """End to end (a real run, the greedy check on one prompt): both routes' ports are closed and the preflight is
    skipped (with it the run ends at once, exit 4); the run records its route errors and writes its folder, and no
    issue file ("cannot connect" before any answer is configuration)."""
    from spec_route_suite.routes.spec import EMBEDDED_MODELS
    from tests.mutation import run_route_suite

    def closed(port: int) -> str:
        return f"openai:http://127.0.0.1:{port}/v1?model=m&tokenizer={EMBEDDED_MODELS / 'target'}&timeout=5"
    result = run_route_suite({"cand": closed(10)}, ["--prompt-limit", "1", "--categories", "math", "--no-preflight"],
                             tmp_path,
                             paths=["equivalence/test_greedy.py"], baseline_uri=closed(9), timeout_s=600)
    report = result.report
    assert report and [f for f in report["findings"] if f["severity"] == "error"], result.describe()
    assert all(c["signature"] == REFUSED or "cannot connect" in c["cause"] for c in report["clusters"]), \
        report["clusters"]
    assert report["issue_files"] == [] and not (result.run_dir / "issues").exists(), report["clusters"]


def test_one_test_is_one_mechanism_whatever_its_parameters(tmp_path):
    """penalty_bonus_only broke three penalties of one test (three files by title before); logit_bias raised and
    lowered ("-10" and "+10") is one test too; a fault of another test stays apart."""
    def feature_bug(test: str, title: str) -> dict:
        return as_record(Finding(check="features", severity="bug", route=CANDIDATE, title=title),
                         test_id=f"equivalence/test_features.py::{test}")
    penalties = [feature_bug(f"test_penalty_acts_and_matches[dflash2-{name}]",
                             f"{name}: greedy output with the feature diverges from the baseline at token {n} ({v})")
                 for name, n, v in (("frequency_penalty", 27, "bug"), ("presence_penalty", 27, "bug"),
                                    ("repetition_penalty", 13, "unclassified"))]
    bias = [feature_bug(f"test_logit_bias_acts_and_matches[dflash2-{d}]", f"logit_bias: route 'dflash2' accepts the "
                        f"feature but it did not act: token 314 (logit_bias {d}10)") for d in "-+"]
    clusters, written = filed(tmp_path, report_for([*penalties, *bias]))
    assert sorted(c["count"] for c in clusters) == [2, 3] and len(written) == 2


class Answering:
    """A route that answers every turn with the same tokens."""

    def __init__(self, name: str, ids: tuple[int, ...]):
        self.name, self.ids = name, ids

    async def generate(self, req):
        from spec_route_suite.routes.base import Completion
        return Completion(token_ids=self.ids, text="It is sunny.", finish_reason="stop", route=self.name)


@pytest.mark.parametrize("alone_ids, cause", [((5, 6), UNDER_LOAD), ((7, 8), None)], ids=["load", "not-load"])
def test_a_concurrent_session_turn_is_under_load_only_when_the_candidate_alone_answers_otherwise(
        monkeypatch, alone_ids, cause):
    """A concurrent session turn that differs from the baseline's is named a load symptom (one file with the other
    stressors') when the candidate's own session alone answered that turn otherwise; when it answers the same alone,
    the difference is the candidate's on any traffic (the agentic check's own cause)."""
    import asyncio
    from types import SimpleNamespace
    from spec_route_suite.embedded import MODELS_DIR
    from spec_route_suite.prompts.agentic import session_plans
    from spec_route_suite.stressors.agentic.sessions import SessionSettings, run_session
    from spec_route_suite.stressors.agentic.protocol import judge_transcripts
    from spec_route_suite.tokenizers import load_tokenizer
    settings = SessionSettings(tokenizer=load_tokenizer(str(MODELS_DIR / "pair2" / "target")), max_tokens=8,
                               fits=lambda req: True, timeout_s=5.0)
    plan = session_plans(1)[0]
    reference, actual, alone = (asyncio.run(run_session(Answering(name, ids), plan, settings, tag=name, stream=False))
                                for name, ids in (("baseline", (5, 6)), ("burst", (7, 8)), ("alone", alone_ids)))
    seen = []
    monkeypatch.setattr("spec_route_suite.equivalence.agentic.judge", lambda *a, **k: seen.append(k["cause"]) or "x")
    ctx = dict(baseline=SimpleNamespace(name="baseline"), candidate=SimpleNamespace(name="cand"), findings=None)
    judge_transcripts(reference, actual, label="concurrent session turn", evidence=SimpleNamespace(add=lambda *a: 0),
                      ctx=ctx, sent=[actual], alone=alone)
    assert seen == [cause]


def test_a_route_that_died_is_one_cause_with_the_errors_it_gave_while_dying():
    """Seen on vLLM's DFlash preset: a drafter's server died mid-run; its death (found by the mixing check), the HTTP
    500s and refused connections the distribution check met around it were four clusters, four issue files. They are
    one cause, a bug; an error on a route that did not die, or a 4xx refusal, stays its own."""
    def error(route: str, check: str, title: str, kind: str) -> dict:
        return {"route": route, "check": check, "severity": "error", "title": title, "test_id": f"t::{check}[{route}]",
                "details": {"error_kind": kind}}
    died = {"route": "a", "check": "mixing", "severity": "bug", "title": "the route died at request chat-probe",
            "test_id": "t::mixing[a]", "details": {"error_kind": "route-died", "cause": "route died"}}
    findings = [error("a", "distribution", "HTTP 500: EngineCore encountered an issue", "http-error"),
                error("a", "distribution", "connection-lost [a request d-1]: cannot connect", "connection-lost"),
                died,
                error("a", "features", "HTTP 400: n must be 1", "http-error"),
                error("b", "distribution", "HTTP 500: EngineCore encountered an issue", "http-error")]
    clusters = cluster_findings(findings)
    death = [c for c in clusters if c["route"] == "a" and c["severity"] == "bug"]
    assert len(death) == 1 and death[0]["count"] == 3 and {r["check"] for r in death[0]["checks"]} == {
        "mixing", "distribution"}
    assert sorted((c["route"], c["severity"], c["count"]) for c in clusters) == [
        ("a", "bug", 3), ("a", "error", 1), ("b", "error", 1)]


def test_the_version_a_managed_server_stated_at_start_reaches_the_issue_when_its_probe_got_no_answer(tmp_path):
    """The committed nightly 0.3.35 run: every inventory endpoint of one server timed out mid-run, so its issue
    files said "version: unknown" although the server had stated its build when the suite started it."""
    from spec_route_suite.reports.run_report import with_launch_facts
    silent = {"engine": "openai-compatible", "version": "unknown", "model": "unknown",
              "hardware": "unknown (remote server)"}
    launch = {"start": "started", "command": ["llama-server", "-m", "t.gguf"],
              "server_at_start": {"engine": "llama.cpp", "version": "b1-4df29be", "model": "t.gguf",
                                  "package": "llama-cpp-python==0.3.35 (vendor/llama.cpp)"}}
    stated = {"engine": "llama.cpp", "version": "b1-0c1e570", "model": "u.gguf"}
    assert with_launch_facts(stated, launch) == {**stated, "release": "llama-cpp-python==0.3.35 (vendor/llama.cpp)"}
    assert with_launch_facts(silent, None) == silent     # a server the suite did not start: what it stated, only
    report = report_for([load_bug("mixing", "cross-request mixing: 2 of 100 outputs answered in another request's "
                                            "context")], engine="llama.cpp",
                        server_launch={CANDIDATE: launch})
    report["inventories"][CANDIDATE] = with_launch_facts(silent, launch)
    _, text = only_issue(tmp_path, report)
    assert "engine: llama.cpp" in text and "version: b1-4df29be" in text and "model: t.gguf" in text
    assert "release: llama-cpp-python==0.3.35 (vendor/llama.cpp) (the suite built the server from it)" in text
