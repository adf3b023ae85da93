"""A candidate that dies mid-session is an error finding naming the request, never a test failed without one.

Seen in the vLLM DFlash preset (2026-12-04): the speculative engines died (docs/vllm-cpu-findings.md), the agentic
sessions stressor kept the failed turns as text and failed its tests with no finding behind them, which the CI
judge counts as the suite breaking (H5). Here the protocol runs against a route that answers and then drops its
connection, and against one that never answers in time; the turn's judgement must record one error finding each.
"""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from spec_route_suite.prompts.agentic import session_plans
from spec_route_suite.routes.base import Completion
from spec_route_suite.routes.errors import RouteDisconnected
from spec_route_suite.stressors.agentic.sessions import SessionSettings, run_session
from spec_route_suite.stressors.agentic.protocol import judge_transcripts
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.embedded import MODELS_DIR


class _Dying:
    """Answers `alive` requests, then behaves as a dead server (or one that never answers)."""

    def __init__(self, name: str, alive: int, hang: bool = False):
        self.name, self.alive, self.hang = name, alive, hang

    async def generate(self, req):
        if self.alive <= 0:
            if self.hang:
                await asyncio.sleep(30)
            raise RouteDisconnected("POST /chat/completions: cannot connect", route=self.name,
                                    request_id=req.request_id)
        self.alive -= 1
        return Completion(token_ids=(5, 6), text="It is sunny.", finish_reason="stop", route=self.name)


class _Sink:
    def __init__(self):
        self.added = []

    def add(self, finding):
        self.added.append(finding)
        return finding


def _transcripts(route, *, timeout_s=5.0):
    tokenizer = load_tokenizer(str(MODELS_DIR / "pair2" / "target"))
    settings = SessionSettings(tokenizer=tokenizer, max_tokens=8, fits=lambda req: True, timeout_s=timeout_s)
    plan = session_plans(1)[0]
    reference = asyncio.run(run_session(_Dying("baseline", alive=99), plan, settings, tag="ref", stream=False))
    actual = asyncio.run(run_session(route, plan, settings, tag="cand", stream=False))
    return reference, actual


def _judged(reference, actual, sink) -> list[str]:
    """The sessions part's turn-by-turn judgement of `actual` against `reference`, findings into `sink`."""
    ctx = dict(baseline=SimpleNamespace(name="baseline"), candidate=SimpleNamespace(name="cand"), findings=sink)
    return judge_transcripts(reference, actual, label="concurrent session turn",
                             evidence=SimpleNamespace(add=lambda *a: None), ctx=ctx, sent=[actual])


@pytest.mark.parametrize("hang", [False, True], ids=["dies", "hangs"])
def test_a_failed_turn_records_an_error_finding_naming_its_request(hang, monkeypatch):
    reference, actual = _transcripts(_Dying("cand", alive=1, hang=hang), timeout_s=0.2 if hang else 5.0)
    assert actual.ended == "error" and actual.turns[-1].answer is None
    monkeypatch.setattr("spec_route_suite.equivalence.agentic.judge", lambda *a, **k: "")   # answers agree
    sink = _Sink()
    failures = _judged(reference, actual, sink)
    assert len(failures) == 1 and len(sink.added) == 1
    finding = sink.added[0]
    assert finding.severity == "error" and finding.route == "cand" and finding.check == "agentic"
    assert finding.details["request_id"] == actual.turns[-1].request.request_id
    assert finding.details["error_kind"] == ("timeout" if hang else "connection-lost")


def test_a_healthy_candidate_records_no_error_finding(monkeypatch):
    reference, actual = _transcripts(_Dying("cand", alive=99))
    monkeypatch.setattr("spec_route_suite.equivalence.agentic.judge", lambda *a, **k: "")
    sink = _Sink()
    failures = _judged(reference, actual, sink)
    assert failures == [] and sink.added == [] and actual.ended == "done"
