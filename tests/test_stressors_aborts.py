"""Self-test of the aborts stressor: a route that dies or hangs after client disconnects becomes findings that
name the request and the clock time, the test fails cleanly within its bounds, and a healthy route passes."""
from __future__ import annotations

import asyncio
import re
import time
from types import SimpleNamespace

import pytest

import spec_route_suite.session as session
import spec_route_suite.stressors.abort_wave as abort_wave
import spec_route_suite.stressors.test_aborts as aborts
from spec_route_suite.routes.base import Capabilities
from spec_route_suite.routes.errors import RouteDisconnected
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.spec import RouteSpec
from spec_route_suite.session import RouteHandle
from spec_route_suite.stressors.canary import build_workload, serial_references
from spec_route_suite.stressors.control import LoadControl
from spec_route_suite.stressors.driver import budget_for
from test_stressors_fakes import CharTokenizer, OracleRoute


class FragileRoute(OracleRoute):
    """Correct until a client hangs up mid-request; then it dies (errors) or hangs (never answers)."""

    def __init__(self, mode: str):
        super().__init__(latency_s=0.05)
        self.mode = mode
        self.broken = False

    async def generate(self, req):
        if self.broken:
            if self.mode == "hangs":
                await asyncio.sleep(3600)
            raise RouteDisconnected("engine process exited", route=self.name, request_id=req.request_id)
        try:
            return await super().generate(req)
        except asyncio.CancelledError:
            self.broken = self.mode != "healthy"
            raise

    async def health(self) -> bool:
        if self.broken and self.mode == "hangs":
            await asyncio.sleep(3600)
        return not self.broken


class Sink:
    def __init__(self):
        self.items = []
        self.coverage = []

    def add(self, finding):
        self.items.append(finding)
        return finding

    def cover(self, check: str, route: str, **data) -> None:
        self.coverage.append({"check": check, "route": route, **data})


class Config:
    seed = 0


# a baseline that serialises requests: no load control is run (stressors/control.py); the route alone is judged
SERIAL_BASELINE = SimpleNamespace(name="baseline", capabilities=Capabilities(concurrency=False))


def survives(handle, budget, workload, refs, sink):
    aborts.test_route_survives_client_disconnects(
        candidate=handle, baseline=SERIAL_BASELINE, stress_budget=budget, stress_workload=workload,
        stress_references=refs, stress_max_tokens=64, suite_config=Config(),
        stress_control=LoadControl(SERIAL_BASELINE, None, alpha=0.01), findings=sink)


@pytest.mark.parametrize("mode", ["healthy", "dies", "hangs"])
def test_a_route_that_dies_or_hangs_after_disconnects_becomes_findings(mode, monkeypatch):
    monkeypatch.setattr(session, "DEADLINE_MARGIN_S", 0.5)
    monkeypatch.setattr(abort_wave, "HEALTH_TIMEOUT_S", 1.0)
    loop = BackgroundLoop()
    try:
        route = FragileRoute(mode)
        handle = RouteHandle(route, RouteSpec(name="fragile", kind="hf", model="/x"), loop, timeout_s=2.0)
        workload = build_workload(CharTokenizer(), size=8, seed=1, max_prompt_tokens=10_000)
        refs = serial_references(handle.generate, workload, max_tokens=64)
        budget = budget_for(batched=True, levels=(1, 8), stress_requests=80)
        sink = Sink()
        start = time.monotonic()
        if mode == "healthy":
            survives(handle, budget, workload, refs, sink)
            assert [f.severity for f in sink.items] == ["info"]
            return
        with pytest.raises(pytest.fail.Exception, match="after client disconnects"):
            survives(handle, budget, workload, refs, sink)
        assert time.monotonic() - start < 30, "a dead or hung route must not stall the suite"
        errors = [f for f in sink.items if f.severity == "error"]
        canary = next(f for f in errors if "post-abort-canary" in f.title)
        assert re.search(r"at \d\d:\d\d:\d\d", canary.title), canary.title
        assert canary.details["error_kind"] == ("timeout" if mode == "hangs" else "connection-lost")
        assert any("health check" in f.title for f in errors)
        assert any(f.severity == "info" for f in sink.items), "the budget line is still reported"
    finally:
        loop.close()
