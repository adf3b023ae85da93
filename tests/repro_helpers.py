"""Repro scripts for self-tests that need one without a whole route-suite run.

A repro block is worded from route handles (reports/repro_spec.py); here a handle is either a RouteHandle around
a real adapter (its own wire format, no event loop needed to word a request) or, for an in-process route, what
the in-process server receives. `script_for` renders one finding's block as the run folder would.
Environment: none.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

from spec_route_suite.routes.base import Capabilities
from spec_route_suite.session import RouteHandle, served_wire
from spec_route_suite.reports.clusters import cluster_findings
from spec_route_suite.reports.repro import render_cluster


def served(name: str, capabilities: Capabilities = Capabilities()) -> SimpleNamespace:
    """An in-process route's handle as a repro block needs it: its name, capabilities and the request as the
    in-process server receives it."""
    return SimpleNamespace(name=name, capabilities=capabilities, repro_wire=served_wire)


def adapter_handle(route: Any, spec: Any) -> RouteHandle:
    """A handle over a real adapter that is never asked to send: it words requests in the adapter's format."""
    return RouteHandle(route, spec, loop=None, timeout_s=1.0)


def script_for(block: dict[str, Any], *, specs: Sequence[dict[str, Any]], route: str, check: str = "mixing",
               title: str = "planted") -> tuple[str, str, dict[str, Any]]:
    """(script, curl lines, DATA) of a one-finding cluster against `route`; specs[0] is the baseline's public
    spec, the rest the candidates'."""
    finding = {"check": check, "severity": "bug", "title": title, "route": route, "test_id": "t::t",
               "details": {"repro": block}}
    report = {"run_id": "self-test", "findings": [finding], "tests": [],
              "config": {"baseline": specs[0], "candidates": list(specs[1:])}}
    rendered = render_cluster(report, cluster_findings(report["findings"])[0], f"repro/001-x-{check}")
    assert rendered is not None
    return rendered
