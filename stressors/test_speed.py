"""The speed gate: the baseline and the candidate stream the same fixed workload at each concurrency level.

Measured, not judged (stressors/speed.py): the test carries no check family, so it never changes a coverage row;
its `speed` measurement becomes the report's speed table and plots. One thing it does judge: greedy prompts that
accept far fewer drafts beside others than alone (stressors/acceptance_collapse.py) are a warning on the
candidate. Where answers state no drafting but the server counts it (vLLM), the same judgement is deferred to the
controller on the idle server (stressors/load_acceptance.py). The baseline's levels are measured once per worker and
reused for every candidate on that worker.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.prompts.prompt_set import run_prompts
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.stressors.acceptance_collapse import collapse_findings
from spec_route_suite.stressors.speed import (SPEED_PROMPTS, SPEED_TOKENS, measure_level, speed_levels, speedups,
                                             warm_up)


@pytest.fixture(scope="session")
def speed_baseline_rows() -> dict:
    """(baseline name, level, prompts) -> the baseline's row, measured once per worker."""
    return {}


def _slots(handle):
    try:
        return (handle.inventory().extra or {}).get("slots")
    except RouteError:
        return None


def test_speed_gate(baseline, candidate, fitted_prompts, suite_config, speed_baseline_rows, findings):
    records = pick_lean(run_prompts(suite_config), SPEED_PROMPTS)   # the run's prompts: the user's with --prompts
    prompts = [fitted_prompts.ids(r, max_tokens=SPEED_TOKENS) for r in records]
    levels = speed_levels(suite_config.concurrency_levels, [_slots(baseline), _slots(candidate)])
    rows: dict[str, list] = {"baseline": [], "candidate": []}
    warm_up(baseline, prompts)
    warm_up(candidate, prompts)
    for level in levels:
        key = (baseline.name, level, tuple(map(tuple, prompts)))
        if key not in speed_baseline_rows:
            speed_baseline_rows[key] = measure_level(baseline, prompts, level,
                                                     stream=baseline.capabilities.stream)
        rows["baseline"].append(speed_baseline_rows[key])
        rows["candidate"].append(measure_level(candidate, prompts, level, stream=candidate.capabilities.stream))
    findings.measure("speed", candidate=candidate.name, baseline=baseline.name, levels=levels,
                     prompts=len(prompts), max_tokens=SPEED_TOKENS, rows=rows,
                     speedup=speedups(rows["baseline"], rows["candidate"]))
    for finding in collapse_findings(rows["candidate"], route=candidate.name, alpha=suite_config.alpha):
        findings.add(finding)
    if not any(row.get("acceptance_by_prompt") for row in rows["candidate"]):
        _defer_to_the_idle_server(candidate, prompts, levels, findings)


def _defer_to_the_idle_server(candidate, prompts, levels, findings) -> None:
    """Answers that state no drafting: acceptance under load is judged from the server's counters by the controller
    once the server is idle (spec_route_suite/load_phases.py); a route with no counters either leaves it a gap."""
    try:
        snapshot = candidate.acceptance()
    except RouteError:
        snapshot = None
    if snapshot is not None and snapshot.scope == "server" and max(levels) > 1:
        findings.measure("load_acceptance_deferred", route=candidate.name, levels=[1, max(levels)],
                         prompts=[list(p) for p in prompts])
