"""A route that dies is one finding naming the request that killed it, and nothing is sent to it again (issue #42
item 8).

Why: an engine that aborts at its first verify step (a real llama.cpp assertion), or whose EngineCore dies (vLLM's
F2), used to read as one route error per check that met it: 78 route errors, WAIT, and an issue file per check.
A request that fails while the route then answers neither /health nor a canary marks the route dead at that
request: the test that found it records one bug finding (the baseline answers the same request as the control),
every later test reads "not run: route ... died at request R". Proven on stand-in routes (the handle, the load
driver), and end to end on the reference engine's planted `dies_at_first_verify` beside the correct engine at the
same budget.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

import spec_route_suite.routes.hangs as hangs
from spec_route_suite.routes.base import Capabilities, Completion, Request, Route
from spec_route_suite.routes.errors import RouteDied, RouteDisconnected, RouteHTTPError
from spec_route_suite.routes.hangs import HangBoard, RouteHung
from spec_route_suite.stressors.driver import drive_handle
from tests.mutation import ROOT
from tests.test_route_hangs import fast, make_handle, reqs  # noqa: F401 (fast: a fixture)


class DyingRoute(Route):
    """Answers `answers` requests, then fails every request with a lost connection and its health check, like a
    server process that aborted; `flaky` requests fail with a 500 while the server stays healthy."""

    name = "dying"
    capabilities = Capabilities(concurrency=True)

    def __init__(self, answers: int, flaky: int = 0):
        self.answers, self.flaky, self.sent = answers, flaky, 0

    async def generate(self, req: Request) -> Completion:
        self.sent += 1
        await asyncio.sleep(0.002)
        if self.sent <= self.flaky:
            raise RouteHTTPError("HTTP 500: try again", status=500, route=self.name, request_id=req.request_id)
        if self.sent > self.answers + self.flaky:
            raise RouteDisconnected("connection lost", route=self.name, request_id=req.request_id)
        return Completion(token_ids=(1, 2), text="ok", finish_reason="stop", route=self.name)

    async def health(self) -> bool:
        return self.sent <= self.answers + self.flaky


def request(rid: str) -> Request:
    return Request(prompt_ids=(1, 2, 3), max_tokens=2, request_id=rid)


def test_the_request_that_kills_a_route_is_named_once_and_nothing_is_sent_after_it(fast, monkeypatch):
    route, board = DyingRoute(answers=1), HangBoard()
    handle = make_handle(route, fast, board, name="dying")
    monkeypatch.setattr(hangs, "_current_test", "equivalence/test_greedy.py::test_a")
    handle.generate(request("r1"))
    with pytest.raises(RouteDied, match="route 'dying' died at request r2") as died:
        handle.generate(request("r2"))
    assert died.value.request.request_id == "r2" and died.value.cause.kind == "connection-lost"
    sent = route.sent
    monkeypatch.setattr(hangs, "_current_test", "equivalence/test_greedy.py::test_b")
    with pytest.raises(RouteHung) as later:
        handle.generate(request("r3"))
    assert later.value.hang.skip_reason.startswith("not run: route 'dying' died at request r2")
    assert route.sent == sent, "a dead route gets no request again"


def test_a_server_error_on_a_healthy_route_stays_the_error_it_is(fast, monkeypatch):
    route, board = DyingRoute(answers=10, flaky=1), HangBoard()
    handle = make_handle(route, fast, board, name="dying")
    monkeypatch.setattr(hangs, "_current_test", "equivalence/test_greedy.py::test_a")
    with pytest.raises(RouteHTTPError):
        handle.generate(request("r1"))
    assert board.hung("dying") is None and handle.generate(request("r2")).text == "ok"


def test_a_route_that_dies_under_load_ends_the_run_naming_the_first_request_that_failed(fast, monkeypatch):
    route, board = DyingRoute(answers=20), HangBoard()
    handle = make_handle(route, fast, board, name="dying")
    monkeypatch.setattr(hangs, "_current_test", "stressors/test_mixing.py::test_x")
    submissions = reqs(400)
    with pytest.raises(RouteDied) as died:
        drive_handle(handle, submissions, concurrency=8, mean_latency_s=0.01)
    assert died.value.request.request_id in {s.request.request_id for s in submissions}
    assert route.sent < 60, f"{route.sent} requests sent: the run went on after the route died"
    monkeypatch.setattr(hangs, "_current_test", "stressors/test_aborts.py::test_y")
    with pytest.raises(RouteHung):
        drive_handle(handle, reqs(8, tag="later"), concurrency=4, mean_latency_s=0.01)


def run_suite(tmp_path, fault: str) -> tuple[subprocess.CompletedProcess, dict, float]:
    out = tmp_path / "out"
    candidate = "reference:" + (f"?fault={fault}" if fault else "")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pytest", "equivalence/test_greedy.py", "stressors/test_mixing.py",
                             "stressors/test_speed.py", "-p", "no:cacheprovider", "-n", "2", "--candidate", candidate,
                             "--prompt-limit", "2", "--stress-requests", "64", "--report-dir", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=900)
    return result, json.loads(next(out.glob("*/report.json")).read_text()), time.monotonic() - started


@pytest.mark.parametrize("fault", ["dies_at_first_verify", ""])
def test_an_engine_that_dies_at_its_first_verify_step_reads_avoid_with_one_finding(tmp_path, fault):
    """Proven both ways at one budget: the planted death is one bug finding and one issue file naming the request
    that killed it, with a repro that replays it against both routes, every other test of the candidate "not run",
    in less time than the correct engine's run; the correct engine at the same budget has no finding."""
    result, report, elapsed = run_suite(tmp_path, fault)
    if not fault:
        assert result.returncode == 0 and not [f for f in report["findings"] if f["severity"] in ("bug", "error")]
        return
    [death] = [f for f in report["findings"] if f["severity"] == "bug"]
    [issue_file] = (tmp_path / "out").glob("*/issues/*.md")
    assert death["details"]["request_id"] in issue_file.read_text()
    repro = death["details"]["repro"]   # the killing request, replayed against both routes: the baseline's control
    assert set(repro["routes"]) == set(repro["case"]["request"]) == {"baseline", "candidate"}, repro
    assert result.returncode == 1, result.stdout[-3000:]
    [finding] = [f for f in report["findings"] if f["severity"] in ("bug", "error")]
    assert finding["severity"] == "bug" and finding["details"]["error_kind"] == "route-died", finding
    assert finding["title"].startswith(f"the route died at request {finding['details']['request_id']}")
    assert report["verdict"] == "avoid" and len(report["issue_files"]) == 1
    candidate_tests = [t for t in report["tests"] if "candidate" in t["nodeid"] and "[candidate" in t["nodeid"]]
    assert sum(t["outcome"] in ("failed", "error") for t in candidate_tests) == 1
    assert all(t["reason"].startswith("not run: route 'candidate' died at request")
               for t in candidate_tests if t["outcome"] == "skipped")
    assert elapsed < 120, f"{elapsed:.0f}s: a dead route must end the run, not run it to its end"
