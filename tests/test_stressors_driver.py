"""Self-tests of the load driver: the bound holds, every wait is bounded, hang-ups and failures are recorded."""
from __future__ import annotations

import asyncio
import random
import time

import pytest

from spec_route_suite.routes.base import Capabilities, Completion, Request, Route
from spec_route_suite.routes.errors import RouteHTTPError
from spec_route_suite.stressors.driver import (BATCHED_DEFAULT, SERIAL_DEFAULT, Submission, budget_for, burst, bursts, drive,
                              mixed_arrivals, plan, random_arrivals, round_robin)


class CountingRoute(Route):
    """Observes its own concurrency independently of the driver; can hang or fail on demand."""

    name = "counting"
    capabilities = Capabilities(concurrency=True, stream=True)

    def __init__(self, *, latency_s=0.005, hang_ids=(), fail_ids=()):
        self.latency_s = latency_s
        self.hang_ids = set(hang_ids)
        self.fail_ids = set(fail_ids)
        self.now = self.peak = 0
        self.cancelled: list[str] = []
        self.started: list[str] = []

    async def generate(self, req: Request) -> Completion:
        self.now += 1
        self.peak = max(self.peak, self.now)
        self.started.append(req.request_id)
        try:
            if req.request_id in self.fail_ids:
                raise RouteHTTPError("boom", status=500, route=self.name, request_id=req.request_id)
            await asyncio.sleep(3600 if req.request_id in self.hang_ids else self.latency_s * random.uniform(0.5, 2))
            return Completion(token_ids=(1,), text="x", finish_reason="stop", route=self.name)
        except asyncio.CancelledError:
            self.cancelled.append(req.request_id)
            raise
        finally:
            self.now -= 1


def reqs(n, tag="r"):
    return [(f"k{i % 5}", Request(prompt_ids=(1, 2, 3), max_tokens=4)) for i in range(n)]


@pytest.mark.parametrize("concurrency", [1, 3, 8])
@pytest.mark.parametrize("arrivals", ["burst", "random", "waves", "mixed"])
def test_never_exceeds_the_concurrency_bound(concurrency, arrivals):
    rng = random.Random(concurrency)
    n = 60
    offsets = {"burst": burst(n), "random": random_arrivals(n, rate_per_s=2000, rng=rng),
               "waves": bursts(n, size=10, gap_s=0.01), "mixed": mixed_arrivals(n, rng=rng, rate_per_s=2000, segment=8)}
    route = CountingRoute()
    run = asyncio.run(drive(route, plan(reqs(n), offsets=offsets[arrivals], tag="t"), concurrency=concurrency,
                            request_timeout_s=5, deadline_s=30))
    assert len(run.completed) == n, run.describe()
    assert route.peak <= concurrency and run.max_in_flight <= concurrency
    if arrivals == "burst":
        assert run.max_in_flight == concurrency, "a burst should saturate the bound"
    assert all(o.in_flight_at_start <= concurrency for o in run.outcomes)


@pytest.mark.parametrize("concurrency", [32, 256])
def test_a_burst_reaches_the_bound_even_against_an_instant_route(concurrency):
    """On a fast engine the driver, not the client, must set the load: a burst keeps `concurrency` in flight
    (launching one request per loop turn once kept ~10 in flight at any level against an instant server)."""
    route = CountingRoute(latency_s=0.0)
    n = 4 * concurrency
    run = asyncio.run(drive(route, plan(reqs(n), offsets=burst(n), tag="fast"), concurrency=concurrency,
                            request_timeout_s=5, deadline_s=30))
    assert len(run.completed) == n, run.describe()
    assert run.max_in_flight == route.peak == concurrency, run.describe()


def test_timeouts_hang_ups_and_failures_are_outcomes_not_exceptions():
    subs = plan(reqs(6), offsets=burst(6), tag="t", abort_after_s=[None, 0.02, None, None, None, None])
    route = CountingRoute(latency_s=0.2, hang_ids={"t-2-k2"}, fail_ids={"t-3-k3"})
    start = time.monotonic()
    run = asyncio.run(drive(route, subs, concurrency=6, request_timeout_s=0.5, deadline_s=10))
    assert time.monotonic() - start < 3, "a hung request must cost its timeout, not the run"
    by_id = run.by_id()
    assert by_id["t-1-k1"].aborted and "t-1-k1" in route.cancelled, "a hang-up cancels the route call"
    assert by_id["t-2-k2"].error_kind == "timeout" and "t-2-k2" in route.cancelled
    assert by_id["t-3-k3"].error_kind == "http-error" and "boom" in by_id["t-3-k3"].error
    assert {o.request_id for o in run.failed} == {"t-2-k2", "t-3-k3"}
    assert len(run.completed) == 3


def test_run_deadline_bounds_everything_and_counts_unsent():
    subs = plan(reqs(10), offsets=[0.0] * 4 + [5.0] * 6, tag="t")
    route = CountingRoute(hang_ids={"t-0-k0", "t-1-k1"})
    start = time.monotonic()
    run = asyncio.run(drive(route, subs, concurrency=2, request_timeout_s=100, deadline_s=0.5))
    assert time.monotonic() - start < 7
    assert run.unsent >= 6, run.describe()
    kinds = {o.request_id: o.error_kind for o in run.outcomes}
    assert kinds["t-0-k0"] == kinds["t-1-k1"] == "run-deadline"
    assert "t-2-k2" not in route.started, "nothing is sent once the bound is full and the deadline passed"


def test_rejects_plans_it_cannot_key():
    dup = [Submission("a", Request(prompt_ids=(1,), max_tokens=1, request_id="x"))] * 2
    with pytest.raises(ValueError, match="unique"):
        asyncio.run(drive(CountingRoute(), dup, concurrency=1, request_timeout_s=1, deadline_s=1))
    with pytest.raises(ValueError, match="concurrency"):
        asyncio.run(drive(CountingRoute(), [], concurrency=0, request_timeout_s=1, deadline_s=1))


def test_round_robin_never_repeats_a_key_within_a_pass():
    keys = [f"k{i}" for i in range(10)]
    order = round_robin(keys, 35, rng=random.Random(0))
    assert len(order) == 35
    for start in range(0, 30, 10):
        assert sorted(order[start:start + 10]) == sorted(keys)


def test_budgets():
    batched = budget_for(batched=True, levels=(1, 8, 32), stress_requests=None)
    assert batched.levels == (8, 32) and batched.mixing_requests == BATCHED_DEFAULT["mixing_requests"] == 640
    serial = budget_for(batched=False, levels=(1, 8, 32), stress_requests=None)
    assert serial.mixing_requests == SERIAL_DEFAULT["mixing_requests"] and serial.batch(32) == 4
    assert serial.levels == (8,), "a serialising route's concurrency is nominal: one level"
    assert budget_for(batched=False, levels=(1, 8, 32), stress_requests=50).levels == (8, 32)
    scaled = budget_for(batched=True, levels=(8,), stress_requests=2000)
    assert scaled.mixing_requests == 2000 and "--stress-requests 2000" in scaled.describe()
    assert budget_for(batched=True, levels=(1,), stress_requests=None).levels == ()
