"""Batch-size ramp: the same canary workload at odd batch sizes up to the route's slots and back down.

Why: engines take other code paths at other batch sizes: CUDA graphs captured for 1, 2, 4, 8... pad a batch of
7 with a padding row (vllm#43682), a dynamic draft length switches past a batch threshold (vllm#47014, on
vLLM's CPU backend). The existing stressors run at a few fixed levels; here the batch steps through 1, 3, 7,
15, 31 ... (one less than a power of two: the most padding) up to the slots the route states (capped at the
run's highest --concurrency) and back down, one burst of exactly that many requests per step. Every output
must equal its serial reference (strict, or near-ties excused under --greedy-policy classify), and the engine
must answer its health check after every step. The same bursts run on the baseline when it batches
(stressors/control.py): only the candidate's excess over the baseline's mismatches is charged.
"""
from __future__ import annotations

import pytest

from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.ramp import CHECK, COULD, SERIAL, BatchRamp

pytestmark = pytest.mark.check("batch-ramp")


def test_outputs_equal_serial_through_a_batch_size_ramp(candidate, baseline, tokenizer, stress_budget, stress_workload,
                                                        stress_references, stress_max_tokens, suite_config,
                                                        near_tie_policy, stress_control, findings):
    if not candidate.capabilities.concurrency:
        findings.cover(CHECK, candidate.name, verified=False, could_detect=COULD, reason=SERIAL)
        pytest.skip(f"not verified: '{candidate.name}' serialises requests: no batch sizes to ramp through")
    ramp = BatchRamp(LoadPair(candidate, baseline, tokenizer, near_tie_policy, stress_max_tokens), stress_workload,
                     stress_references, stress_control)
    ramp.plan_sizes(stress_budget)
    ramp.run(findings, seed=suite_config.seed)
    ramp.record(findings)
    if ramp.problems:
        pytest.fail(f"candidate '{candidate.name}' through the batch-size ramp: " + " | ".join(ramp.problems[:3]),
                    pytrace=False)
