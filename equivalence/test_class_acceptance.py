"""Acceptance by prompt class (check family "class-acceptance"): the profile of each (source, category).

One test per candidate runs a short greedy phase per class of the run's prompts (equivalence/class_acceptance.py)
and records the class's acceptance length and acceptance by position (`class_acceptance` measurement; the
report's per-class table, reports/by_class.py). A route whose only evidence is a server's cumulative /metrics
counters (vLLM) is measured after every test, by the controller, on the idle server: this test then records
the deferral, and the controller the profile and its coverage row (spec_route_suite/class_phases.py).
A class where speculation does nothing while others accept is named in the verdict line as a gap: the
checks on that class exercised the target alone.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.class_acceptance import class_profile, class_requests, record_profile
from spec_route_suite.equivalence.depth import draft_depth
from spec_route_suite.prompts.prompt_set import run_prompts

pytestmark = pytest.mark.check("class-acceptance")


def test_acceptance_by_prompt_class(candidate, suite_config, fitted_prompts, findings):
    groups = class_requests(run_prompts(suite_config), fitted_prompts)
    depth = draft_depth(candidate.inventory(), candidate.spec).k
    profile, deferred = class_profile(candidate, groups, depth=depth, defer_server=True)
    if deferred:
        findings.measure("class_acceptance_deferred", route=candidate.name)
        return
    record_profile(findings, candidate.name, profile, measured_by="in the test, on the worker")

