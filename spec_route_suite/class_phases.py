"""The controller's class-pure acceptance phases, for routes whose only evidence is a server's cumulative counters.

Why here: a vLLM server's /metrics counters count every request it serves. While xdist workers send the run's
traffic, a phase's counter difference is anybody's; once every test has finished, the server is idle and the
difference is the phase's own. So the class-acceptance test defers such a route (a `class_acceptance_deferred`
measurement) and the controller, at session finish and before it stops the servers it started, runs the same
phases (equivalence/class_acceptance.py) and records the profile and the coverage row for the deferring test.
A route that cannot be reached then leaves the row "not verified" with the reason. The phases' requests are
part of the run's traffic (the run's server acceptance profile includes them). Environment: none.
"""
from __future__ import annotations

from typing import Any, Callable

from spec_route_suite.config import SuiteConfig
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.reports.coverage import CoverageRecord

CHECK = "class-acceptance"
MEASURED_BY = "by the controller after the tests, on the idle server (class-pure phases, counter differences)"


def run_deferred_phases(suite: SuiteConfig, collector, log: Callable[[str], None]) -> None:
    """Measure every deferred route's classes and add the results to the collector's measurements."""
    deferred = {m["route"]: m.get("test_id", "") for m in collector.measurements.get("class_acceptance_deferred", [])}
    if not deferred:
        return
    from spec_route_suite.equivalence.class_acceptance import class_profile, class_requests, coverage
    from spec_route_suite.equivalence.depth import draft_depth
    from spec_route_suite.session_graph import SessionGraph
    specs = [s for s in suite.routes.candidates if s.name in deferred]
    graph = SessionGraph(suite, specs=specs)
    try:
        for spec in specs:
            test_id = deferred[spec.name]
            log(f"spec-suite: acceptance by prompt class on '{spec.name}': class-pure phases on the idle server")
            try:
                handle = graph.session.handle(spec.name)
                inventory = graph.inventory(spec.name)
                # the run's prompts sized into this route's context, tokenized as the run's baseline tokenizes them
                fitted = graph.fitted_prompts(graph.context_fit(handle))
                groups = class_requests(graph.run_prompts(), fitted)
                profile, _ = class_profile(handle, groups, depth=draft_depth(inventory, spec).k, defer_server=False)
            except (RouteError, OSError) as exc:
                _add(collector, "coverage", test_id, CoverageRecord(
                    check=CHECK, route=spec.name, verified=False,
                    reason=f"the controller's class phases failed: {exc}"[:400]).as_measurement())
                continue
            _add(collector, "class_acceptance", test_id, {"route": spec.name, "measured_by": MEASURED_BY,
                                                          "classes": [c.as_dict() for c in profile]})
            _add(collector, "coverage", test_id, CoverageRecord(check=CHECK, route=spec.name,
                                                                **coverage(profile)).as_measurement())
    finally:
        graph.close()


def _add(collector, kind: str, test_id: str, data: dict[str, Any]) -> None:
    collector.measurements.setdefault(kind, []).append({"test_id": test_id, **data})
