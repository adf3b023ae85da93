"""Client disconnects under load: the route must survive them and keep answering correctly.

Bug class: the engine dies, hangs or corrupts memory after cancelled requests under load
(sglang#31965, vllm#50021). Half of a wave of requests hang up mid-generation (streamed
when the route streams, so the connection really closes); the other half must still get
their serial outputs. Afterwards a health check and a canary request alone must succeed
and the canary must equal its serial reference. A route that dies or hangs becomes a
finding naming the request and the clock time; every wait is bounded, so the suite goes on.
The same wave (the same hang-ups) runs on the baseline too (stressors/control.py): outputs it loses beside
hung-up clients as well are engine behaviour, and the candidate is charged only with its excess.
"""
from __future__ import annotations

import random
import time

import pytest

from spec_route_suite.routes.errors import RouteError
from spec_route_suite.reports.findings import Finding
from spec_route_suite.stressors.canary import mean_latency
from spec_route_suite.stressors.driver import burst, drive_handle, failure_finding, plan, round_robin
from spec_route_suite.stressors.windows import LoadRuns, window_steps
from spec_route_suite.reports.repro_spec import load_repro
from spec_route_suite.stressors.control import Count, record
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.mixing import detect

pytestmark = pytest.mark.check("aborts")
HEALTH_TIMEOUT_S = 30.0
ABORT_FRACTION = (0.2, 0.8)  # of the prompt's serial latency: mid-generation for most requests


def clock() -> str:
    return time.strftime("%H:%M:%S")


def test_route_survives_client_disconnects(candidate, baseline, stress_budget, stress_workload, stress_references,
                                           stress_max_tokens, suite_config, stress_control, findings):
    workload, refs = stress_workload, stress_references
    rng = random.Random(f"aborts-{suite_config.seed}")
    latency = mean_latency(refs)
    level = stress_budget.batch(max(stress_budget.levels))
    stream = candidate.capabilities.stream
    keys = round_robin(workload.keys, stress_budget.abort_wave, rng=rng)
    hang_ups = [rng.uniform(*ABORT_FRACTION) * refs[k].latency_s if i % 2 == 0 else None for i, k in enumerate(keys)]
    subs = plan(((k, workload.get(k).request(max_tokens=stress_max_tokens, stream=stream and h is not None))
                 for k, h in zip(keys, hang_ups)), offsets=burst(len(keys)), tag="abort", abort_after_s=hang_ups)
    witness = LoadWitness(candidate)
    windows = LoadRuns(candidate=candidate, baseline=baseline)
    run = windows.add(witness.add(drive_handle(candidate, subs, concurrency=level, mean_latency_s=latency)), subs)
    control = stress_control.run(subs, concurrency=level, mean_latency_s=latency)
    report = detect(workload=workload, references=refs, outcomes=run.outcomes)
    theirs = detect(workload=workload, references=stress_control.references, outcomes=control.outcomes) if control else None
    comparison = stress_control.compare(what="beside hung-up clients lost their serial output",
                                        candidate=Count(len(report.mismatches), report.checked),
                                        baseline=Count(len(theirs.mismatches), theirs.checked) if theirs else None,
                                        where=f"at c={level}")
    witness.cover(findings, "aborts", could_detect=f"a hang-up that corrupts the requests beside it or kills the engine "
                                                   f"({comparison.control_text()})")
    problems: list[str] = []
    if run.failed:
        problems.append(findings.add(failure_finding(run, check="aborts", route=candidate.name,
                                                     what="abort wave", repro=windows.failed(run))).title)
    judged = record(findings, comparison, check="aborts", control=stress_control, candidate=candidate,
                    examples=[a.line() for a in theirs.mismatches] if theirs else [])
    if report.mismatches and judged:
        lines = [a.line() for a in report.mismatches]
        findings.add(Finding(check="aborts", severity="bug", route=candidate.name,
                             title=f"{len(lines)} requests beside hung-up clients lost their serial output "
                                   f"({comparison.sentence()}): {lines[0]}",
                             details={"examples": lines[:10], "load_control": comparison.as_details(),
                                      "repro": windows.repro(report.mismatches[0].victim_request)}))
        problems.append(lines[0])
    aborted = sum(o.aborted for o in run.outcomes)
    healthy, health_error = False, ""
    try:
        healthy = candidate.run(candidate.route.health(), timeout_s=HEALTH_TIMEOUT_S, request_id="health")
    except RouteError as exc:
        health_error = exc.describe()
    if not healthy:
        title = f"route unhealthy after {aborted} client disconnects: health check at {clock()} " + (
            f"failed: {health_error}" if health_error else "returned false")
        findings.add(Finding(check="aborts", severity="error", route=candidate.name, title=title))
        problems.append(title)
    item = next(iter(workload.recall()), workload.items[0])
    canary_id = f"post-abort-canary-{item.key}"
    timeout = min(candidate.timeout_s, max(10.0, 50 * refs[item.key].latency_s))
    try:
        after = candidate.generate(item.request(max_tokens=stress_max_tokens, request_id=canary_id, timeout_s=timeout))
        if after.token_ids != refs[item.key].token_ids:
            title = (f"after {aborted} disconnects the canary {canary_id} answered {after.text!r}, alone before the "
                     f"wave {refs[item.key].text!r}")
            wave = window_steps(run, subs, run.outcomes[0].request_id, limit=len(run.outcomes))[:11]
            canary = (item.request(max_tokens=stress_max_tokens, request_id="repro-canary"),
                      round(1000 * max(refs[k].latency_s for k in keys)), None)
            findings.add(Finding(check="aborts", severity="bug", route=candidate.name, prompt_id=item.key, title=title,
                                 details={"repro": load_repro([*wave, canary], candidate=candidate, baseline=baseline,
                                                              concurrency=level,
                                                              note="hang-ups, then the canary after the wave")}))
            problems.append(title)
    except RouteError as exc:
        title = f"route dead or hung after {aborted} disconnects: canary {canary_id} at {clock()}: {exc.describe()}"
        findings.add(Finding(check="aborts", severity="error", route=candidate.name, prompt_id=item.key, title=title,
                             details={"request_id": canary_id, "error_kind": exc.kind}))
        problems.append(title)
    findings.add(Finding(check="aborts", severity="info", route=candidate.name,
                         title=f"aborts: {run.describe()}; {'streamed' if stream else 'non-streamed'} hang-ups; "
                               f"health and canary checked after the wave; {comparison.control_text()}",
                         details={"budget": stress_budget.describe(), "hang_ups": aborted}))
    if problems:
        pytest.fail(f"candidate '{candidate.name}' after client disconnects: " + " | ".join(problems[:3]),
                    pytrace=False)
