"""Report rendering, comparison and redaction on synthetic run data (no routes needed)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from spec_route_suite.reports.collector import RunCollector, CheckOutcome, WorkerState
from spec_route_suite.reports.compare import compare_reports
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.render_html import render_html
from spec_route_suite.reports.render_junit import render_junit
from spec_route_suite.reports.render_markdown import render_summary
from spec_route_suite.reports.run_report import build_run_report, verdict_of
from spec_route_suite.reports.writer import write_run_folder
from spec_route_suite.routes.base import AcceptanceSnapshot, Request
from spec_route_suite.routes.speculation.acceptance import acceptance_profile
from spec_route_suite.reports.repro_spec import parity_repro
from tests.repro_helpers import served

SECRET = "sk-planted-secret-0123456789"


def make_collector(tmp_path: Path, *, findings: list[Finding], outcomes: list[CheckOutcome]) -> RunCollector:
    collector = RunCollector(run_dir=tmp_path / "run-1", run_id="run-1",
                             config_public={"baseline": {"name": "baseline", "kind": "hf", "model": "m"},
                                            "candidates": [{"name": "candidate", "kind": "openai", "model": "tiny",
                                                            "base_url": "http://127.0.0.1:9/v1",
                                                            "api_key_env": "KEY", "note": f"leaked {SECRET}"}]},
                             redact=Redactor((SECRET,)), is_worker=False)
    collector.findings = findings
    collector.outcomes = {o.nodeid: o for o in outcomes}
    collector.worker_states = [WorkerState(findings_recorded=len(findings)).__dict__]
    # a server route: its counters come from the controller's before/after /metrics difference
    collector.server_acceptance = {"candidate": acceptance_profile(AcceptanceSnapshot(10, 40, 18, (8, 5, 3, 2)))}
    collector.measurements = {"p_value": [{"test_id": "t::a", "name": "chi2", "p_value": 0.4}]}
    return collector


def greedy_finding(prompt: str = "math-00", uid: str = "w0-1") -> Finding:
    req = Request(prompt_ids=(1, 2, 3), max_tokens=8, request_id=f"greedy-{prompt}")
    return Finding(check="greedy", severity="bug", title=f"diverges at 5 of prompt {prompt} ({SECRET})",
                   route="candidate", prompt_id=prompt, test_id=f"equivalence/test_greedy.py::test_x[{prompt}]",
                   uid=uid, details={"diff": "- a\n+ b", "divergence": {"position": 5},
                                     "repro": parity_repro([req], candidate=served("candidate"),
                                                           baseline=served("baseline"))})


def test_verdicts():
    assert verdict_of(failed=0, bug_findings=0, error_findings=0, not_verified=0, complete=True)[0] == "adopt"
    assert verdict_of(failed=0, bug_findings=0, error_findings=0, not_verified=2, complete=True)[0] == "pilot"
    assert verdict_of(failed=1, bug_findings=0, error_findings=1, not_verified=0, complete=True)[0] == "wait"
    assert verdict_of(failed=1, bug_findings=1, error_findings=0, not_verified=0, complete=True)[0] == "avoid"
    assert verdict_of(failed=0, bug_findings=0, error_findings=0, not_verified=0, complete=False)[0] == "wait"


def test_run_folder_is_complete_redacted_and_parseable(tmp_path):
    finding = greedy_finding()
    collector = make_collector(tmp_path, findings=[finding], outcomes=[
        CheckOutcome(finding.test_id, "greedy", "failed", 0.5, "diverges"),
        CheckOutcome("equivalence/test_streaming.py::test_s", "streaming", "skipped", 0.0,
                    "not verified: route 'candidate' lacks capability 'stream'")])
    report = write_run_folder(collector)
    files = {p.name for p in collector.run_dir.rglob("*") if p.is_file()}
    assert {"report.json", "summary.md", "report.html", "junit.xml"} <= files
    assert any(name.endswith(".py") for name in files) and any(name.endswith(".sh") for name in files)
    for path in collector.run_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(), f"secret leaked into {path.name}"
    assert report["verdict"] == "avoid" and report["not_verified"][0]["check"] == "streaming"
    summary = (collector.run_dir / "summary.md").read_text()
    assert report["issue_files"] == ["issues/001-openai-greedy.md"], report["issue_files"]   # engine: the route's kind
    assert summary.startswith("# Route qualification: **AVOID**") and "issues/001-openai-greedy.md" in summary
    issue = (collector.run_dir / "issues/001-openai-greedy.md").read_text()
    assert "- a\n+ b" in issue and (collector.run_dir / "repro/001-openai-greedy.py").read_text() in issue
    junit = ET.fromstring((collector.run_dir / "junit.xml").read_text())
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert props["check"] in ("greedy", "streaming") and props["finding.0.severity"] == "bug"
    assert junit.find(".//failure") is not None and junit.find(".//skipped") is not None
    html = (collector.run_dir / "report.html").read_text()
    assert html.count("<svg") >= 3  # acceptance by position, divergence positions, p-values
    assert json.loads((collector.run_dir / "report.json").read_text())["acceptance"]["candidate"]["mean_acceptance_length"] == 2.8


def test_lost_findings_mark_the_run_incomplete(tmp_path):
    collector = make_collector(tmp_path, findings=[], outcomes=[])
    collector.worker_states = [WorkerState(findings_recorded=2).__dict__]
    report = build_run_report(collector)
    assert not report["complete"] and report["findings_accounting"]["lost"] == 2 and report["verdict"] == "wait"


def test_compare_lists_new_fixed_and_still_failing():
    def rep(run_id, titles, mal):
        return {"run_id": run_id, "verdict": "avoid", "findings": [
            {"check": "greedy", "route": "c", "test_id": t, "title": t, "severity": "bug"} for t in titles],
            "acceptance": {"c": {"mean_acceptance_length": mal}},
            "measurements": {"p_value": [{"test_id": "d", "name": "chi2", "p_value": 0.5 if run_id == "a" else 0.001}]}}
    diff = compare_reports(rep("b", ["t1", "t2"], 2.5), rep("a", ["t2", "t3"], 3.0))
    assert [x.split(" ")[0] for x in diff["new"]] == ["t1"]
    assert [x.split(" ")[0] for x in diff["fixed"]] == ["t3"]
    assert [x.split(" ")[0] for x in diff["still_failing"]] == ["t2"]
    assert diff["acceptance_length"]["c"]["change"] == -0.5
    assert list(diff["p_value_crossings"]) == ["d|chi2"]


def test_renderers_agree_on_counts(tmp_path):
    collector = make_collector(tmp_path, findings=[], outcomes=[CheckOutcome("a::b", "greedy", "passed", 0.1)])
    report = build_run_report(collector)
    assert "| greedy | no 0/1 |" in render_summary(report)
    assert ("test(s) passed but recorded no evidence of what they compared — 0 of 1 instances verified"
            in report["matrix"]["greedy"]["candidate"]["why"])
    assert report["verdict"] == "pilot" and "not run: near-tie, logprobs" in report["verdict_reason"]
    assert 'tests="1"' in render_junit(report) and "PILOT" in render_html(report)
    assert "<td>greedy</td><td>(all)</td><td>0 of 1 instances verified</td><td>1 test(s)</td>" in render_html(report)


def test_an_issue_file_stays_under_its_bound_with_a_very_long_user_prompt(tmp_path):
    """A user's 150,000-character chat prompt is in every request the repro resends: the script alone is longer
    than one issue holds. The issue file stays under 60,000 characters, names the script by its path and quotes
    its start; the script itself is written whole (a short prompt's issue still quotes it whole, above)."""
    from tests.report_limits import run_folder_problems
    long_text = "".join(f"Ticket {i}: the customer reports that the export stalls at step {i % 7}. " for i in range(2500))
    assert len(long_text) > 150_000
    req = Request(prompt_ids=tuple(range(1, 20_001)), max_tokens=8, request_id="greedy-long-00",
                  messages=(("user", long_text),))
    finding = Finding(check="greedy", severity="bug", title="diverges at 5 of prompt user-long-00", route="candidate",
                      prompt_id="user-long-00", test_id="equivalence/test_greedy.py::test_x[user-long-00]", uid="w0-1",
                      details={"diff": "- a\n+ b", "divergence": {"position": 5},
                               "repro": parity_repro([req], candidate=served("candidate"), baseline=served("baseline"))})
    collector = make_collector(tmp_path, findings=[finding], outcomes=[
        CheckOutcome(finding.test_id, "greedy", "failed", 0.5, "diverges")])
    report = write_run_folder(collector)
    (issue_name,) = report["issue_files"]
    issue = (collector.run_dir / issue_name).read_text()
    script = (collector.run_dir / report["clusters"][0]["repro"][0]).read_text()
    assert len(script) > 60_000 and long_text[:2000] in script, "the script resends the whole prompt"
    assert len(issue) < 60_000, len(issue)
    assert f"`{report['clusters'][0]['repro'][0]}` in the run folder, {len(script):,} characters" in issue
    assert "attached, not quoted" in issue and script.splitlines()[0] in issue and "- a\n+ b" in issue
    assert run_folder_problems(collector.run_dir) == []
    # whatever else a run makes long (here an 80,000-character server command line), the bound holds
    collector = make_collector(tmp_path / "long-command", findings=[greedy_finding()], outcomes=[])
    collector.server_launch = {"candidate": {"command": ["llama-server", "--lora " * 10_000]}}
    report = write_run_folder(collector)
    issue = (collector.run_dir / report["issue_files"][0]).read_text()
    assert len(issue) < 60_000 and issue.rstrip().endswith("see report.json and repro/ in the run folder)")
