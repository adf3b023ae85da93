"""Did a stressor really stress? The concurrency a load run reached at the engine, for the coverage table.

Cross-request bugs need requests that share engine steps. A client can keep 32 requests open
against a route that serves one at a time (the in-process transformers route holds a lock, a gateway
may serialise, a llama.cpp server may have one slot), so the driver's own in-flight count proves
nothing. The witnesses:
- the engine's own gauge: the most requests it served together (an optional route method
  `engine_batch_peak(reset)`: the reference engine's and the hf route's step counts, a llama.cpp
  server's busy slots, vLLM's num_requests_running, sampled during the load);
- whether the route batches at all (capability `concurrency`) and how many requests its server says
  it runs at once (its slots);
- the measured overlap of request lifetimes in the load driver (requests really open together).
A stressor is "verified" only when the route batches, has more than one slot, two or more requests
were in flight together, and the engine's own gauge saw two or more together. Without a gauge the
client-side overlap is all there is: "not proven".
Environment: none.
"""
from __future__ import annotations

from typing import Iterable

from spec_route_suite.routes.errors import RouteError
from spec_route_suite.stressors.driver import LoadRun


def lifetime_overlap(runs: Iterable[LoadRun]) -> int:
    """The most requests whose lifetimes (send to answer) overlapped at one instant, over all runs."""
    peak = 0
    for run in runs:
        events = sorted([(o.started_s, 1) for o in run.outcomes] + [(o.ended_s, -1) for o in run.outcomes],
                        key=lambda e: (e[0], e[1]))
        now = 0
        for _, step in events:
            now += step
            peak = max(peak, now)
    return peak


class LoadWitness:
    """Collects a stressor's load runs and the engine's batch gauge; states what the stressor could detect."""

    def __init__(self, handle):
        self.handle = handle
        self.runs: list[LoadRun] = []
        handle.run(handle.route.engine_batch_peak(reset=True))   # None: the engine states no such gauge

    def add(self, run: LoadRun) -> LoadRun:
        self.runs.append(run)
        return run

    def engine_peak(self) -> int | None:
        try:
            return self.handle.run(self.handle.route.engine_batch_peak())
        except RouteError:   # a route that stopped answering states no gauge (its failure is the stressor's finding)
            return None

    def verdict(self) -> tuple[bool, str, dict]:
        """(verified, reason when not, what ran)."""
        batches = bool(self.handle.capabilities.concurrency)
        overlap = lifetime_overlap(self.runs)
        peak = self.engine_peak()
        slots = self._slots()
        ran = {"load runs": len(self.runs), "requests": sum(len(r.outcomes) for r in self.runs)}
        seen = (f"max {overlap} requests open together at the client"
                + (f", max {peak} together by the engine's own gauge" if peak is not None else
                   ", engine exposes no gauge of requests served together"))
        if not batches:
            return False, (f"the route serialises requests (capability concurrency=False): no two requests ever "
                           f"share an engine step ({seen})"), ran
        if slots == 1:
            return False, f"serialises: the server states it runs one request at a time (1 slot; {seen})", ran
        if overlap < 2:
            return False, f"overlap never reached: {seen}", ran
        if peak is None:
            return False, (f"not proven: {seen}; requests open together at the client may still be served one at "
                           f"a time"), ran
        if peak < 2:
            # a sampled gauge (a server's slots or running count, read during the load) can miss a load shorter
            # than its reading interval: say what the gauge saw, not what the engine did
            return False, f"the engine's own gauge never saw two requests served together: {seen}", ran
        return True, seen, ran

    def _slots(self) -> int | None:
        """How many requests the route's server says it runs at once (llama.cpp -np), None when it does not say."""
        try:
            slots = (self.handle.inventory().extra or {}).get("slots")
        except Exception:  # noqa: BLE001 - an inventory that fails says nothing about slots
            return None
        return slots if isinstance(slots, int) and not isinstance(slots, bool) else None

    def cover(self, findings, check: str, *, could_detect: str, counts: dict | None = None, part: str = "",
              weakly: str = "") -> bool:
        """Record the coverage row (of `part`, when the check has several); `counts` adds the stressor's own
        tallies to what ran; `weakly`: why a load that did stress could still show little (then not verified)."""
        verified, why, ran = self.verdict()
        if verified and weakly:
            verified, why = False, weakly
        findings.cover(check, self.handle.name, verified=verified, ran={**ran, **(counts or {})},
                       could_detect=f"{could_detect} ({why})" if verified else could_detect,
                       reason="" if verified else why, part=part)
        return verified
