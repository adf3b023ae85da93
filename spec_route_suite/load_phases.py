"""The controller's acceptance-under-load phases, for routes whose only evidence is a server's cumulative counters.

Why here: like the class phases (class_phases.py), a vLLM server's counters count every request it serves, so the
speed gate defers such a route (a `load_acceptance_deferred` measurement) and the controller, at session finish and
before it stops the servers it started, runs stressors/speed/counters.py on the idle server: a `load_acceptance`
measurement per route, and the collapse warning when a loaded round's acceptance fell COLLAPSE_DROP below every
one-at-a-time round. A route that cannot be reached then, or whose counters never moved at a level, is measured as
not judged, with the reason (a named gap, never acceptance that held). Environment: none.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from spec_route_suite.config import SuiteConfig
from spec_route_suite.routes.errors import RouteError


def run_load_phases(suite: SuiteConfig, collector, log: Callable[[str], None]) -> None:
    deferred = {m["route"]: m for m in collector.measurements.get("load_acceptance_deferred", [])}
    if not deferred:
        return
    from spec_route_suite.session_graph import SessionGraph
    from spec_route_suite.stressors.speed.counters import (collapse_finding, collapsed_levels, measure, prompts_digest,
                                                           unjudged)
    specs = [s for s in suite.routes.candidates if s.name in deferred]
    graph = SessionGraph(suite, specs=specs)
    try:
        for spec in specs:
            asked = deferred[spec.name]
            log(f"spec-suite: acceptance under load on '{spec.name}': levels {asked['levels']} on the idle server")
            try:
                rounds = measure(graph.session.handle(spec.name), asked["prompts"], asked["levels"])
            except (RouteError, OSError) as exc:
                collector.measurements.setdefault("load_acceptance", []).append(
                    {"route": spec.name, "test_id": asked.get("test_id", ""), "judged": False,
                     "why": f"the controller's load phases failed: {exc}"[:400]})
                continue
            why_not = unjudged(rounds)
            collector.measurements.setdefault("load_acceptance", []).append(
                {"route": spec.name, "test_id": asked.get("test_id", ""), "judged": not why_not,
                 **({"why": why_not} if why_not else {}), "prompts": len(asked["prompts"]),
                 "prompts_digest": prompts_digest(asked["prompts"]),
                 "rounds": [r.__dict__ for r in rounds], "collapsed": collapsed_levels(rounds)})
            finding = collapse_finding(rounds, route=spec.name)
            if finding is not None:
                collector.add_controller_finding(replace(finding, test_id=asked.get("test_id", ""),
                                                         uid=f"controller-load-{spec.name}"))
    finally:
        graph.close()
