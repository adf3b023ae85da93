"""The speed gate: the baseline and the candidate stream the same fixed workload at each concurrency level.

Measured, not judged (stressors/speed/gate.py): the test carries no check family, so it never changes a coverage row;
its `speed` measurement becomes the report's speed table and plots. One thing it does judge: greedy prompts that
accept far fewer drafts beside others than alone (stressors/speed/collapse.py) are a warning on the
candidate. Where answers state no drafting but the server counts it (vLLM), the same judgement is deferred to the
controller on the idle server (stressors/speed/counters.py). The baseline's levels are measured once per worker and
reused for every candidate on that worker.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.prompts.prompt_set import run_prompts
from spec_route_suite.stressors.speed.collapse import collapse_findings
from spec_route_suite.stressors.speed.gate import (SPEED_PROMPTS, SPEED_TOKENS, defer_to_the_idle_server, measure_level,
                                                   route_slots, speed_levels, speedups, warm_up)


@pytest.fixture(scope="session")
def speed_baseline_rows() -> dict:
    """(baseline name, level, prompts) -> the baseline's row, measured once per worker."""
    return {}


def test_speed_gate(baseline, candidate, fitted_prompts, suite_config, speed_baseline_rows, findings):
    records = pick_lean(run_prompts(suite_config), SPEED_PROMPTS)   # the run's prompts: the user's with --prompts
    prompts = [fitted_prompts.ids(r, max_tokens=SPEED_TOKENS) for r in records]
    levels = speed_levels(suite_config.concurrency_levels, [route_slots(baseline), route_slots(candidate)])
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
        defer_to_the_idle_server(candidate, prompts, levels, findings)
