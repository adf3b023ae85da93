"""Cross-request mixing: under concurrent load every canary conversation must get its own serial answer.

The motivating failure: a speculative route at concurrency 8 answered the last user message
in another request's context (7 wrong of 100), serially never. Each load run cycles the
canary pool through mixed arrivals (closed-loop bursts and Poisson segments) at every
configured concurrency level above 1; each output is compared with its serial greedy
reference, and each mismatch is attributed (foreign canary, or closer to another
request's reference, or the victim's question answered in another conversation). A
contamination fails the route with the matrix source -> victim, the requests checked,
and a replayable schedule shrunk as far as the budget allows. A mismatch with no source
is teacher-forced through the baseline: a numerical near-tie is reported (batch
variance), anything else fails the route as corrupted batch state (a KV slot mix-up
leaves garbled output that names no source). A mismatch is not attributed at all when its
serial reference neither equals the AR baseline's output nor reproduces on a second serial
run: on a server shared with other traffic the "serial" reference was itself made in a mixed
batch, and comparing with it says nothing about who leaked into whom. A server without token
ids is judged on its text (spec_route_suite/routes/textlevel.py); the findings say so. When both routes declare
chat, half of the canary conversations are chat items (stressors/conftest.py): multi-turn sessions sharing
the long prefix, sent as messages so an HTTP server's chat template builds them, and attributed alike.
The same load runs on the baseline (stressors/control.py), attributed against its own serial references: a
contamination or an unattributed mismatch rate it shows too is an engine note, and the candidate is charged
only with its excess (a foreign canary stays a foreign canary; it is the rate that is compared).
"""
from __future__ import annotations

import pytest

from spec_route_suite.stressors.mixing.load import MixingLoad
from spec_route_suite.stressors.mixing.verdict import MixingVerdict
from spec_route_suite.stressors.pair import LoadPair

pytestmark = pytest.mark.check("mixing")


def test_no_cross_request_mixing(candidate, baseline, tokenizer, stress_budget, stress_workload, stress_references,
                                 stress_max_tokens, suite_config, near_tie_policy, stress_control, findings):
    load = MixingLoad(LoadPair(candidate, baseline, tokenizer, near_tie_policy, stress_max_tokens), stress_workload,
                      stress_references, stress_control)
    load.send(stress_budget, findings, seed=suite_config.seed)
    load.cover(findings)
    stopped = load.early_stops(findings)
    total, distrusted = load.trusted_mismatches(findings)
    verdict = MixingVerdict(load, total)
    verdict.compare(findings)
    verdict.summarise(findings, stress_budget)
    verdict.classify_unattributed(findings)
    if verdict.contaminated:
        pytest.fail(f"candidate '{candidate.name}' mixed requests under load: {verdict.report_contamination(findings)}",
                    pytrace=False)
    if stopped:
        pytest.fail(f"candidate '{candidate.name}': {len(stopped)} answers under load stopped early:\n"
                    + "\n".join(stopped[:5]), pytrace=False)
    if distrusted:
        pytest.fail(f"candidate '{candidate.name}': {len(distrusted)} serial references differ from the AR "
                    f"baseline and do not reproduce: {', '.join(sorted(distrusted)[:5])}", pytrace=False)
    if verdict.bugs:
        pytest.fail(f"candidate '{candidate.name}': {len(verdict.bugs)} outputs under load differ from their serial "
                    f"reference beyond a near-tie:\n" + "\n".join(verdict.bugs[:5]), pytrace=False)
