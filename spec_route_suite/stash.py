"""Where a run's parsed configuration and its collector sit on the pytest config (pytest's stash).

The plugin fills both in pytest_configure; the route fixtures and the check folders' conftest files
read them. A module of its own so that neither side imports the other. Environment: none.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spec_route_suite.config import SuiteConfig

if TYPE_CHECKING:
    from spec_route_suite.reports.collector import RunCollector

CONFIG_KEY = pytest.StashKey[SuiteConfig]()
COLLECTOR_KEY = pytest.StashKey["RunCollector"]()
ROUTE_SESSION_KEY = pytest.StashKey[object]()   # this process's RouteSession, once a test built it (a route error's
# finding resends its request through it, also when the test failed in its set-up)
