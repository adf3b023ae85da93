"""A repro that needs the requests before the failing one: which ones are chosen, and how the script carries them.

State a server carries from request to request (a stream parser not reset: the mutation table's
`parser_state_carried` row, proven end to end in tests/test_mutation.py) shows only after earlier traffic, so
an agentic finding's repro resends the last few requests the candidate got before it. Here: the choice of
those requests across concurrent sessions, and that the script data, the curl lines and the shrinking for
the size limit keep them in order before the failing request.
"""
from __future__ import annotations

from types import SimpleNamespace

from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.reports.repro import _requests, _shrunk, render_curl
from spec_route_suite.reports.repro_spec import parity_repro
from spec_route_suite.stressors.agentic.sessions import Transcript, Turn, history_before


def _req(name: str) -> Request:
    return Request(prompt_ids=(1, 2, 3), max_tokens=4, temperature=0.0, request_id=name)


def _transcript(*turns: tuple[str, float]) -> Transcript:
    t = Transcript(plan=SimpleNamespace(key="plan"), stream=True)
    t.turns = [Turn(_req(name), Completion(token_ids=(5,), text="x", finish_reason="stop", route="r"), start, start + 0.5)
               for name, start in turns]
    return t


class _Handle:
    """What a repro builder reads of a route: its name and how its server receives a request."""

    def __init__(self, name: str):
        self.name = name

    def repro_wire(self, req: Request) -> dict:
        return {"path": "/completions", "body": {"prompt": list(req.prompt_ids), "tag": req.request_id}}


def test_history_is_the_last_requests_started_before_the_turn_in_start_order():
    a = _transcript(("a0", 0.0), ("a1", 2.0), ("a2", 5.0))
    b = _transcript(("b0", 1.0), ("b1", 3.0))
    failing = a.turns[2]
    assert [r.request_id for r in history_before([a, b], failing, limit=3)] == ["b0", "a1", "b1"]
    assert [r.request_id for r in history_before([a, b], failing, limit=10)] == ["a0", "b0", "a1", "b1"]
    assert history_before([a, b], a.turns[0], limit=3) == []   # nothing came before the first request
    assert history_before([a, b], failing, limit=0) == []


def test_parity_case_carries_its_history_before_the_request_and_shrinks_to_the_last_one():
    block = parity_repro([_req("failing")], candidate=_Handle("cand"), baseline=_Handle("base"),
                         history=[_req("h0"), _req("h1")])
    case = block["case"]
    assert [p["candidate"]["body"]["tag"] for p in _requests(case)] == ["h0", "h1", "failing"]
    data = {"cluster": 1, "check": "agentic", "judge": "parity", "cases": [case],
            "routes": {"candidate": {"name": "cand", "base_url": "http://c/v1"},
                       "baseline": {"name": "base", "base_url": "http://b/v1"}}}
    curl = render_curl(data)
    assert curl.index('"h0"') < curl.index('"h1"') < curl.index('"failing"')
    shrunk = _shrunk(data)["cases"][0]
    assert [p["candidate"]["body"]["tag"] for p in shrunk["history"]] == ["h1"]
    plain = parity_repro([_req("failing")], candidate=_Handle("cand"), baseline=_Handle("base"))
    assert "history" not in plain["case"]   # no history: the case is what it always was
