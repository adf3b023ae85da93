"""plant=cross-context@P: a share of the requests that arrive while others are in flight is answered in another
request's context (the motivating report's symptom), with the ground truth logged for attribution."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spec_route_suite.routes.base import Capabilities, Completion, Request, Route
from spec_route_suite.routes.wrappers.planted import CROSS_CONTEXT, CrossContextRoute, parse_plant, planted
from spec_route_suite.routes.spec import ConfigError, parse_route_uri


def spec(uri: str):
    return parse_route_uri("candidate", uri, base=Path.cwd(), environ={})


class Recording(Route):
    """Answers after a pause, so requests overlap; keeps what it was asked."""

    name = "rec"
    capabilities = Capabilities(chat=True, concurrency=True)

    def __init__(self):
        self.sent: list[Request] = []

    async def generate(self, req: Request) -> Completion:
        self.sent.append(req)
        await asyncio.sleep(0.05)
        return Completion(token_ids=(1,), text="x", finish_reason="length", route=self.name)


def chat(request_id: str, fact: str) -> Request:
    return Request(prompt_ids=(1, 2), max_tokens=4, request_id=request_id,
                   messages=(("system", "Be brief."), ("user", f"My pet is {fact}."), ("assistant", "Noted."),
                             ("user", "What is my pet?")))


async def _together(route, requests):
    return await asyncio.gather(*(route.generate(r) for r in requests))


def test_a_request_in_flight_beside_another_is_answered_in_its_context():
    inner = Recording()
    route = planted(inner, parse_plant(spec("reference:?plant=cross-context@1")))
    assert isinstance(route, CrossContextRoute)
    asyncio.run(_together(route, [chat("a", "Rex"), chat("b", "Tom")]))
    victim = next(r for r in inner.sent if r.request_id == "b")
    assert route.fault_log == [("b", "a")]
    assert victim.messages[1] == ("user", "My pet is Rex.") and victim.messages[-1] == ("user", "What is my pet?")
    first = next(r for r in inner.sent if r.request_id == "a")
    assert first.messages[1] == ("user", "My pet is Rex."), "the request alone in flight is untouched"


def test_serial_requests_and_a_zero_draw_are_never_moved():
    inner = Recording()
    route = CrossContextRoute(inner, 1.0)
    for rid, fact in (("a", "Rex"), ("b", "Tom")):
        asyncio.run(route.generate(chat(rid, fact)))
    assert route.fault_log == [] and [r.messages[1][1] for r in inner.sent] == ["My pet is Rex.", "My pet is Tom."]
    rare = CrossContextRoute(Recording(), 0.01, seed=3)
    asyncio.run(_together(rare, [chat(str(i), f"pet{i}") for i in range(40)]))
    assert len(rare.fault_log) < 5, "at 1% most overlapping requests keep their own context"


def test_a_plain_prompt_continues_the_other_prompt():
    inner = Recording()
    route = CrossContextRoute(inner, 1.0)
    plain = [Request(prompt_ids=(1, 5, 6), max_tokens=4, request_id="p"),
             Request(prompt_ids=(1, 7, 8), max_tokens=4, request_id="q")]
    asyncio.run(_together(route, plain))
    assert route.fault_log == [("q", "p")] and inner.sent[1].prompt_ids == (1, 5, 6)


@pytest.mark.parametrize("bad", ["cross-context@0", "cross-context@1.5", "cross-context@x", "cross-context"])
def test_a_bad_share_is_a_config_error_naming_the_plant(bad):
    with pytest.raises(ConfigError, match="candidate.plant"):
        parse_plant(spec(f"reference:?plant={bad}"))
    assert parse_plant(spec("reference:?plant=cross-context@0.01")) == (CROSS_CONTEXT, 0.01)


STRESSORS = ("stressors/test_mixing.py", "stressors/test_kv_pressure.py", "stressors/test_accuracy_under_load.py",
             "stressors/test_batch_invariance.py", "stressors/test_aborts.py")


def test_the_plant_under_every_stressor_is_one_issue_file(tmp_path):
    """A real run (the reference engine behind the plant, its correct twin as the batching baseline with the same KV
    pool, so every stressor has its load control): whatever stressors see the plant (mixing, KV pressure, accuracy,
    ...), attributed or not, their findings are one cause and one issue file naming each of them (issue #41: the
    plant behind a proxy got ten files, three for the mixing alone). At 10% so that several stressors see it at the
    self-test budget; the mixing check alone catches 1% (docs: the DFlash 2 plant at the CI budget)."""
    from tests.mutation import COMMON_ARGS, run_route_suite
    result = run_route_suite({"planted": "reference:?plant=cross-context@0.1&kv_capacity=768"}, list(COMMON_ARGS),
                             tmp_path, paths=STRESSORS, baseline_uri="reference:?kv_capacity=768", workers=2,
                             timeout_s=1500)
    report = result.report
    assert report, result.describe()
    bugs = [f for f in report["findings"] if f["route"] == "planted" and f["severity"] == "bug"]
    checks = {f["check"] for f in bugs}
    assert "mixing" in checks and len(checks) >= 2, (checks, result.describe())
    filed = [c for c in report["clusters"] if c["issue"]]
    assert len(filed) == len(report["issue_files"]) == 1, [(c["title"], c["not_filed"]) for c in report["clusters"]]
    (cluster,) = filed
    assert cluster["route"] == "planted" and cluster["count"] == len(bugs)
    assert {row["check"] for row in cluster["checks"]} == checks
    text = (result.run_dir / cluster["issue"]).read_text()
    assert text.startswith("<!--\nHow to file") and all(f"| {check} |" in text for check in checks)
