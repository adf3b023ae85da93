"""The agentic stressor's protocol, run once per candidate, and the turn-by-turn judgement its three parts share.

Why here and not in stressors/test_agentic_sessions.py: the test module lists the parts (sessions, check
conversation, single after burst); what they send and how a transcript is judged against its reference is one
concept, driven by self-tests too (tests/test_agentic_dead_route.py, tests/test_issue_filing.py).
Environment: none.
"""
from __future__ import annotations

import time

import pytest

from spec_route_suite.equivalence import agentic
from spec_route_suite.prompts.agentic import check_plan, session_plans, single_plan
from spec_route_suite.reports.findings import UNDER_LOAD, Finding
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.agentic.sessions import (SessionSettings, Transcript, as_load_run, history_before,
                                                         paired_turns, run_serially, run_session, run_together)

SESSIONS = 6
MAX_TOKENS = 64


def protocol(runs, baseline, candidate, tokenizer, context_fit, suite_config) -> dict:
    """The protocol's transcripts for `candidate`, run on first use and kept in `runs` for the other parts: the
    baseline's serial references, then on the candidate the check conversation, the burst of sessions, the single
    request after it, the check conversation again, and each session alone (last)."""
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


def skip_without_chat(findings, part, tokenizer, baseline, candidate) -> None:
    """A route that cannot carry agent sessions (no chat, tools or reasoning) leaves `part` not verified, skipped."""
    reason = agentic.lacking(tokenizer, baseline, candidate)
    if reason:
        agentic.cover_lacking(findings, candidate.name, part=part, reason=reason)
        pytest.skip(reason)


def candidate_transcripts(runs) -> list[Transcript]:
    """Everything the protocol sent to the candidate, in any order (turns carry their start times)."""
    return [runs["first"], *runs["burst"].values(), runs["after_burst"], runs["again"]]


def judge_transcripts(reference: Transcript, actual: Transcript, *, label: str, evidence, ctx,
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


def begin(part, agent_runs, baseline, candidate, tokenizer, context_fit, suite_config, calibration, findings):
    """(the protocol's runs, the judging context, fresh evidence) for one part; skipped when a route lacks chat."""
    skip_without_chat(findings, part, tokenizer, baseline, candidate)
    runs = protocol(agent_runs, baseline, candidate, tokenizer, context_fit, suite_config)
    ctx = dict(baseline=baseline, candidate=candidate, tokenizer=tokenizer, suite_config=suite_config,
               calibration=calibration, eos_token_id=getattr(tokenizer, "eos_token_id", None), findings=findings)
    return runs, ctx, agentic.Evidence((baseline.name, candidate.name))


def fail_on(failures, candidate, baseline) -> None:
    """The part fails, naming both routes, when any transcript failed its judgement."""
    if failures:
        pytest.fail(f"candidate '{candidate.name}' vs baseline '{baseline.name}':\n  " + "\n  ".join(failures),
                    pytrace=False)
