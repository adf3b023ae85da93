"""The load driver: send a planned set of requests to one route with bounded concurrency.

Why a driver of our own: cross-request bugs appear only when requests share engine steps,
so the stressors need exact control of how many requests are in flight, when each one
arrives, and which clients hang up mid-stream. Everything is bounded: at most
`concurrency` requests in flight (checked by an in-flight counter on every admission),
each request has a timeout, the run has a deadline, and every loop runs over a finite
plan. A request that times out makes the driver ask `watch` (the route handle's health
probe, spec_route_suite/session.py) whether the route still answers: a route found hung
ends the run at once (its requests in flight "route-hung", the rest unsent) instead of
sending every remaining request into its own timeout. The driver talks only to the Route
object it is handed (a configured route), never to an address of its own. Environment: none.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, replace
from typing import Awaitable, Callable, Iterable, Sequence

from spec_route_suite.routes.base import Completion, Request, Route
from spec_route_suite.routes.errors import RouteDied, RouteError, RouteTimeout, stops_a_route
from spec_route_suite.progress import track
from spec_route_suite.reports.findings import Finding

MAX_SUBMISSIONS = 20_000
ABORTED = "aborted"
DEADLINE = "run-deadline"
HUNG = "route-hung"
# asked after a request timed out (None) or failed in a way that may have killed the route (its error): "" while
# the route answers its health check or a canary, else why it stopped (the route is then marked hung, or dead)
Watch = Callable[[RouteError | None], Awaitable[str]]


@dataclass(frozen=True)
class Submission:
    """One planned request: what to send, when (seconds after the run starts), and when the client hangs up."""

    key: str
    request: Request
    at_s: float = 0.0
    abort_after_s: float | None = None


@dataclass(frozen=True)
class Outcome:
    """What happened to one submission. Times are seconds since the run started."""

    key: str
    request_id: str
    completion: Completion | None
    error_kind: str | None
    error: str | None
    started_s: float
    ended_s: float
    in_flight_at_start: int

    @property
    def ok(self) -> bool:
        return self.completion is not None

    @property
    def aborted(self) -> bool:
        return self.error_kind == ABORTED

    def overlaps(self, other: "Outcome") -> bool:
        return self.started_s < other.ended_s and other.started_s < self.ended_s


@dataclass(frozen=True)
class LoadRun:
    """A finished load run: one outcome per sent submission, and the bound that held."""

    outcomes: tuple[Outcome, ...]
    concurrency: int
    max_in_flight: int
    wall_s: float
    started_at: float
    unsent: int = 0
    hung: str = ""   # why the run stopped early: the route stopped answering (its health check too)

    @property
    def completed(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if o.ok)

    @property
    def failed(self) -> tuple[Outcome, ...]:
        return tuple(o for o in self.outcomes if not o.ok and not o.aborted)

    def by_id(self) -> dict[str, Outcome]:
        return {o.request_id: o for o in self.outcomes}

    def describe(self) -> str:
        return (f"{len(self.outcomes)} sent ({len(self.completed)} completed, "
                f"{sum(o.aborted for o in self.outcomes)} aborted, {len(self.failed)} failed, {self.unsent} unsent) "
                f"at concurrency {self.concurrency} (max in flight {self.max_in_flight}) in {self.wall_s:.1f}s"
                + (f"; stopped: {self.hung}" if self.hung else ""))


class ConcurrencyBreach(AssertionError):
    """The driver itself broke its bound: a bug in the suite, never in the route."""


@dataclass
class _Gauge:
    limit: int
    now: int = 0
    peak: int = 0

    def enter(self) -> int:
        self.now += 1
        self.peak = max(self.peak, self.now)
        if self.now > self.limit:
            raise ConcurrencyBreach(f"{self.now} requests in flight, limit {self.limit}")
        return self.now

    def leave(self) -> None:
        self.now -= 1


async def drive(route: Route, submissions: Sequence[Submission], *, concurrency: int,
                request_timeout_s: float, deadline_s: float, watch: Watch | None = None) -> LoadRun:
    """Send `submissions` in arrival order with at most `concurrency` in flight; never raises for route failures.
    `watch`: asked after a request times out; a reason ends the run (the route is hung)."""
    with track(f"load at concurrency {concurrency}", len(submissions)) as progress:
        return await _drive(route, submissions, concurrency=concurrency, request_timeout_s=request_timeout_s,
                            deadline_s=deadline_s, progress=progress, watch=watch)


async def _drive(route: Route, submissions: Sequence[Submission], *, concurrency: int, request_timeout_s: float,
                 deadline_s: float, progress, watch: Watch | None = None) -> LoadRun:
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if len(submissions) > MAX_SUBMISSIONS:
        raise ValueError(f"{len(submissions)} submissions exceed the driver's bound of {MAX_SUBMISSIONS}")
    ids = [s.request.request_id for s in submissions]
    if len(set(ids)) != len(ids) or not all(ids):
        raise ValueError("every submission needs a unique, non-empty request_id (outcomes are keyed by it)")
    loop = asyncio.get_running_loop()
    t0, wall0 = loop.time(), time.time()
    gauge = _Gauge(limit=concurrency)
    outcomes: dict[str, Outcome] = {}
    hung: list[str] = []   # the watch's reason, once the route is found hung
    asking = asyncio.Lock()

    async def one(sub: Submission) -> None:
        req = sub.request
        start = loop.time() - t0
        in_flight = gauge.enter()
        completion, kind, message, failure = None, None, None, None
        try:
            timeout = req.timeout_s or request_timeout_s
            if sub.abort_after_s is not None and sub.abort_after_s < timeout:
                try:
                    async with asyncio.timeout(sub.abort_after_s):  # no task per request, unlike wait_for
                        completion = await route.generate(req)
                except TimeoutError:
                    kind, message = ABORTED, f"client disconnected after {sub.abort_after_s:.3f}s"
            else:
                try:
                    async with asyncio.timeout(timeout):
                        completion = await route.generate(req)
                except TimeoutError:
                    kind, message = "timeout", f"no answer within {timeout:.1f}s under load"
                    failure = RouteTimeout(message, request_id=req.request_id)
        except RouteError as exc:
            kind, message, failure = exc.kind, exc.describe(), exc
        except asyncio.CancelledError:
            kind, message = ((HUNG, f"in flight when the route was found hung: {hung[0]}") if hung else
                             (DEADLINE, f"still running when the run deadline ({deadline_s:.0f}s) passed"))
        except Exception as exc:  # a broken adapter is a finding about the route, not a crash of the run
            kind, message = "exception", f"{type(exc).__name__}: {exc}"
        finally:
            gauge.leave()
            outcomes[req.request_id] = Outcome(sub.key, req.request_id, completion, kind, message, start,
                                               loop.time() - t0, in_flight)
            progress.advance()
        asks = kind == "timeout" or (failure is not None and stops_a_route(failure))
        if failure is not None:
            failure.request = req   # the watch marks the route hung or dead at this request
        if asks and watch is not None and not hung:
            async with asking:   # one health probe at a time: the requests that failed together ask once
                why = "" if hung else await watch(failure)
            if why and not hung:
                hung.append(why)
                for task in slots:   # the other slots stop: their requests in flight become "route-hung"
                    if task is not asyncio.current_task():
                        task.cancel()

    ordered = sorted(submissions, key=lambda s: s.at_s)
    plan_iter = iter(ordered)
    deadline = t0 + deadline_s

    async def slot() -> None:
        """One of `concurrency` slots: takes the next planned request when free, sends it at its arrival time.
        Long-lived slots instead of a task per request: fewer loop turns, so the client never sets the pace."""
        for sub in plan_iter:  # shared: the slots take requests in arrival order
            delay = t0 + sub.at_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)  # the run deadline cancels this wait: the request stays unsent
            if loop.time() >= deadline or hung:
                return
            await one(sub)
            if asyncio.current_task().cancelling() or hung:  # one() recorded the cancelled request; send no more
                return

    slots = [asyncio.ensure_future(slot()) for _ in range(min(concurrency, len(ordered)))]
    if slots:
        _, pending = await asyncio.wait(slots, timeout=max(0.0, deadline - loop.time()))
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5.0)
        for task in slots:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # only ConcurrencyBreach gets here: one() catches route failures
    unsent = len(ordered) - len(outcomes)
    ordered_outcomes = tuple(outcomes[s.request.request_id] for s in ordered if s.request.request_id in outcomes)
    return LoadRun(outcomes=ordered_outcomes, concurrency=concurrency, max_in_flight=gauge.peak,
                   wall_s=loop.time() - t0, started_at=wall0, unsent=unsent, hung=hung[0] if hung else "")


# ---------------------------------------------------------------- arrival plans
def burst(n: int) -> list[float]:
    """Everything at t=0: the driver keeps exactly `concurrency` in flight (a closed loop)."""
    return [0.0] * n


def random_arrivals(n: int, *, rate_per_s: float, rng: random.Random) -> list[float]:
    """Poisson arrivals: batch sizes rise and fall as requests come and go."""
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_per_s)
        out.append(t)
    return out


def bursts(n: int, *, size: int, gap_s: float) -> list[float]:
    """Waves of `size` simultaneous arrivals, `gap_s` apart."""
    return [(i // max(size, 1)) * gap_s for i in range(n)]


def mixed_arrivals(n: int, *, rng: random.Random, rate_per_s: float, burst_drain_s: float = 0.0,
                   segment: int = 32) -> list[float]:
    """Alternating segments: a burst (saturates the bound), then Poisson arrivals starting after the burst's
    estimated drain time `burst_drain_s` (batches fill and empty as requests come and go)."""
    out: list[float] = []
    t = 0.0
    for start in range(0, n, segment):
        count = min(segment, n - start)
        if (start // segment) % 2 == 0:
            out += [t] * count
            t += burst_drain_s
        else:
            offsets = random_arrivals(count, rate_per_s=rate_per_s, rng=rng)
            out += [t + x for x in offsets]
            t += offsets[-1]
    return out


def plan(items: Iterable[tuple[str, Request]], *, offsets: Sequence[float], tag: str,
         abort_after_s: Sequence[float | None] | None = None) -> list[Submission]:
    """Zip (key, request) pairs with arrival offsets; request ids become `tag-<n>-<key>`, unique per run."""
    items = list(items)
    if len(offsets) != len(items):
        raise ValueError(f"{len(items)} requests but {len(offsets)} arrival offsets")
    aborts = list(abort_after_s) if abort_after_s is not None else [None] * len(items)
    return [Submission(key=key, request=replace(req, request_id=f"{tag}-{n}-{key}"), at_s=at, abort_after_s=ab)
            for n, ((key, req), at, ab) in enumerate(zip(items, offsets, aborts))]


def mixed_load(pairs: Sequence[tuple[str, Request]], *, level: int, rng: random.Random, mean_latency_s: float,
               tag: str) -> list[Submission]:
    """The stressors' standard load: bursts of 32 alternating with Poisson arrivals at a quarter of the
    serial capacity of `level` slots (about `level`/4 in flight: partial batches whose composition changes)."""
    latency = max(mean_latency_s, 1e-3)
    offsets = mixed_arrivals(len(pairs), rng=rng, rate_per_s=level / (4 * latency), segment=32,
                             burst_drain_s=32 / level * latency)
    return plan(pairs, offsets=offsets, tag=tag)


def round_robin(keys: Sequence[str], n: int, *, rng: random.Random) -> list[str]:
    """`n` keys cycling through shuffled passes, so one prompt is never in flight twice at modest concurrency."""
    out: list[str] = []
    for _ in range(n // max(len(keys), 1) + 1):
        order = list(keys)
        rng.shuffle(order)
        out += order
    return out[:n]


@dataclass(frozen=True)
class Budget:
    """How much load each stressor spends; every stressor states it in its report line.

    A batching engine (capability `concurrency`) is fast under load, so the mixing budget is
    sized for the motivating bug: at a 1% per-request mixing rate, 640 requests per level
    leave a 0.99^640 = 0.2% chance that no request is mixed at all, and with ~90% of mixes
    visible and attributed, P(detect) ~= 1 - exp(-6.4 * 0.9) > 0.99 (benchmarks/mixing_detection.py
    measures it). A route that serialises requests
    (the in-process hf route) cannot share engine steps between requests; it gets a small
    budget that still checks its request isolation within the suite's time limit.
    """

    levels: tuple[int, ...]
    mixing_requests: int
    pool: int
    needle_batches: int
    batch_cap: int
    identical_requests: int
    seeds: int
    abort_wave: int
    prefix_variants: int
    source: str
    pressure_requests: int = 0   # the KV-pressure stressor's requests (short prompts, long answers)

    def batch(self, level: int) -> int:
        return max(2, min(level, self.batch_cap))

    def describe(self) -> str:
        return (f"{self.mixing_requests} requests per concurrency level {list(self.levels)}, pool of {self.pool} "
                f"prompts ({self.source})")


BATCHED_DEFAULT = dict(mixing_requests=640, pool=96, needle_batches=6, batch_cap=64, identical_requests=64,
                       seeds=4, abort_wave=48, prefix_variants=12, pressure_requests=192)
SERIAL_DEFAULT = dict(mixing_requests=24, pool=12, needle_batches=3, batch_cap=4, identical_requests=8,
                      seeds=2, abort_wave=8, prefix_variants=4, pressure_requests=8)


def budget_for(*, batched: bool, levels: Sequence[int], stress_requests: int | None) -> Budget:
    """The default budget for this kind of route, or one scaled from --stress-requests.

    A route that serialises requests runs its default budget at the lowest configured level only:
    its concurrency is nominal (requests queue on one lock), so higher levels would repeat the same
    serial run. --stress-requests always runs every level.
    """
    loaded = tuple(sorted({c for c in levels if c > 1}))
    if stress_requests is None:
        if batched:
            return Budget(levels=loaded, source="default for a batching route", **BATCHED_DEFAULT)
        return Budget(levels=loaded[:1], **SERIAL_DEFAULT,
                      source="default for a route that serialises requests (capability concurrency=False): "
                             "lowest level only")
    n = stress_requests
    return Budget(levels=loaded, mixing_requests=n, pool=min(96, max(8, n // 5)), needle_batches=max(2, n // 80),
                  batch_cap=BATCHED_DEFAULT["batch_cap"] if batched else SERIAL_DEFAULT["batch_cap"],
                  identical_requests=max(8, n // 8), seeds=max(2, n // 120), abort_wave=max(8, n // 10),
                  prefix_variants=max(4, min(24, n // 40)), pressure_requests=max(32, n // 2),
                  source=f"--stress-requests {n}")


# ---------------------------------------------------------------- sync entry and failure reporting
DEADLINE_CAP_S = 1800.0


def deadline_for(n: int, *, mean_latency_s: float, request_timeout_s: float) -> float:
    """A run deadline that only a hung or collapsing route reaches: 4x the serial time plus one request timeout."""
    return min(DEADLINE_CAP_S, max(30.0, 4.0 * n * mean_latency_s + request_timeout_s))


def drive_handle(handle, submissions: Sequence[Submission], *, concurrency: int, mean_latency_s: float) -> LoadRun:
    """Run `drive` on a RouteHandle's loop (the route the suite configured), bounded by the handle's deadline and
    watched by its hang probe (a route found hung before raises RouteHung without sending anything). A route that
    died under this load ends the test: RouteDied names the request it died on (one finding), and a route another
    test found dead meanwhile makes this one "not run"."""
    deadline = deadline_for(len(submissions), mean_latency_s=mean_latency_s, request_timeout_s=handle.timeout_s)
    run = handle.run(drive(handle.route, submissions, concurrency=concurrency, request_timeout_s=handle.timeout_s,
                           deadline_s=deadline, watch=handle.watch), timeout_s=deadline + 10.0)
    if run.hung:
        handle.raise_if_dead({s.request.request_id: s.request for s in submissions},
                             {o.request_id: o.error or "" for o in run.outcomes})
    return run


def failure_details(run: LoadRun, *, limit: int = 20) -> dict:
    """The requests that failed (not planned hang-ups), each with its time, for a finding."""
    failed = run.failed
    return {
        "failed": len(failed), "sent": len(run.outcomes), "unsent": run.unsent, "concurrency": run.concurrency,
        "hung": run.hung,
        "run_started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(run.started_at)),
        "failures": [{"request_id": o.request_id, "key": o.key, "kind": o.error_kind, "error": (o.error or "")[:300],
                      "at_s": round(o.ended_s, 3),
                      "at": time.strftime("%H:%M:%S", time.localtime(run.started_at + o.ended_s))}
                     for o in failed[:limit]],
    }


def failure_title(run: LoadRun, *, what: str) -> str:
    first = min(run.failed, key=lambda o: o.ended_s)
    clock = time.strftime("%H:%M:%S", time.localtime(run.started_at + first.ended_s))
    return (f"{what}: {len(run.failed)} of {len(run.outcomes)} requests failed at concurrency {run.concurrency}; "
            f"first {first.request_id} at +{first.ended_s:.1f}s ({clock}): {first.error_kind}"
            + (f"; the route stopped answering ({run.hung}), {run.unsent} requests left unsent" if run.hung else ""))


def failure_finding(run: LoadRun, *, check: str, route: str, what: str, repro: dict | None = None) -> Finding:
    """Failed requests of a load run as one error finding: which failed first, when, and how (`repro`: the
    window of the first failure, stressors/windows.py)."""
    return Finding(check=check, severity="error", route=route, title=failure_title(run, what=what),
                   details={**failure_details(run), **({"repro": repro} if repro else {})})
