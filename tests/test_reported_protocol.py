"""The motivating report's protocol as a check (stressors/accuracy/reported_protocol.py): the same 100 chat requests
serially and at concurrency 8, and the AR baseline under the same load. Proven both ways at one budget on the
reference engine: the correct engine passes; behind `plant=cross-context@P` (a share of the requests in flight
answered in another request's context) it fails, and every wrong answer it attributes names the request the plant
really took the context from (the plant's fault_log, which the check never sees)."""
from __future__ import annotations

import pytest

from spec_route_suite.routes.wrappers.planted import CROSS_CONTEXT, planted
from spec_route_suite.stressors.canary import build_workload, serial_references
from spec_route_suite.stressors.conftest import STRESS_MAX_TOKENS
from spec_route_suite.stressors.control import LoadControl
from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.accuracy.reported_protocol import CONCURRENCY, PART, REQUESTS, ReportedProtocol
from tests.test_greedy_routes import Sink, handle, reference_route, tokenizer

RATE = 0.05   # 100 requests at c=8: about 5 moved ones; 1% is measured at the DFlash presets' CI budget (docs/)


@pytest.fixture(scope="module")
def workload():
    return build_workload(tokenizer(), size=REQUESTS, seed=0, task_share=0.0, chat_share=1.0)


@pytest.fixture(scope="module")
def baseline(workload):
    """The AR side on the same engine with no speculation faults: its own serial references, its same-load runs."""
    base = handle(reference_route("baseline"), "baseline")
    refs = serial_references(base.generate, workload, max_tokens=STRESS_MAX_TOKENS)
    yield base, refs
    base.route.batcher.close()


def run_protocol(candidate, baseline, workload) -> tuple[ReportedProtocol, Sink, str | None]:
    base, base_refs = baseline
    refs = serial_references(candidate.generate, workload, max_tokens=STRESS_MAX_TOKENS)
    protocol = ReportedProtocol(LoadPair(candidate, base, tokenizer(), policy=None, max_tokens=STRESS_MAX_TOKENS),
                                workload, refs, LoadControl(base, base_refs, alpha=0.01))
    sink = Sink()
    protocol.run(sink, seed=0)
    comparison = protocol.comparison((CONCURRENCY,))
    text, details = protocol.summary_line(sink, comparison)
    return protocol, sink, protocol.judge(sink, comparison, text, details)


def test_the_correct_engine_passes_with_the_reports_three_counts(workload, baseline):
    candidate = handle(reference_route("candidate"), "candidate")
    protocol, sink, failure = run_protocol(candidate, baseline, workload)
    candidate.route.batcher.close()
    assert failure is None and protocol.flipped == []
    assert protocol.loaded[0].n == REQUESTS and protocol.serial.n == REQUESTS
    assert protocol.loaded[0].wrong == protocol.serial.wrong, "a correct engine answers alike under load"
    line = next(f for f in sink.items if f.severity == "info" and f.title.startswith(PART))
    assert f"of {REQUESTS} at concurrency {CONCURRENCY}" in line.title and "on the AR baseline under the same load" \
        in line.title
    rows = [m for kind, m in sink.measurements if kind == "coverage" and m.get("part") == PART]
    assert rows and rows[0]["verified"], rows


def test_a_cross_context_plant_is_caught_and_each_wrong_answer_names_its_real_source(workload, baseline):
    inner = reference_route("candidate")
    route = planted(inner, (CROSS_CONTEXT, RATE))
    candidate = handle(route, "candidate")
    protocol, sink, failure = run_protocol(candidate, baseline, workload)
    inner.batcher.close()
    truth = dict(route.fault_log)
    assert failure is not None and protocol.flipped, "the plant moved requests; the protocol must see it"
    assert any(f.severity == "bug" for f in sink.items)
    by_id = {o.request_id: o.key for run, _ in protocol.windows.runs for o in run.outcomes}
    attributed = [f for f in protocol.flipped if f.attribution.attributed]
    assert attributed, [f.line() for f in protocol.flipped]
    for flip in protocol.flipped:
        assert flip.request_id in truth, f"a wrong answer the plant did not cause: {flip.line()}"
    for flip in attributed:
        assert flip.attribution.source_key == by_id[truth[flip.request_id]], flip.line()
