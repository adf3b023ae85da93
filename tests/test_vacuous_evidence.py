"""Nothing compared is never "verified" (issue #34 item 6): each check is judged by the count that matters.

The greedy, chat, streaming and stop-string checks recorded a constant count (`prompts: 1`, `streams: 1`,
`cases: 1`) beside the one that says what was compared (`tokens compared: 0`, no stop-string request), so a
passing test that compared nothing folded into a "verified" coverage row. Each check runs here on routes whose
answers leave nothing to compare (both answers empty; routes that take no stop strings) and on the correct
engine, and its records go through the coverage table (reports/coverage.py) as the report folds them.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.reports.collector import CheckOutcome
from spec_route_suite.reports.coverage import NOT_VERIFIED, VERIFIED, coverage_rows
from tests.test_greedy_classify import run_greedy
from tests.test_greedy_routes import Rewired, Sink, handle, prompts, reference_route
from tests.test_greedy_streaming import run_stream
from tests.test_stop_strings import run_prompt


def emptied(req, c):
    """An answer with nothing in it: EOS first (finish "stop", usage 0)."""
    return replace(c, token_ids=(), text="", finish_reason="stop", usage_completion_tokens=0, logprobs=None,
                   blocks=())


@pytest.fixture(scope="module")
def engine():
    route = reference_route("candidate")
    yield route
    route.batcher.close()


def folded(sink: Sink, check: str):
    """The coverage row the report makes of this one passing test's records."""
    nodeid = f"t::test[candidate-{check}]"
    records = [{**m, "test_id": nodeid} for kind, m in sink.measurements if kind == "coverage" and m["check"] == check
               and not m.get("part")]
    assert records, sink.measurements
    (row,) = [r for r in coverage_rows(records=records, outcomes=[CheckOutcome(nodeid, check, "passed", 0.1)],
                                       candidates=("candidate",)) if r.check == check and r.route == "candidate"]
    return row


def test_greedy_with_nothing_compared_is_not_verified(engine):
    prompt = prompts(("math",), 1)[0]
    empty = handle(Rewired(engine, completion=emptied), "candidate")
    sink = Sink()
    failure, _ = run_greedy(prompt, handle(Rewired(engine, completion=emptied), "baseline"), empty, sink=sink)
    assert failure is None, failure
    row = folded(sink, "greedy")
    assert row.status == NOT_VERIFIED and "vacuous: 0 tokens compared" in row.why, row
    sink = Sink()
    assert run_greedy(prompt, handle(engine, "baseline"), handle(engine, "candidate"), sink=sink)[0] is None
    assert folded(sink, "greedy").status == VERIFIED


def test_streams_with_nothing_compared_are_not_verified(engine):
    prompt = prompts(("math",), 1)[0]
    sink = Sink()
    failure, found = run_stream(prompt, handle(Rewired(engine, completion=emptied), "candidate"),
                                baseline=handle(Rewired(engine, completion=emptied), "baseline"), sink=sink)
    assert failure is None and not [f for f in found if f.severity == "bug"], failure
    row = folded(sink, "streaming")
    assert row.status == NOT_VERIFIED and "vacuous" in row.why, row
    sink = Sink()
    assert run_stream(prompt, handle(engine, "candidate"), baseline=handle(engine, "baseline"), sink=sink)[0] is None
    row = folded(sink, "streaming")
    assert row.status == VERIFIED and "tokens compared" in row.ran, row


def test_stop_strings_with_no_stop_string_sent_are_not_verified(engine):
    """Routes that take no stop strings: the plain case still runs, the stop-string claim is vacuous."""
    prompt = prompts(("math",), 1)[0]
    no_strings = replace(engine.capabilities, stop_strings=False)
    sink = run_prompt(prompt, handle(Rewired(engine, capabilities=no_strings), "baseline"),
                      handle(Rewired(engine, capabilities=no_strings), "candidate"))[1]
    row = folded(sink, "boundary")
    assert row.status == NOT_VERIFIED and "0 stop-string requests" in row.why, row
    failure, sink = run_prompt(prompt, handle(engine, "baseline"), handle(engine, "candidate"))
    assert failure is None and folded(sink, "boundary").status == VERIFIED
