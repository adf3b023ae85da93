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

import random

import pytest

from spec_route_suite.routes.textlevel import is_text_level, level_details, title_suffix
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import load_repro, parity_repro
from spec_route_suite.stressors.canary import mean_latency, renderer
from spec_route_suite.stressors.control import NO_LOAD_CONTROL, Count, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import drive_handle, failure_finding, mixed_load, round_robin
from spec_route_suite.stressors.mixing import detect, merge, probe_contexts, untrusted_references
from spec_route_suite.stressors.replay import replay_script
from spec_route_suite.stressors.windows import LoadRuns
from spec_route_suite.stressors.schedules import Schedule, shrink, window_schedule
from spec_route_suite.stressors.suspicious import early_stops

pytestmark = pytest.mark.check("mixing")
SHRINK_SECONDS = 45.0
SHRINK_EVALUATIONS = 24
SHRINK_REPEATS = 3   # replays per shrink step
FIRST_REPEATS = 12   # replays of the whole window before giving up on reproducing a rare failure
MAX_CLASSIFIED = 40  # unattributed mismatches teacher-forced through the baseline (near-tie or bug)


def outcome_of(runs, request_id: str):
    return next(r.by_id()[request_id].completion for r in runs if request_id in r.by_id())


def test_no_cross_request_mixing(candidate, baseline, tokenizer, stress_budget, stress_workload, stress_references,
                                 stress_max_tokens, suite_config, near_tie_policy, stress_control, findings):
    budget, workload, refs = stress_budget, stress_workload, stress_references
    text_level = is_text_level(*refs.values())
    comparison, suffix = level_details(text_level), title_suffix(text_level=text_level)
    if text_level:
        findings.measure("comparison", check="mixing", route=candidate.name, **comparison)
    rng = random.Random(f"mixing-{suite_config.seed}")
    latency = mean_latency(refs)
    before = candidate.acceptance()
    witness = LoadWitness(candidate)
    windows = LoadRuns(candidate=candidate, baseline=baseline)
    runs, reports, controls = [], [], []
    for level in budget.levels:
        keys = round_robin(workload.keys, budget.mixing_requests, rng=rng)
        subs = mixed_load([(k, workload.get(k).request(max_tokens=stress_max_tokens)) for k in keys], level=level,
                          rng=rng, mean_latency_s=latency, tag=f"mix-c{level}")
        run = windows.add(witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency)), subs)
        runs.append(run)
        reports.append(_attributed(candidate, run, workload, refs, tokenizer, stress_max_tokens))
        control = stress_control.run(subs, concurrency=level, mean_latency_s=latency)
        if control is not None:
            controls.append(_attributed(baseline, control, workload, stress_control.references, tokenizer,
                                        stress_max_tokens))
        if run.failed:
            findings.add(failure_finding(run, check="mixing", route=candidate.name, what="mixing load",
                                         repro=windows.failed(run)))
    after = candidate.acceptance()
    sent = sum(len(r.outcomes) for r in runs)
    chats = sum(workload.get(o.key).chat for r in runs for o in r.outcomes)
    chat_note = (f"; {chats} of them chat requests through the route's chat template" if chats else
                 "; no chat requests (a route lacks chat: the chat template path is not verified under load)")
    theirs = merge(controls) if stress_control.available else None
    control_note = (f"; baseline under the same load: {len(theirs.contaminated)} of {theirs.checked} contaminated"
                    if theirs else f"; {NO_LOAD_CONTROL}")
    witness.cover(findings, "mixing", counts={"chat requests": chats},
                  could_detect=f"another request's context in an answer: a 1% per-request mixing rate shows in "
                               f"{sent} requests with P={1 - 0.99 ** sent:.2f}{chat_note}{control_note}")
    stopped = [line for run in runs for line in early_stops(run.outcomes, refs)]
    if stopped:
        findings.add(Finding(
            check="mixing", severity="bug", route=candidate.name,
            title=(f"{len(stopped)} answers under load stopped after at most one token where the serial run was "
                   f"long (the vllm#50021 pattern: HTTP 200, one empty token, finish_reason 'stop')"),
            details={"examples": stopped[:20], "max_tokens": stress_max_tokens,
                     "repro": windows.repro(stopped[0].split(":")[0])}))
    total = merge(reports)
    distrusted = untrusted_references(baseline=baseline.generate, candidate=candidate.generate, workload=workload,
                                      references=refs, keys={a.victim_key for a in total.mismatches},
                                      max_tokens=stress_max_tokens)
    if distrusted:
        findings.add(Finding(
            check="mixing", severity="bug", route=candidate.name, prompt_id=sorted(distrusted)[0],
            title=(f"{len(distrusted)} serial greedy references of the candidate differ from the AR baseline and "
                   f"do not reproduce serially (other traffic shares its batches?); their mismatches under load "
                   f"are not attributed to mixing"),
            details={"prompts": sorted(distrusted), "max_tokens": stress_max_tokens,
                     "repro": parity_repro([workload.get(k).request(max_tokens=stress_max_tokens)
                                            for k in sorted(distrusted)[:3]], candidate=candidate, baseline=baseline,
                                           attempts=3)}))
        total = total.excluding_victims(distrusted)
    per_level = ", ".join(f"c={run.concurrency}: {len(rep.contaminated)} of {rep.checked}"
                          for run, rep in zip(runs, reports))
    where = f"at c={','.join(str(r.concurrency) for r in runs)}"
    contamination = stress_control.compare(
        what="answered in another request's context", candidate=Count(len(total.contaminated), total.checked),
        baseline=Count(len(theirs.contaminated), theirs.checked) if theirs else None, where=where)
    unattributed = stress_control.compare(
        what="differ from their serial reference with no identifiable source",
        candidate=Count(len(total.unattributed), total.checked),
        baseline=Count(len(theirs.unattributed), theirs.checked) if theirs else None, where=where)
    judge_contamination = record(findings, contamination, check="mixing", control=stress_control,
                                 candidate=candidate, examples=[a.line() for a in theirs.contaminated] if theirs else [])
    judge_unattributed = record(findings, unattributed, check="mixing", control=stress_control, candidate=candidate,
                                examples=[a.line() for a in theirs.unattributed] if theirs else [])
    acceptance = (after.minus(before).mean_acceptance_length if after is not None and before is not None else None)
    details = {"budget": budget.describe(), "requests_checked": total.checked, "per_level": per_level,
               "pool": len(workload.items), "max_tokens": stress_max_tokens,
               "runs": [r.describe() for r in runs], "serial_mean_latency_s": round(latency, 4),
               "mean_acceptance_length_under_load": acceptance, **comparison,
               "load_control": {"contamination": contamination.as_details(), "unattributed": unattributed.as_details()}}
    findings.add(Finding(check="mixing", severity="info", route=candidate.name, details=details,
                         title=f"mixing: {total.checked} outputs checked against serial references ({per_level}); "
                               f"{len(total.contaminated)} contaminated; {contamination.control_text()}; "
                               f"budget: {budget.describe()}{suffix}"))
    unexplained = []
    for att in (total.unattributed if judge_unattributed else ())[:MAX_CLASSIFIED]:
        severity, why = near_tie_policy.judge(baseline=baseline, tokenizer=tokenizer,
                                              prompt_ids=workload.get(att.victim_key).prompt_ids,
                                              expected=refs[att.victim_key],
                                              got=outcome_of(runs, att.victim_request), max_tokens=stress_max_tokens)
        unexplained.append((severity, f"{att.line()}; {why}", att.victim_request))
    ties = [line for severity, line, _ in unexplained if severity == "near-tie"]
    bugs = [line for severity, line, _ in unexplained if severity == "bug"]
    first_of = {severity: victim for severity, _, victim in reversed(unexplained)}
    if ties:
        findings.add(Finding(
            check="mixing", severity="near-tie", route=candidate.name,
            title=f"{len(ties)} outputs under load differ from their serial reference at a numerical near-tie "
                  f"(batch variance, no foreign content){suffix}",
            details={"examples": ties[:10], **details, "repro": windows.repro(first_of.get("near-tie", ""))}))
    if bugs:
        findings.add(Finding(
            check="mixing", severity="bug", route=candidate.name,
            title=f"{len(bugs)} outputs under load differ from their serial reference beyond a near-tie, with no "
                  f"identifiable source (corrupted batch state?; {unattributed.sentence()}){suffix}: {bugs[0][:200]}",
            details={"examples": bugs[:10], **details, "repro": windows.repro(first_of.get("bug", ""))}))
    if not total.contaminated or not judge_contamination:
        if stopped:
            pytest.fail(f"candidate '{candidate.name}': {len(stopped)} answers under load stopped early:\n"
                        + "\n".join(stopped[:5]), pytrace=False)
        if distrusted:
            pytest.fail(f"candidate '{candidate.name}': {len(distrusted)} serial references differ from the AR "
                        f"baseline and do not reproduce: {', '.join(sorted(distrusted)[:5])}", pytrace=False)
        if bugs:
            pytest.fail(f"candidate '{candidate.name}': {len(bugs)} outputs under load differ from their serial "
                        f"reference beyond a near-tie:\n" + "\n".join(bugs[:5]), pytrace=False)
        return
    first = next((a for a in total.contaminated if a.source_requests_in_flight), total.contaminated[0])
    run = next(r for r in runs if first.victim_request in r.by_id())
    window = window_schedule(run, victim_request=first.victim_request, workload=workload)
    shrunk = shrink(window, lambda s: reproduces(candidate, workload, refs, s, first.victim_key, stress_max_tokens,
                                                 latency, attempts=FIRST_REPEATS if s == window else SHRINK_REPEATS),
                    max_evaluations=SHRINK_EVALUATIONS, deadline_s=SHRINK_SECONDS)
    title = (f"cross-request mixing: {len(total.contaminated)} of {total.checked} outputs answered in another "
             f"request's context ({per_level}; {contamination.control_text()}); e.g. {first.victim_key} got "
             f"{first.source_key}'s content{suffix}")
    repro_subs = shrunk.schedule.submissions(workload, max_tokens=stress_max_tokens, tag="repro")
    script = replay_script(title=title, schedule=shrunk.schedule, workload=workload, references=refs,
                           spec=candidate.spec, max_tokens=stress_max_tokens, wire=candidate.wire_request)
    findings.add(Finding(
        check="mixing", severity="bug", route=candidate.name, prompt_id=first.victim_key, title=title,
        details={**details, "contamination_matrix": total.matrix_rows(),
                 "diff": (f"- {first.victim_key}, serial reference: {first.reference_text[:160]!r}\n"
                          f"+ {first.victim_key}, under load:       {first.output_text[:160]!r}\n"
                          f"  source {first.source_key}: {first.evidence}"),
                 "examples": [a.line() for a in total.contaminated[:20]],
                 "schedule": shrunk.schedule.to_json(), "schedule_text": shrunk.schedule.describe(workload),
                 "shrink": shrunk.describe(),
                 "replay": {"filename": f"replay_mixing_{candidate.name}.py", "script": script},
                 "repro": load_repro([(sub.request, step.gap_ms, step.abort_ms)
                                      for sub, step in zip(repro_subs, shrunk.schedule.steps)],
                                     candidate=candidate, baseline=baseline, concurrency=shrunk.schedule.concurrency,
                                     note=f"the shrunk schedule: {shrunk.describe()}")}))
    pytest.fail(f"candidate '{candidate.name}' mixed requests under load: {title}\n"
                f"{total.matrix_text()}\nfirst: {first.line()}\nrepro schedule: {shrunk.describe()}", pytrace=False)


def _attributed(route, run, workload, references, tokenizer, max_tokens: int):
    """One load run's mismatches against `route`'s own serial references, each attributed (context probes on
    `route` itself): the candidate's, and the same for its load control on the baseline."""
    report = detect(workload=workload, references=references, outcomes=run.outcomes)
    return probe_contexts(report, workload=workload, outcomes=run.outcomes, generate=route.generate,
                          render=renderer(tokenizer), max_tokens=max_tokens)


def reproduces(candidate, workload, refs, schedule: Schedule, victim_key: str, max_tokens: int,
               latency: float, *, attempts: int) -> bool:
    """Replay a schedule up to `attempts` times; True when the victim's prompt again loses its serial output."""
    for attempt in range(attempts):
        subs = schedule.submissions(workload, max_tokens=max_tokens, tag=f"shrink{attempt}",
                                    stream=candidate.capabilities.stream)
        run = drive_handle(candidate, subs, concurrency=schedule.concurrency, mean_latency_s=latency)
        if any(o.key == victim_key and o.completion.token_ids != refs[victim_key].token_ids for o in run.completed):
            return True
    return False
