"""Agent sessions under load (check family "agentic"): concurrent sessions, a check conversation, burst then single.

One protocol per candidate (stressors/agentic/sessions.py), judged in three parts:
- sessions: SESSIONS multi-turn agent sessions (question, tool call, tool result, answer; two questions
  each) run all at once on the candidate; every turn must equal the baseline's turn of the same session
  run serially, while their conversations agree (equivalence/agentic.py judges each pair); a turn that also
  differs from the candidate's own session served alone (run last) differs under load, one cause with the other
  stressors' (reports/findings.py UNDER_LOAD);
- check conversation: a fixed conversation sent to the candidate before the sessions and again after them
  must answer as it did first (state carried from session to session: "worse over sessions until a
  restart"), and as the baseline does;
- single after burst: one request sent right after the burst must equal its serial reference (a single
  request after an 8-way burst answered the previous prompt).
The check conversation and the single request stream (as agent clients do), the sessions alternate. The
sessions part is verified only where the candidate's engine really served turns together (the
stressors' witness, coverage.py) and answers carried parsed tool calls and reasoning.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence import agentic
from spec_route_suite.prompts.agentic import check_plan, single_plan
from spec_route_suite.stressors.agentic.protocol import (SESSIONS, begin, candidate_transcripts, fail_on,
                                                         judge_transcripts)

pytestmark = pytest.mark.check("agentic")   # a literal: tests/mutation.py finds a family's modules by it


@pytest.fixture(scope="module")
def agent_runs():
    """Per candidate: the protocol's transcripts (computed by the first part that needs them)."""
    return {}


def test_sessions(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration, findings):
    runs, ctx, evidence = begin("sessions", agent_runs, baseline, candidate, tokenizer, context_fit, suite_config,
                                calibration, findings)
    failures = []
    for key, transcript in runs["burst"].items():
        failures += judge_transcripts(runs["references"][key], transcript, label="concurrent session turn",
                                      evidence=evidence, ctx=ctx, sent=candidate_transcripts(runs),
                                      alone=runs["alone"][key])
    loaded, why, ran = runs["witness"].verdict()
    blind = evidence.blind() or ("" if loaded else why)
    findings.cover(agentic.CHECK, candidate.name, verified=not blind, part="sessions",
                   ran={**evidence.ran(), "sessions": len(runs["burst"]), **ran},
                   could_detect=f"{agentic.COULD_DETECT}, in turns of sessions served together", reason=blind)
    fail_on(failures, candidate, baseline)


def test_check_conversation(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration,
                            findings):
    runs, ctx, evidence = begin("check_conversation", agent_runs, baseline, candidate, tokenizer, context_fit,
                                suite_config, calibration, findings)
    sent = candidate_transcripts(runs)
    failures = judge_transcripts(runs["first"], runs["again"], label=f"check conversation after {SESSIONS} sessions "
                                 f"(vs its first answer)", evidence=agentic.Evidence(("first", "again")), ctx=ctx,
                                 sent=sent)
    failures += judge_transcripts(runs["references"][check_plan().key], runs["again"],
                                  label=f"check conversation after {SESSIONS} sessions", evidence=evidence, ctx=ctx,
                                  sent=sent)
    evidence.cover(findings, candidate.name, part="check_conversation",
                   could_detect="a conversation that answers differently after agent sessions than before them or "
                                "than the baseline (state carried across sessions)")
    fail_on(failures, candidate, baseline)


def test_single_after_burst(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration,
                            findings):
    runs, ctx, evidence = begin("single_after_burst", agent_runs, baseline, candidate, tokenizer, context_fit,
                                suite_config, calibration, findings)
    failures = judge_transcripts(runs["references"][single_plan().key], runs["after_burst"],
                                 label=f"single request after a burst of {SESSIONS} sessions", evidence=evidence,
                                 ctx=ctx, sent=candidate_transcripts(runs))
    evidence.cover(findings, candidate.name, part="single_after_burst",
                   could_detect="a request right after a burst of sessions answered unlike its serial reference")
    fail_on(failures, candidate, baseline)

