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
from dataclasses import replace

import pytest

import spec_route_suite.routes.hangs as hangs
from spec_route_suite.reports.findings import Finding
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


def test_a_death_found_later_is_named_at_the_server_error_it_began_with(fast, monkeypatch, tmp_path):
    """vLLM's F2 as two workers see it: one meets an HTTP 500 while /health still answers (a route error, kept on the
    run's board with its request); the other, in a later test, finds the server gone. The death is named at the 500's
    request, found at the later one, and the 500's request (read back from the board's file) is what the repro and
    the control resend."""
    route = DyingRoute(answers=0, flaky=1)
    path = tmp_path / "route-hangs.json"
    one, two = (make_handle(route, fast, HangBoard(path), name="dying") for _ in range(2))
    monkeypatch.setattr(hangs, "_current_test", "equivalence/test_distribution.py::test_d")
    first = replace(request("dist-1"), temperature=0.7, seed=3, stop=("\n",))
    with pytest.raises(RouteHTTPError):
        one.generate(first)
    assert HangBoard(path).hung("dying") is None, "a 500 on a route that answers /health is not a death"
    monkeypatch.setattr(hangs, "_current_test", "stressors/test_mixing.py::test_m")
    with pytest.raises(RouteDied) as died:
        two.generate(request("chat-probe"))
    error = died.value
    assert (error.request_id, error.found_at, error.found_in) == ("dist-1", "chat-probe",
                                                                  "stressors/test_mixing.py::test_m")
    assert error.request == first, "the request it died on, as sent, from the other worker's record"
    finding = Finding.from_route_death(error, check="mixing", control="the baseline answers the same request")
    assert finding.title.startswith("the route died at request dist-1 (http-error: HTTP 500: try again), then "
                                    "answered nothing from request chat-probe on;"), finding.title
    assert "found dead at request chat-probe" in str(error) and "equivalence/test_distribution.py" in str(error)


def test_a_route_that_dies_in_a_concurrent_batch_is_named_at_its_first_server_error(fast, monkeypatch):
    """Seen on vLLM's DFlash preset: the distribution check's samples go out together (generate_concurrently, failures
    in place), so its HTTP 500 never reached the death judgement and the death was named at a later request. The
    batch's first failure that may kill a route is judged as a single request's is: named there, once."""
    route = DyingRoute(answers=0, flaky=1)
    handle = make_handle(route, fast, HangBoard(), name="dying")
    monkeypatch.setattr(hangs, "_current_test", "equivalence/test_distribution.py::test_d")
    with pytest.raises(RouteDied) as died:
        handle.generate_concurrently([request(f"dist-{i}") for i in range(4)], concurrency=1)
    assert died.value.request_id == "dist-0" and died.value.request.request_id == "dist-0"
    assert died.value.cause.kind == "http-error"
    healthy = make_handle(DyingRoute(answers=10, flaky=1), fast, HangBoard(), name="dying")
    outs = healthy.generate_concurrently([request(f"d-{i}") for i in range(4)], concurrency=1)
    assert isinstance(outs[0], RouteHTTPError) and outs[0].request.request_id == "d-0" and healthy.hang() is None


def test_a_server_error_the_route_answered_after_is_not_where_it_died(fast, monkeypatch):
    """A 500, then an answer, then the death: the death is the later request's (the 500 did not kill it); and a 500
    longer than DYING_WINDOW_S before the death is not where it died either."""
    route = DyingRoute(answers=1, flaky=1)
    handle = make_handle(route, fast, HangBoard(), name="dying")
    monkeypatch.setattr(hangs, "_current_test", "t::a")
    with pytest.raises(RouteHTTPError):
        handle.generate(request("r1"))
    handle.generate(request("r2"))
    with pytest.raises(RouteDied) as died:
        handle.generate(request("r3"))
    assert died.value.request_id == "r3" and not died.value.found_at
    late = make_handle(DyingRoute(answers=0, flaky=1), fast, HangBoard(), name="dying")
    monkeypatch.setattr(hangs, "DYING_WINDOW_S", 0.0)
    with pytest.raises(RouteHTTPError):
        late.generate(request("r1"))
    with pytest.raises(RouteDied) as died:
        late.generate(request("r2"))
    assert died.value.request_id == "r2"


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


# ---------------------------------------------------------------- vLLM's F2 pattern: a 500, then connections refused
ENGINE_CORE_PATHS = ["equivalence/test_distribution.py", "stressors/test_mixing.py", "stressors/test_batch_invariance.py"]
ENGINE_CORE_ARGS = ("--prompt-limit", "2", "--stress-requests", "16", "--detect-tv", "0.5", "--concurrency", "1,4")


def engine_core_run(tmp_path, die_at: str):
    """Two in-process servers (the reference engine behind the OpenAI server); the candidate's engine dies as
    vLLM's EngineCore does (F2, docs/vllm-cpu-findings.md) at the first request whose id starts with `die_at`
    ("" never): an HTTP 500 while /health still answers, 500s to what follows, then the server gone from the
    stressors' session-wide chat probe on (the request that finds it dead never reaches it)."""
    from tests.fault_server import FaultPlan, serve_faults
    from tests.mutation import run_route_suite
    from tests.test_hostile_suite import TARGET
    plans = [FaultPlan(share=0.0, stream_share=0.0),
             FaultPlan(share=0.0, stream_share=0.0, die_at=die_at, exit_at="chat-probe")]
    served = [serve_faults("reference:", plan, base=ROOT) for plan in plans]
    try:
        uris = [f"openai:{url}?model=hostile&tokenizer={TARGET}&timeout=20" for url, _ in served]
        result = run_route_suite({"spec": uris[1]}, ENGINE_CORE_ARGS, tmp_path, paths=ENGINE_CORE_PATHS,
                                 baseline_uri=uris[0], timeout_s=900, workers=1)
    finally:
        for _, stop in served:
            stop()
    return result, plans[1]


@pytest.mark.parametrize("die_at", ["dist-", ""])
def test_an_engine_core_that_dies_is_named_once_at_its_first_server_error(tmp_path, die_at):
    """Seen on vLLM's DFlash preset: the death was named at a later "cannot connect" request the server never got
    (twice: a session fixture's cached failure raised it again in a second test), not at the HTTP 500 where the
    engine died. Proven both ways at one budget: the planted death is one bug finding named at the request that got
    the first 500 (its repro resends that request), the other tests of the candidate "not run"; the same run on a
    healthy engine has no finding."""
    result, plan = engine_core_run(tmp_path, die_at)
    report = result.report
    assert report, result.describe()
    failing = [f for f in result.findings if f["severity"] in ("bug", "error")]
    if not die_at:
        assert not failing and report["verdict"] != "avoid", [(f["check"], f["title"][:160]) for f in failing]
        return
    assert plan.killed_by.startswith("dist-") and plan.exiting.is_set()
    deaths = [f for f in failing if f["details"].get("error_kind") == "route-died"]
    assert len(deaths) == 1, [(f["check"], f["test_id"], f["title"][:160]) for f in deaths]
    [death] = deaths
    assert death["details"]["request_id"] == plan.killed_by and death["severity"] == "bug", death["title"]
    assert "HTTP 500" in death["title"] and death["details"]["found_at"] == "chat-probe", death["title"]
    resent = death["details"]["repro"]["case"]["request"]["candidate"]   # the request that got the first 500
    assert resent["path"] == "/completions" and "messages" not in resent["body"], resent
    assert report["verdict"] == "avoid" and len(report["issue_files"]) == 1, report["issue_files"]
    later = [t for t in report["tests"] if "[spec" in t["nodeid"] and t["outcome"] == "skipped"
             and "died at request" in t["reason"]]
    assert later and all(t["reason"].startswith(f"not run: route 'spec' died at request {plan.killed_by}")
                         for t in later), [t["reason"][:200] for t in later]
    stressed = [t for t in report["tests"] if "[spec" in t["nodeid"] and "stressors/" in t["nodeid"]]
    assert [t["outcome"] for t in stressed].count("error") == 1 == len(stressed) - len(later), \
        "the test that found the death is its one failure; the stressors after it did not run"
