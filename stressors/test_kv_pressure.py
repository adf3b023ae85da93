"""KV pressure (stressors/kv_pressure/pressure.py): outputs of preempted requests equal their serial references.

A burst of short-prompt, long-output greedy requests (ignore_eos) at the run's highest concurrency level,
sized to offer more KV tokens than the engine's pool holds. Every answer must equal the same request served
alone (strict, or near-ties excused under --greedy-policy classify), the engine must stay healthy, and its
own preemption counter says whether anything was preempted: "verified" only when it rose. The same burst
runs on the baseline when it batches (stressors/control.py): what it loses under the same load too is
engine behaviour, and only the candidate's excess is charged.
"""
from __future__ import annotations

import pytest

from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.stressors.kv_pressure.burst import CHECK, COULD, SERIAL, KvBurst, pressure_plan, short_prompts
from spec_route_suite.stressors.pair import LoadPair

pytestmark = pytest.mark.check("kv-pressure")


def test_outputs_survive_kv_pressure(candidate, baseline, tokenizer, fitted_prompts, context_fit, stress_budget,
                                     suite_config, near_tie_policy, findings):
    if not candidate.capabilities.concurrency:
        findings.cover(CHECK, candidate.name, verified=False, could_detect=COULD, reason=SERIAL)
        pytest.skip(f"not verified: '{candidate.name}' serialises requests: no KV pressure")
    prompts = short_prompts(prompt_pool(suite_config), fitted_prompts)
    pressure = pressure_plan(candidate, prompts, context_fit, stress_budget)
    if pressure.why_not:
        findings.cover(CHECK, candidate.name, verified=False, could_detect=COULD, reason=pressure.why_not)
        pytest.skip(f"not verified: {pressure.why_not}")
    kv = KvBurst(LoadPair(candidate, baseline, tokenizer, near_tie_policy, pressure.max_tokens), pressure, prompts,
                 seed=suite_config.seed, alpha=suite_config.alpha)
    kv.send()
    comparison = kv.comparison()
    kv.cover(findings, comparison)
    problems = kv.problems(findings, comparison)
    if problems:
        pytest.fail(f"candidate '{candidate.name}' under KV pressure: " + " | ".join(problems[:3]), pytrace=False)
