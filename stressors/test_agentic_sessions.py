"""Agent sessions under load (check family "agentic"): concurrent sessions, a check conversation, burst then single.

One protocol per candidate (stressors/sessions.py), judged in three parts:
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

import time

import pytest

from spec_route_suite.equivalence import agentic
from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.prompts.agentic import check_plan, session_plans, single_plan
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.sessions import (SessionSettings, Transcript, as_load_run, history_before,
                                                 paired_turns, run_serially, run_session, run_together)

pytestmark = pytest.mark.check("agentic")   # a literal: tests/mutation.py finds a family's modules by it
SESSIONS = 6
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def agent_runs():
    """Per candidate: the protocol's transcripts (computed by the first part that needs them)."""
    return {}


def _protocol(runs, baseline, candidate, tokenizer, context_fit, suite_config):
    if candidate.name in runs:
        return runs[candidate.name]
    max_tokens = min(suite_config.max_new_tokens, MAX_TOKENS)
    settings = SessionSettings(tokenizer=tokenizer, max_tokens=max_tokens, timeout_s=candidate.timeout_s,
                               fits=lambda req: context_fit.fits(len(req.prompt_ids), max_tokens))
    plans, check, single = session_plans(SESSIONS), check_plan(), single_plan()

    async def on_baseline():
        serial = await run_serially(baseline.route, plans, settings, tag="agent-serial")
        for plan in (check, single):   # streamed, as the candidate's are
            serial[plan.key] = await run_session(baseline.route, plan, settings, tag="agent-serial", stream=True)
        return serial
    references = baseline.run(on_baseline(), timeout_s=baseline.timeout_s * (len(plans) + 2) * 6)
    witness = LoadWitness(candidate)

    async def on_candidate():
        first = await run_session(candidate.route, check, settings, tag="agent-check-first", stream=True)
        started = time.perf_counter()
        burst = await run_together(candidate.route, plans, settings, tag="agent-burst")
        after_burst = await run_session(candidate.route, single, settings, tag="agent-single", stream=True,
                                        questions=1)
        again = await run_session(candidate.route, check, settings, tag="agent-check-again", stream=True)
        alone = await run_serially(candidate.route, plans, settings, tag="agent-alone")   # last: after "again"
        return first, burst, started, after_burst, again, alone
    first, burst, started, after_burst, again, alone = candidate.run(
        on_candidate(), timeout_s=candidate.timeout_s * (2 * len(plans) + 4) * 6)
    witness.add(as_load_run(list(burst.values()), started=started, concurrency=len(plans)))
    runs[candidate.name] = dict(references=references, first=first, burst=burst, after_burst=after_burst, alone=alone,
                                again=again, witness=witness)
    return runs[candidate.name]


def _skip_without_chat(findings, part, tokenizer, baseline, candidate):
    reason = agentic.lacking(tokenizer, baseline, candidate)
    if reason:
        agentic.cover_lacking(findings, candidate.name, part=part, reason=reason)
        pytest.skip(reason)


def _candidate_transcripts(runs) -> list[Transcript]:
    """Everything the protocol sent to the candidate, in any order (turns carry their start times)."""
    return [runs["first"], *runs["burst"].values(), runs["after_burst"], runs["again"]]


def _judge_transcripts(reference: Transcript, actual: Transcript, *, label: str, evidence, ctx,
                       sent: list[Transcript], alone: Transcript | None = None) -> list[str]:
    """Turn-by-turn judgement while the conversations agree; a turn the candidate failed is a failure too.
    `sent`: every transcript of the candidate, whose turns before a failing one its repro resends first. `alone`:
    the candidate's own transcript of the same session served alone; a turn that differs from it (same conversation
    so far) differs under load, whatever else it shows (reports/findings.py UNDER_LOAD)."""
    own = {id(theirs): mine for mine, theirs in paired_turns(alone, actual)} if alone is not None else {}
    failures = []
    for ours, theirs in paired_turns(reference, actual):
        if ours.answer is None:
            break   # the reference itself failed here: nothing to compare with
        if theirs.answer is None:
            failures.append(f"{label} {actual.plan.key}: turn {theirs.request.request_id} failed: {theirs.error}")
            if theirs.route_error is not None:   # a failed turn is a route error finding naming its request
                ctx["findings"].add(Finding.from_route_error(theirs.route_error, check=agentic.CHECK,
                                                             phase="call", label=label))
            break
        evidence.add(ctx["baseline"].name, ours.answer)
        evidence.add(ctx["candidate"].name, theirs.answer)
        mine = own.get(id(theirs))
        loaded = mine is not None and mine.answer is not None and mine.answer.token_ids != theirs.answer.token_ids
        failure = agentic.judge(ours.answer, theirs.answer, req=theirs.request, label=label,
                                prompt_id=theirs.request.request_id, cause=UNDER_LOAD if loaded else None,
                                history=history_before(sent, theirs, limit=agentic.HISTORY), **ctx)
        if failure:
            failures.append(failure)
            break
    return failures


def _begin(part, agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration, findings):
    """(the protocol's runs, the judging context, fresh evidence) for one part; skipped when a route lacks chat."""
    _skip_without_chat(findings, part, tokenizer, baseline, candidate)
    runs = _protocol(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config)
    ctx = dict(baseline=baseline, candidate=candidate, tokenizer=tokenizer, suite_config=suite_config,
               calibration=calibration, eos_token_id=getattr(tokenizer, "eos_token_id", None), findings=findings)
    return runs, ctx, agentic.Evidence((baseline.name, candidate.name))


def _fail(failures, candidate, baseline):
    if failures:
        pytest.fail(f"candidate '{candidate.name}' vs baseline '{baseline.name}':\n  " + "\n  ".join(failures),
                    pytrace=False)


def test_sessions(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration, findings):
    runs, ctx, evidence = _begin("sessions", agent_runs, baseline, candidate, tokenizer, context_fit, suite_config,
                                 calibration, findings)
    failures = []
    for key, transcript in runs["burst"].items():
        failures += _judge_transcripts(runs["references"][key], transcript, label="concurrent session turn",
                                       evidence=evidence, ctx=ctx, sent=_candidate_transcripts(runs),
                                       alone=runs["alone"][key])
    loaded, why, ran = runs["witness"].verdict()
    blind = evidence.blind() or ("" if loaded else why)
    findings.cover(agentic.CHECK, candidate.name, verified=not blind, part="sessions",
                   ran={**evidence.ran(), "sessions": len(runs["burst"]), **ran},
                   could_detect=f"{agentic.COULD_DETECT}, in turns of sessions served together", reason=blind)
    _fail(failures, candidate, baseline)


def test_check_conversation(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration,
                            findings):
    runs, ctx, evidence = _begin("check_conversation", agent_runs, baseline, candidate, tokenizer, context_fit,
                                 suite_config, calibration, findings)
    sent = _candidate_transcripts(runs)
    failures = _judge_transcripts(runs["first"], runs["again"], label=f"check conversation after {SESSIONS} sessions "
                                  f"(vs its first answer)", evidence=agentic.Evidence(("first", "again")), ctx=ctx,
                                  sent=sent)
    failures += _judge_transcripts(runs["references"][check_plan().key], runs["again"],
                                   label=f"check conversation after {SESSIONS} sessions", evidence=evidence, ctx=ctx,
                                   sent=sent)
    evidence.cover(findings, candidate.name, part="check_conversation",
                   could_detect="a conversation that answers differently after agent sessions than before them or "
                                "than the baseline (state carried across sessions)")
    _fail(failures, candidate, baseline)


def test_single_after_burst(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration,
                            findings):
    runs, ctx, evidence = _begin("single_after_burst", agent_runs, baseline, candidate, tokenizer, context_fit,
                                 suite_config, calibration, findings)
    failures = _judge_transcripts(runs["references"][single_plan().key], runs["after_burst"],
                                  label=f"single request after a burst of {SESSIONS} sessions", evidence=evidence,
                                  ctx=ctx, sent=_candidate_transcripts(runs))
    evidence.cover(findings, candidate.name, part="single_after_burst",
                   could_detect="a request right after a burst of sessions answered unlike its serial reference")
    _fail(failures, candidate, baseline)

