"""The suite's public face for plugin authors: what an engine flavour, a wire kind or a check imports.

Why one module: a plugin (`spec-route-suite -p my_engine`) should not depend on where the suite keeps things
inside; these names are kept stable, the rest may move (docs/architecture.md has the recipes that use them).
Environment: none.
"""
from __future__ import annotations

from spec_route_suite.reports.findings import Finding
from spec_route_suite.routes.base import (AcceptanceSnapshot, Capabilities, Completion, Request, Route, RouteInventory,
                                          RouteWrapper, TokenLogprobs)
from spec_route_suite.routes.errors import CapabilityMissing, FeatureUnsupported, RouteError
from spec_route_suite.routes.flavours import Flavour, Probes, Refusal, ResponseEvidence, ServerFacts, flavour
from spec_route_suite.routes.kinds import wire_kind
from spec_route_suite.routes.spec import RouteSpec

__all__ = ["AcceptanceSnapshot", "Capabilities", "CapabilityMissing", "Completion", "FeatureUnsupported", "Finding",
           "Flavour", "Probes", "Refusal", "Request", "ResponseEvidence", "Route", "RouteError", "RouteInventory",
           "RouteSpec", "RouteWrapper", "ServerFacts", "TokenLogprobs", "flavour", "wire_kind"]
