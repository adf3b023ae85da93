"""The reporting half of the pytest plugin: gathers outcomes and findings into one run folder.

Worker half: findings ride on each test report's user_properties, and each worker sends
its finding count, route inventories and acceptance counters in `workeroutput`.
Controller half: collects every report, checks that the number of findings received
equals the number recorded (none lost), and writes the run folder atomically at the end,
also when the run was interrupted (then marked incomplete).
"""
from __future__ import annotations

import datetime as dt
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spec_route_suite.reports.findings import FINDING_PROPERTY, MEASURE_PROPERTY, Finding

WORKER_STATE_KEY = "spec_suite_worker_state"
CHECK_PROPERTY = "spec_suite_check"
UNJUDGED_PROPERTY = "spec_suite_unjudged"   # a route test of no family (the speed gate): measured, not judged
UNJUDGED = "measured"                       # the check name its failure is recorded under


def new_run_id() -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


@dataclass
class CheckOutcome:
    nodeid: str
    check: str
    outcome: str
    duration_s: float
    reason: str = ""
    routes: list[str] = field(default_factory=list)


def check_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("check")
    return marker.args[0] if marker else None


@dataclass
class WorkerState:
    """What a worker (or the single process) reports besides test outcomes."""

    findings_recorded: int = 0
    inventories: dict[str, Any] = field(default_factory=dict)
    acceptance: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, list] = field(default_factory=dict)   # route -> [(seconds, tokens)] of its requests
    acceptance_by_traffic: dict[str, Any] = field(default_factory=dict)   # route -> band -> summed answer counters
    memory: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    planned: dict[str, dict[str, str]] = field(default_factory=dict)   # nodeid -> its part (collection, before -k)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, default=str)


class RunCollector:
    """Registered once per process; only the controller (or a non-xdist run) writes files."""

    def __init__(self, *, run_dir: Path, run_id: str, config_public: dict[str, Any],
                 redact, is_worker: bool, worker_id: str = "main", compare_to: Path | None = None,
                 report_dir: Path | None = None):
        self.run_dir = run_dir
        self.run_id = run_id
        self.compare_to = compare_to
        self.report_dir = report_dir or run_dir.parent
        self.config_public = config_public
        self.redact = redact
        self.is_worker = is_worker
        self.worker_state = WorkerState()
        self.outcomes: dict[str, CheckOutcome] = {}
        self.findings: list[Finding] = []
        self.measurements: dict[str, list[dict[str, Any]]] = {}
        self.worker_states: list[dict[str, Any]] = []
        self._finding_uids: set[str] = set()
        self._sequence = 0
        self.worker_id = worker_id
        self.started = time.time()
        self.command = "spec-route-suite"   # the command line that started the run (the plugin sets it)
        self.interrupted = False
        self.crashed_workers: list[str] = []
        self.controller_findings = 0   # findings the controller's own phases added (add_controller_finding)
        self.active = False
        # Server routes (controller only): their /metrics counters are shared by every worker, so the
        # run's profile is one before/after difference, and managed servers' launch settings.
        self.server_acceptance: dict[str, Any] = {}
        self.server_launch: dict[str, Any] = {}
        self.server_memory: dict[str, Any] = {}

    # worker half -------------------------------------------------------------
    def record(self, item: pytest.Item, finding: Finding) -> None:
        """Attach a finding to the running test's report (carried to the controller by xdist)."""
        self._sequence += 1
        uid = f"{self.worker_id}-{self._sequence}"
        finding = Finding(**{**finding.__dict__, "test_id": item.nodeid, "uid": uid})
        item.user_properties.append((FINDING_PROPERTY, finding.to_json()))
        self.worker_state.findings_recorded += 1

    def measure(self, item: pytest.Item, kind: str, data: dict[str, Any]) -> None:
        """A number for the report's plots (p-values, divergence positions...), not a finding."""
        item.user_properties.append((MEASURE_PROPERTY, json.dumps({"kind": kind, "test_id": item.nodeid, **data},
                                                                  default=str)))

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Tag each route-suite test with its check family (the tag travels on every report) and keep what was
        planned before -k or --deselect removes anything: a part they remove is "not run", never absent."""
        for item in items:
            check = check_of(item)
            if check:
                item.user_properties.append((CHECK_PROPERTY, check))
                self.worker_state.planned[item.nodeid] = planned_part(item, check)
                self.active = True
            elif "candidate" in getattr(item, "fixturenames", ()):
                item.user_properties.append((UNJUDGED_PROPERTY, "1"))

    # controller half ---------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        check = None
        for name, value in report.user_properties:
            if name == CHECK_PROPERTY:
                check = value
            elif name == UNJUDGED_PROPERTY:
                self.active = True   # a route test ran (the speed gate alone still writes its run folder)
                if report.failed:
                    check = UNJUDGED   # its failure is the suite's (a crash), never silent: a failed test
            elif name == MEASURE_PROPERTY and report.when == "teardown":
                measurement = json.loads(value)
                self.measurements.setdefault(measurement.pop("kind"), []).append(measurement)
            elif name == FINDING_PROPERTY:
                finding = Finding.from_json(value)
                if finding.uid not in self._finding_uids:
                    self._finding_uids.add(finding.uid)
                    self.findings.append(finding)
        if check is None:
            return
        self.active = True
        decisive = report.when == "call" or (report.when == "setup" and not report.passed) or (
            report.when == "teardown" and report.failed)
        if not decisive:
            return
        previous = self.outcomes.get(report.nodeid)
        if report.when == "teardown" and previous and previous.outcome == "failed":
            return
        outcome = report.outcome if report.when == "call" else ("error" if report.failed else report.outcome)
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        self.outcomes[report.nodeid] = CheckOutcome(report.nodeid, check, outcome, report.duration, _reason(report))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        state = getattr(node, "workeroutput", {}).get(WORKER_STATE_KEY)
        if state:
            self.worker_states.append(json.loads(state))
        if error:
            self.crashed_workers.append(str(error)[:500])

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.interrupted = True

    def findings_recorded(self) -> int:
        return sum(s.get("findings_recorded", 0) for s in self.worker_states) + self.controller_findings

    def add_controller_finding(self, finding: Finding) -> None:
        """A finding of the controller's own phases (after the tests, on the idle servers), counted as recorded."""
        self.controller_findings += 1
        self.findings.append(finding)

    def merged_worker_field(self, key: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for state in self.worker_states:
            for name, value in state.get(key, {}).items():
                merged.setdefault(name, []).append(value)
        return merged


INSTANCE_PARAMS = ("prompt", "lean_prompt", "chat_prompt", "chat_lean_prompt", "candidate")


def planned_part(item: pytest.Item, check: str) -> dict[str, str]:
    """Which part of its family a test is an instance of: its function and its parameters other than the
    prompt and the route (`test_boundary_sweep[stop_token-math-00-candidate]` is "stop_token")."""
    callspec = getattr(item, "callspec", None)
    qualifier = ""
    if callspec is not None:
        qualifier = f"-{callspec.id}-"
        for name in INSTANCE_PARAMS:
            if name in callspec.params:
                value = callspec.params[name]
                qualifier = qualifier.replace(f"-{getattr(value, 'id', value)}-", "-", 1)
        qualifier = qualifier.strip("-")
    function = getattr(item, "originalname", None) or item.name.partition("[")[0]
    return {"check": check, "function": function, "qualifier": qualifier}


def _reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        return (crash.message if crash else str(report.longrepr))[:2000]
    return ""
