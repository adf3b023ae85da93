"""The motivating report's protocol, by name: the same 100 chat requests serially, at concurrency 8, and on the AR
baseline under the same load; each wrong answer attributed to the request whose context it answered
(stressors/accuracy/reported_protocol.py)."""
from __future__ import annotations

import pytest

from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.control import LoadControl
from spec_route_suite.stressors.canary import fitting_chats, serial_references
from spec_route_suite.stressors.accuracy.reported_protocol import ReportedProtocol, protocol_workload

pytestmark = pytest.mark.check("accuracy")


def test_reported_protocol_100_chats_at_concurrency_8(candidate, baseline, tokenizer, stress_chat, sized_workload,
                                                      context_fit, stress_max_tokens, suite_config, report_note,
                                                      findings):
    if not candidate.capabilities.concurrency:
        pytest.skip(f"not verified: route '{candidate.name}' serialises requests (no two share an engine step)")
    if not stress_chat:
        pytest.skip("not verified: the protocol sends chat requests and a route here serves none")
    workload, left_out = fitting_chats(protocol_workload(sized_workload, seed=suite_config.seed),
                                       (baseline, candidate), context_fit, stress_max_tokens)
    if left_out:
        report_note(f"reported protocol: {len(left_out)} of 100 conversations left out for '{candidate.name}': the "
                    f"servers render them too long for the context (e.g. {next(iter(left_out.values()))})")
    control = LoadControl(baseline, serial_references(baseline.generate, workload, max_tokens=stress_max_tokens)
                          if baseline.capabilities.concurrency else None, alpha=suite_config.alpha)
    protocol = ReportedProtocol(LoadPair(candidate, baseline, tokenizer, policy=None, max_tokens=stress_max_tokens),
                                workload, serial_references(candidate.generate, workload, max_tokens=stress_max_tokens),
                                control)
    protocol.run(findings, seed=suite_config.seed)
    comparison = protocol.comparison((8,))
    text, details = protocol.summary_line(findings, comparison)
    failure = protocol.judge(findings, comparison, text, details)
    if failure:
        pytest.fail(failure, pytrace=False)
