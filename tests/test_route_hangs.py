"""A wedged engine is named once, and the run stays bounded (issue #34 item 14).

The load driver: a request that times out makes it ask the route's health (the handle's `watch`); a route that
stopped answering ends the run at once (its requests in flight "route-hung", the rest unsent), where it used to
send every request into its own timeout. The route handle: a call that times out with /health unanswered marks
the route on the run's hang board; a later test's call gets a bounded recovery probe (health and a canary) at most
every RECHECK_S and otherwise RouteHung at once ("not verified: route hung since <test, time>"), while the test
that found it gets a route error at once; a route that answers again is cleared. The board is shared by every
worker through one file. Times are measured on stand-in routes whose engine stops answering after N requests,
and on a run against two in-process servers (tests/fault_server.py) that wedge after client disconnects: the aborts
stressor names it once, as an engine finding (the AR server wedges too), and every later stressor reads "not
verified: route hung since ..." at once.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import spec_route_suite.routes.hangs as hangs
import spec_route_suite.session as session
from spec_route_suite.routes.base import Capabilities, Completion, Request, Route
from spec_route_suite.routes.errors import RouteTimeout
from spec_route_suite.routes.hangs import HangBoard, RouteHung
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.spec import RouteSpec
from spec_route_suite.session import RouteHandle
from spec_route_suite.stressors.driver import HUNG, burst, drive, drive_handle, plan
from tests.fault_server import FaultPlan, serve_faults
from tests.mutation import ROOT, run_route_suite
from tests.test_hostile_suite import TARGET

TIMEOUT_S = 1.0


class WedgingRoute(Route):
    """Answers its first `answers` requests, then never again (nor its health check) until `release()`, like a
    server whose HTTP threads are all held by dead connections."""

    name = "wedging"
    capabilities = Capabilities(concurrency=True)

    def __init__(self, answers: int):
        self.answers = answers
        self.sent = 0
        self.wedged = asyncio.Event()   # set: answers again
        self.released = False

    async def generate(self, req: Request) -> Completion:
        self.sent += 1
        if self.sent > self.answers and not self.released:
            await asyncio.sleep(3600)
        await asyncio.sleep(0.005)
        return Completion(token_ids=(1, 2), text="ok", finish_reason="stop", route=self.name)

    async def health(self) -> bool:
        if self.sent > self.answers and not self.released:
            await asyncio.sleep(3600)
        return True

    def release(self) -> None:
        self.released = True


def reqs(n: int, tag: str = "r"):
    return plan(((f"k{i}", Request(prompt_ids=(1, 2, 3), max_tokens=2)) for i in range(n)), offsets=burst(n), tag=tag)


@pytest.fixture
def fast(monkeypatch):
    """Health probes and recovery waits in fractions of a second."""
    monkeypatch.setattr(session, "DEADLINE_MARGIN_S", 0.5)
    monkeypatch.setattr(session, "HEALTH_PROBE_S", 0.3)
    monkeypatch.setattr(session, "HEALTH_PAUSE_S", 0.1)
    monkeypatch.setattr(session, "CANARY_TIMEOUT_S", 1.0)
    monkeypatch.setattr(session, "RECHECK_S", 3600.0)
    loop = BackgroundLoop()
    yield loop
    loop.close()


def make_handle(route, loop, board=None, name="wedging") -> RouteHandle:
    return RouteHandle(route, RouteSpec(name=name, kind="hf", model="/x"), loop, timeout_s=TIMEOUT_S, hangs=board)


def test_the_driver_stops_a_run_when_the_route_stops_answering(fast):
    """64 requests at concurrency 4 on a route that answers 8: one timeout and a health probe, not 14 rounds of
    timeouts."""
    route = WedgingRoute(answers=8)
    calls = []

    async def watch(error=None) -> str:
        calls.append(time.monotonic())
        try:
            async with asyncio.timeout(0.3):
                await route.health()
                return ""
        except TimeoutError:
            return "health unanswered"
    start = time.monotonic()
    run = asyncio.run(drive(route, reqs(64), concurrency=4, request_timeout_s=TIMEOUT_S, deadline_s=600, watch=watch))
    wall = time.monotonic() - start
    assert wall < 4 * TIMEOUT_S, f"{wall:.1f}s: the run waited out more than one round of timeouts"
    assert run.hung == "health unanswered" and "stopped" in run.describe()
    assert len(run.completed) == 8 and run.unsent > 40, run.describe()
    assert {o.error_kind for o in run.failed} <= {"timeout", HUNG}
    assert len(calls) == 1, "one probe: the others stopped"


def test_the_driver_goes_on_when_a_timeout_is_not_a_hang(fast):
    """One request stuck, the route healthy: the run sends every request."""
    route = WedgingRoute(answers=10**6)
    slow = reqs(20)
    original = route.generate

    async def generate(req):
        if req.request_id == slow[3].request.request_id:
            await asyncio.sleep(3600)
        return await original(req)
    route.generate = generate

    async def watch(error=None) -> str:
        return ""
    run = asyncio.run(drive(route, slow, concurrency=4, request_timeout_s=TIMEOUT_S, deadline_s=60, watch=watch))
    assert not run.hung and len(run.completed) == 19 and run.unsent == 0


def test_a_hung_route_is_named_once_and_later_tests_do_not_wait(fast, monkeypatch):
    route = WedgingRoute(answers=8)
    board = HangBoard()
    handle = make_handle(route, fast, board)
    monkeypatch.setattr(hangs, "_current_test", "stressors/test_aborts.py::test_x[c]")
    run = drive_handle(handle, reqs(64), concurrency=4, mean_latency_s=0.01)
    assert run.hung and handle.hang() is not None
    hang = handle.hang()
    assert hang.since_test == "stressors/test_aborts.py::test_x[c]" and "hung since stressors/test_aborts.py" in \
        hang.describe()
    assert any("hung since" in line for line in handle.notes()), "the report's notes name it"
    start = time.monotonic()
    with pytest.raises(RouteTimeout, match="earlier in this test"):
        handle.generate(Request(prompt_ids=(1,), max_tokens=1, request_id="same-test"))
    monkeypatch.setattr(hangs, "_current_test", "equivalence/test_greedy.py::test_y[c]")
    for n in range(20):   # twenty later tests: not one waits out a timeout
        with pytest.raises(RouteHung, match="hung since stressors/test_aborts.py::test_x"):
            drive_handle(handle, reqs(8, tag=f"later{n}"), concurrency=4, mean_latency_s=0.01)
    assert time.monotonic() - start < 1.0
    assert route.sent == 8 + 4, "nothing sent to the hung route after the first timeouts"


def test_a_later_test_probes_for_recovery_at_most_every_recheck(fast, monkeypatch):
    route = WedgingRoute(answers=2)
    handle = make_handle(route, fast)
    greedy = Request(prompt_ids=(1, 2), max_tokens=2, request_id="warm")
    handle.generate(greedy)   # an answer before the hang: the recovery canary resends it
    monkeypatch.setattr(hangs, "_current_test", "t1")
    with pytest.raises(RouteTimeout, match="route hung"):
        handle.generate(Request(prompt_ids=(3,), max_tokens=2, request_id="a"))
        handle.generate(Request(prompt_ids=(3,), max_tokens=2, request_id="b"))
    monkeypatch.setattr(hangs, "_current_test", "t2")
    monkeypatch.setattr(session, "RECHECK_S", 0.0)
    start = time.monotonic()
    with pytest.raises(RouteHung, match="still not answering"):
        handle.generate(Request(prompt_ids=(3,), max_tokens=2, request_id="c"))
    assert time.monotonic() - start < 3.0, "the recovery probe is bounded"
    route.release()
    assert handle.generate(Request(prompt_ids=(3,), max_tokens=2, request_id="d")).text == "ok"
    assert handle.hang() is None and any("answered again" in line for line in handle.notes())


def test_the_board_is_shared_through_its_file(tmp_path, monkeypatch):
    """Two workers: a mark on one is seen by the other, and only one of them probes for recovery at a time."""
    path = tmp_path / "route-hangs.json"
    one, two = HangBoard(path), HangBoard(path)
    monkeypatch.setattr(hangs, "_current_test", "stressors/test_aborts.py::t")
    assert two.hung("spec") is None
    one.mark("spec", why="no answer after 23 client disconnects")
    seen = two.hung("spec")
    assert seen is not None and seen.since_test == "stressors/test_aborts.py::t" and "23 client" in seen.why
    assert one.mark("spec", why="again").why == seen.why, "the first mark stands"
    assert two.claim_probe("spec", every_s=0.0) and not one.claim_probe("spec", every_s=60.0)
    one.clear("spec")
    assert two.hung("spec") is None


# ---------------------------------------------------------------- the run: two servers that wedge after disconnects
WEDGE_TIMEOUT_S = 10     # the routes' request timeout in the run (the issue's servers: 120 s)
WEDGE_SELECTION = "aborts or accuracy_under_load or needle or identical or seeded or ramp"
WEDGE_ARGS = ("--stress-requests", "48", "--concurrency", "1,8", "--prompt-limit", "1", "-k", WEDGE_SELECTION)


def wedged_run(tmp_path: Path, *, baseline_wedges: bool = True):
    """The issue's servers in small: an AR server and a speculative one (reference engines behind the in-process
    OpenAI server) that answer nothing, /health included, after 3 client disconnects; the aborts stressor (the
    first stressor a run reaches) wedges both (or the candidate alone), then the stressors after it run.
    (result, plans: the baseline's, the candidate's)."""
    plans = [FaultPlan(share=0.0, stream_share=0.0, wedge_after_disconnects=3 if wedges else 0)
             for wedges in (baseline_wedges, True)]
    served = [serve_faults("reference:", plan, base=ROOT) for plan in plans]
    try:
        uris = [f"openai:{url}?model=hostile&tokenizer={TARGET}&timeout={WEDGE_TIMEOUT_S}" for url, _ in served]
        result = run_route_suite({"spec": uris[1]}, WEDGE_ARGS, tmp_path, paths=["stressors"], baseline_uri=uris[0],
                                 timeout_s=3600)
    finally:
        for _, stop in served:
            stop()
    return result, plans


def test_a_wedged_server_is_named_once_and_the_run_stays_bounded(tmp_path):
    result, plans = wedged_run(tmp_path)
    print(f"\nwedged servers: run took {result.duration_s:.0f}s; disconnects seen "
          f"{[p.disconnects for p in plans]}")
    assert all(plan.wedged.is_set() for plan in plans), "the aborts wave wedged both servers"
    report = result.report
    assert report, result.describe()
    hangs_found = [f for f in result.findings if f["check"] == "aborts" and f["severity"] in ("engine", "error")]
    assert len(hangs_found) == 1 and hangs_found[0]["severity"] == "engine", \
        [(f["severity"], f["title"][:200]) for f in hangs_found]
    assert "not a speculation finding" in hangs_found[0]["title"]
    later = [t for t in report["tests"] if "test_aborts" not in t["nodeid"]]
    assert later and all(t["outcome"] == "skipped" and "hung since stressors/test_aborts.py" in t["reason"]
                         for t in later), [(t["nodeid"], t["outcome"], t["reason"][:160]) for t in later]
    assert not [f for f in result.findings if f["route"] == "spec" and f["severity"] in ("bug", "error")], \
        [(f["check"], f["title"][:160]) for f in result.findings if f["severity"] in ("bug", "error")]
    assert report["verdict"] != "adopt", report["verdict_reason"]
    assert result.duration_s < 300, f"{result.duration_s:.0f}s: later tests waited out their timeouts"


def test_a_server_that_wedges_alone_is_one_bug_named_at_its_request(tmp_path):
    """The same run with the AR server healthy (issue #42 item 8): the candidate's wedge is one bug finding, AVOID,
    named at the request it left unanswered, with the baseline's answer to that request as the control and a repro
    that resends it to both; every later test of the candidate reads "not run", and the run stays bounded. The
    engine-wide wedge above, at the same budget, charges the candidate nothing."""
    result, plans = wedged_run(tmp_path, baseline_wedges=False)
    assert plans[1].wedged.is_set() and not plans[0].wedged.is_set()
    report = result.report
    assert report, result.describe()
    bugs = [f for f in result.findings if f["severity"] == "bug"]
    assert len(bugs) == 1 and bugs[0]["details"]["error_kind"] == "route-died", \
        [(f["check"], f["title"][:200]) for f in bugs]
    [wedge] = bugs
    request_id = wedge["details"]["request_id"]
    assert wedge["title"].startswith(f"the route wedged at request {request_id} (timeout") and \
        wedge["title"].endswith("the baseline answers the same request"), wedge["title"]
    assert set(wedge["details"]["repro"]["case"]["request"]) == {"baseline", "candidate"}
    assert report["verdict"] == "avoid" and len(report["issue_files"]) == 1, report["issue_files"]
    later = [t for t in report["tests"] if "test_aborts" not in t["nodeid"]]
    assert later and all(t["outcome"] == "skipped" and t["reason"].startswith(
        f"not run: route 'spec' died at request {request_id}") for t in later), \
        [(t["nodeid"], t["outcome"], t["reason"][:160]) for t in later]
    assert result.duration_s < 300, f"{result.duration_s:.0f}s: later tests waited out their timeouts"
