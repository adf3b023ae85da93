"""Acceptance under load from counters, where answers state no drafting (issue #42 item 3).

Why: on vLLM the speed gate's prompt-by-prompt collapse check (stressors/speed/collapse.py) had nothing to read, so a
candidate whose acceptance halved at 8 in flight could read ADOPT. stressors/speed/counters.py measures the same
greedy prompts one at a time and in company from the route's counters in alternating rounds, on the idle server
(the controller's phase). Proven both ways on stand-in routes whose counters drop with the load (always, or in
some rounds only, like llama.cpp's F4) and on one whose counters do not; a candidate with neither per-answer nor
server counters is a named gap; a speed gate on such a route defers to the controller, which measures it.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from spec_route_suite.reports.run_report import load_acceptance_gaps
from spec_route_suite.routes.base import AcceptanceSnapshot, Capabilities, Completion, Request, Route
from spec_route_suite.routes.spec import RouteSpec
from spec_route_suite.session import RouteHandle
from spec_route_suite.stressors.speed.counters import (LevelRound, collapse_finding, collapsed_levels, measure,
                                                       unjudged)
from tests.mutation import ROOT
from tests.test_route_hangs import fast  # noqa: F401 (a fixture)


class CountingRoute(Route):
    """Counts drafts server-wide (scope "server"); each answer accepts 3 drafts a step alone and `loaded` when it is
    sent in company (in the rounds `collapse_rounds` names, or all): the round and level read from its request id."""

    name = "counting"
    capabilities = Capabilities(concurrency=True)

    def __init__(self, loaded: int, collapse_rounds=None):
        self.loaded, self.collapse_rounds = loaded, collapse_rounds
        self.drafts = self.accepted = 0

    async def generate(self, req: Request) -> Completion:
        import asyncio
        await asyncio.sleep(0.005)
        found = re.match(r"la(\d+)-c(\d+)-", req.request_id)
        company = bool(found) and int(found.group(2)) > 1 and (self.collapse_rounds is None
                                                                 or int(found.group(1)) in self.collapse_rounds)
        self.drafts += 10
        self.accepted += 10 * (self.loaded if company else 3)
        return Completion(token_ids=(1, 2), text="ok", finish_reason="length", route=self.name)

    async def acceptance(self) -> AcceptanceSnapshot:
        return AcceptanceSnapshot(drafts=self.drafts, draft_tokens=7 * self.drafts, accepted=self.accepted,
                                  scope="server")

    async def health(self) -> bool:
        return True


def handle_of(route, loop) -> RouteHandle:
    return RouteHandle(route, RouteSpec(name=route.name, kind="hf", model="/x"), loop, timeout_s=5.0)


PROMPTS = [[1, 2, 3, i] for i in range(16)]


@pytest.mark.parametrize("loaded, collapse_rounds, caught", [
    (1, None, True),        # acceptance length 2 at 8 in flight against 4 alone, every round
    (1, {2}, True),         # one round of six only: F4 strikes some rounds
    (3, None, False),       # the same in company: a correct engine
])
def test_a_drop_in_company_is_seen_and_a_steady_route_passes(fast, loaded, collapse_rounds, caught):
    route = CountingRoute(loaded, collapse_rounds)
    rounds = measure(handle_of(route, fast), PROMPTS, [1, 8])
    assert len(rounds) == 12 and all(r.length for r in rounds)
    finding = collapse_finding(rounds, route="counting")
    assert (finding is not None) == caught, [r.length for r in rounds]
    if caught:
        assert finding.severity == "warning" and "acceptance collapses with the load" in finding.title


def test_near_tie_wobble_is_not_a_collapse():
    rounds = [LevelRound(1, n, 158, 273) for n in range(6)] + [LevelRound(8, n, 159, 272) for n in range(6)]
    assert collapsed_levels(rounds) == []


def test_counters_that_never_move_at_a_level_are_not_acceptance_that_held():
    held = [LevelRound(1, n, 158, 273) for n in range(6)] + [LevelRound(8, n, 159, 272) for n in range(6)]
    assert unjudged(held) == ""
    silent = [LevelRound(1, n, 158, 273) for n in range(6)] + [LevelRound(8, n, 0, 0) for n in range(6)]
    assert "counted no drafted token at 8 in flight" in unjudged(silent)
    assert collapse_finding(silent, route="c") is None, "no warning: no evidence either way"
    assert "not measured" in unjudged([])
    speed = {"candidate": "c", "rows": {"candidate": [{"concurrency": 1}, {"concurrency": 8}]}}
    [gap] = load_acceptance_gaps({"speed": [speed], "load_acceptance": [{"route": "c", "judged": False,
                                                                         "why": unjudged(silent)}]})
    assert gap.subject == "speed: acceptance under load", gap


def test_a_route_with_no_counters_at_all_is_a_named_gap():
    speed = {"candidate": "c", "rows": {"candidate": [{"concurrency": 1}, {"concurrency": 8}]}}
    [gap] = load_acceptance_gaps({"speed": [speed]})
    assert gap.kind == "not verified" and gap.subject == "speed: acceptance under load"
    assert load_acceptance_gaps({"speed": [speed], "load_acceptance": [{"route": "c", "judged": True}]}) == []
    stated = {"candidate": "c", "rows": {"candidate": [{"acceptance_by_prompt": {"p0": [3, 6]}}]}}
    assert load_acceptance_gaps({"speed": [stated]}) == []


def counters_only_run(out, fault: str, *extra: str) -> dict:
    """stressors/test_speed.py against an OpenAI route to the in-process server (answers that state no drafting, a
    /metrics that counts it) serving the reference engine with `fault` ("" none); the run's report."""
    uri = "reference:" + (f"?fault={fault}" if fault else "")
    script = (f"import threading, sys\nfrom spec_route_suite.servers.inprocess import build_engine, make_server\n"
              f"engine = build_engine({uri!r}, model_name='tiny')\nhttpd = make_server(engine)\n"
              f"print(httpd.server_address[1], flush=True)\nhttpd.serve_forever()\n")
    server = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        done = subprocess.run([sys.executable, "-m", "pytest", "stressors/test_speed.py", "-p", "no:cacheprovider",
                               "--candidate", f"openai:http://127.0.0.1:{port}/v1?model=tiny&tokenizer="
                               "fixtures/models/target", "--prompt-limit", "2", "--concurrency", "8",
                               "--report-dir", str(out), *extra], cwd=ROOT, capture_output=True, text=True,
                              timeout=900)
    finally:
        server.kill()
    assert done.returncode == 0, done.stdout[-3000:]
    path = max(out.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    return {**json.loads(path.read_text()), "run_dir": str(path.parent)}


@pytest.fixture(scope="module")
def clean_counters_run(tmp_path_factory) -> dict:
    """The correct engine's counters-only run, shared: the collapse check's clean side and the regression's last
    night."""
    return counters_only_run(tmp_path_factory.mktemp("clean-counters") / "out", "")


@pytest.mark.parametrize("fault", ["", "collapse_in_company"])
def test_the_speed_gate_defers_a_counters_only_route_to_the_controller(tmp_path, fault, request):
    """An OpenAI route to the in-process server, whose answers state no drafting but whose /metrics counts it:
    the speed gate defers it, and the controller measures it on the idle server after the tests. Proven both ways
    at one budget: the correct engine's acceptance holds in company (no warning); the planted collapse_in_company
    (every draft rejected with two or more in flight, answers unchanged: llama.cpp's F4 in the extreme) is the
    counters' collapse warning, and the run does not read ADOPT."""
    report = counters_only_run(tmp_path / "out", fault) if fault else request.getfixturevalue("clean_counters_run")
    measured = report["measurements"].get("load_acceptance") or []
    assert measured and measured[0]["judged"] and len(measured[0]["rounds"]) == 12, report["measurements"].keys()
    assert not [g for g in report["gaps"] if "acceptance under load" in g]
    collapses = [f for f in report["findings"] if f["check"] == "speed" and f["severity"] == "warning"
                 and "collapses" in f["title"]]
    if not fault:
        assert not collapses, [f["title"] for f in collapses]
        return
    assert len(collapses) == 1 and "counters" in collapses[0]["title"], [f["title"] for f in report["findings"]]
    assert report["verdict"] != "adopt", report["verdict_reason"]


@pytest.mark.parametrize("fault", ["", "stale_last_draft"])
def test_a_counters_only_acceptance_regression_is_caught_against_the_previous_run(tmp_path, fault,
                                                                                 clean_counters_run):
    """Nightly regression where answers state no drafting (vLLM): a run of the correct engine, then the same route
    --compare-to it. Proven both ways at one budget: the planted stale_last_draft (lossless, its last draft position
    reads the wrong state: acceptance lower, answers unchanged) is an acceptance regression judged by the server's
    counter rounds, a gap that keeps ADOPT away; the correct engine rerun against the first run is none."""
    first = clean_counters_run
    report = counters_only_run(tmp_path / "second", fault, "--compare-to", first["run_dir"])
    [entry] = report["comparison"]["candidates"].values()
    assert entry["compared"] and entry["acceptance"]["test"].startswith("the server's counters"), entry
    regressed = [g for g in report["gaps"] if "acceptance regression" in g]
    if not fault:
        assert entry["regression"] is None and not regressed, entry["acceptance"]["groups"]
        return
    assert entry["regression"] and "rank-sum test" in entry["regression"]["title"], entry["acceptance"]["groups"]
    assert regressed and report["verdict"] != "adopt"
    assert first["run_id"] in entry["regression"]["title"]
