"""Acceptance by kind of traffic (routes/wrappers/traffic_acceptance.py): each band is the sum of its answers' own counters.

The in-process assisted-generation route states every answer's drafts, so the wrapper's tallies are checked against
those answers one by one; the report sums the workers' tallies and the summary names each band.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spec_route_suite.reports.collector import RunCollector, WorkerState
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.render_markdown import render_summary
from spec_route_suite.reports.run_report import build_run_report
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.wrappers.traffic_acceptance import (BANDS, BandTally, TrafficAcceptance, band, merged_bands,
                                                        traffic_tallies)
from spec_route_suite.routes.wrappers.timing import TimedRoute


def _answer(tokens: int, *, drafted: int, accepted: int, steps: int | None, per_pos=()) -> Completion:
    return Completion(token_ids=tuple(range(tokens)), text="x", finish_reason="length", route="c",
                      draft_tokens=drafted, accepted_tokens=accepted, draft_steps=steps, accepted_per_pos=per_pos)


def test_bands_split_greedy_from_sampled_at_temperature_one():
    assert [band(Request(prompt_ids=(1,), max_tokens=4, temperature=t)) for t in (0.0, 0.7, 1.0, 1.01, 1.6)] == \
        [BANDS[0], BANDS[1], BANDS[1], BANDS[2], BANDS[2]]


def test_a_band_without_every_answers_steps_states_no_mean():
    """An answer that states drafts but not its steps would inflate 1 + accepted / steps: the band says n/a."""
    tally = BandTally()
    tally.add(_answer(12, drafted=8, accepted=6, steps=4, per_pos=(3, 2, 1)))
    assert tally.mean_acceptance_length == 2.5 and tally.as_dict()["per_position_acceptance_rate"] == [0.75, 0.5, 0.25]
    tally.add(_answer(5, drafted=4, accepted=1, steps=None))
    assert tally.mean_acceptance_length is None and tally.as_dict()["per_position_acceptance_rate"] == []


def test_workers_tallies_add_up_band_by_band():
    one, two = BandTally(), BandTally()
    one.add(_answer(10, drafted=8, accepted=6, steps=4, per_pos=(4, 2)))
    two.add(_answer(10, drafted=8, accepted=2, steps=4, per_pos=(2, 0, 0)))
    merged = merged_bands([{BANDS[2]: one.__dict__}, {BANDS[2]: two.__dict__, BANDS[0]: one.__dict__}])
    assert list(merged) == [BANDS[0], BANDS[2]]   # BANDS order, whatever order the workers gave
    assert (merged[BANDS[2]]["answers"], merged[BANDS[2]]["accepted"], merged[BANDS[2]]["steps"]) == (2, 8, 8)
    assert merged[BANDS[2]]["accepted_per_pos"] == [6, 2, 0] and merged[BANDS[2]]["mean_acceptance_length"] == 2.0


@pytest.fixture(scope="module")
def loop():
    with BackgroundLoop() as running:
        yield running


def test_the_wrapper_tallies_each_answers_own_counters_by_band(loop):
    """Through a real speculative engine (assisted generation over the default pair): each band equals the sum of
    its answers' own counters."""
    from spec_route_suite.routes.wire.hf import HFRoute
    from spec_route_suite.routes.spec import default_candidate

    inner = HFRoute(default_candidate())
    route = TimedRoute(TrafficAcceptance(inner))
    prompt = tuple(range(5, 25))
    requests = [Request(prompt_ids=prompt, max_tokens=24, temperature=t, seed=s, ignore_eos=True, request_id=f"r{i}")
                for i, (t, s) in enumerate([(0.0, None), (0.0, None), (0.7, 1), (1.5, 2), (1.5, 3)])]

    async def go():
        return [await route.generate(r) for r in requests]
    answers = loop.run(go(), timeout=600)
    assert all(a.draft_tokens is not None and a.draft_steps is not None for a in answers)
    tallies = traffic_tallies(route)
    assert set(tallies) == set(BANDS)
    for name in BANDS:
        mine = [a for r, a in zip(requests, answers) if band(r) == name]
        assert tallies[name]["answers"] == len(mine)
        assert tallies[name]["accepted"] == sum(a.accepted_tokens for a in mine)
        assert tallies[name]["steps"] == sum(a.draft_steps for a in mine)
        assert tallies[name]["tokens"] == sum(len(a.token_ids) for a in mine)
    assert traffic_tallies(inner) == {}
    loop.run(inner.aclose(), timeout=30)


def test_the_report_and_summary_state_each_band(tmp_path: Path):
    greedy, hot = BandTally(), BandTally()
    greedy.add(_answer(30, drafted=28, accepted=20, steps=10))
    hot.add(_answer(30, drafted=28, accepted=4, steps=26))
    idle = BandTally()
    idle.add(_answer(30, drafted=0, accepted=0, steps=0))   # llama.cpp's answer that drafted nothing
    worker = WorkerState(acceptance_by_traffic={"candidate": {BANDS[0]: greedy.__dict__, BANDS[2]: hot.__dict__},
                                                "idle": {BANDS[1]: idle.__dict__}})
    collector = RunCollector(run_dir=tmp_path / "run", run_id="run", redact=Redactor(()), is_worker=False,
                             config_public={"baseline": {"name": "baseline", "kind": "hf"},
                                            "candidates": [{"name": "candidate", "kind": "hf"},
                                                           {"name": "idle", "kind": "hf"}]})
    collector.worker_states = [worker.__dict__, WorkerState().__dict__]
    report = build_run_report(collector)
    assert report["acceptance_by_traffic"]["candidate"][BANDS[0]]["mean_acceptance_length"] == 3.0
    assert report["acceptance_by_traffic"]["candidate"][BANDS[2]]["mean_acceptance_length"] == 1.154
    summary = render_summary(report)
    assert "greedy 3.00 (1); sampled, T > 1 1.15 (1)" in summary
    assert "sampled, T <= 1: nothing drafted (1)" in summary
