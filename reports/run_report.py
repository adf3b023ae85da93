"""Assemble the machine-readable run report from what the collector gathered."""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

from reports.collector import RunCollector

NOT_VERIFIED_PREFIX = "not verified"


def verdict_of(*, failed: int, bug_findings: int, error_findings: int, not_verified: int,
               complete: bool) -> tuple[str, str]:
    """adopt / pilot / wait / avoid, with the reason a person reads first."""
    if not complete:
        return "wait", "the run did not complete; its results are partial"
    if bug_findings:
        return "avoid", f"{bug_findings} correctness finding(s) against the candidate"
    if error_findings or failed:
        return "wait", f"{failed} failed check(s), {error_findings} route error(s): investigate before promoting"
    if not_verified:
        return "pilot", f"all checks that ran passed, but {not_verified} could not be verified on this route"
    return "adopt", "every check passed"


def build_run_report(collector: RunCollector) -> dict[str, Any]:
    outcomes = list(collector.outcomes.values())
    counts = Counter(o.outcome for o in outcomes)
    per_check: dict[str, Counter] = defaultdict(Counter)
    for outcome in outcomes:
        per_check[outcome.check][outcome.outcome] += 1
    not_verified = [
        {"test": o.nodeid, "check": o.check, "reason": o.reason}
        for o in outcomes if o.outcome == "skipped" and o.reason.startswith(NOT_VERIFIED_PREFIX)
    ]
    findings = [f.__dict__ for f in collector.findings]
    recorded = collector.findings_recorded() if collector.worker_states else collector.worker_state.findings_recorded
    received = len(collector.findings)
    complete = not collector.interrupted and not collector.crashed_workers and recorded == received
    bug_findings = sum(1 for f in collector.findings if f.severity == "bug")
    error_findings = sum(1 for f in collector.findings if f.severity == "error")
    verdict, reason = verdict_of(failed=counts["failed"] + counts["error"], bug_findings=bug_findings,
                                 error_findings=error_findings, not_verified=len(not_verified),
                                 complete=complete)
    inventories = collector.merged_worker_field("inventories") or {
        k: [v] for k, v in collector.worker_state.inventories.items()}
    acceptance = collector.merged_worker_field("acceptance") or {
        k: [v] for k, v in collector.worker_state.acceptance.items()}
    return collector.redact.data({
        "run_id": collector.run_id,
        "started_unix": collector.started,
        "finished_unix": time.time(),
        "duration_s": round(time.time() - collector.started, 2),
        "complete": complete,
        "interrupted": collector.interrupted,
        "crashed_workers": collector.crashed_workers,
        "verdict": verdict,
        "verdict_reason": reason,
        "config": collector.config_public,
        "counts": dict(counts),
        "checks": {check: dict(c) for check, c in sorted(per_check.items())},
        "tests": [o.__dict__ for o in sorted(outcomes, key=lambda o: o.nodeid)],
        "not_verified": not_verified,
        "findings": findings,
        "measurements": collector.measurements,
        "findings_accounting": {"recorded": recorded, "received": received, "lost": recorded - received},
        "inventories": {name: values[0] for name, values in inventories.items()},
        "acceptance": {name: _sum_acceptance(values) for name, values in acceptance.items()},
    })


def _sum_acceptance(values: list[dict[str, Any]]) -> dict[str, Any]:
    """Workers each hold their own in-process engine; their counters add up."""
    drafts = sum(v.get("drafts", 0) for v in values)
    accepted = sum(v.get("accepted", 0) for v in values)
    draft_tokens = sum(v.get("draft_tokens", 0) for v in values)
    width = max((len(v.get("accepted_per_pos", [])) for v in values), default=0)
    per_pos = [sum((v.get("accepted_per_pos", []) + [0] * width)[i] for v in values) for i in range(width)]
    return {"drafts": drafts, "draft_tokens": draft_tokens, "accepted": accepted, "accepted_per_pos": per_pos,
            "mean_acceptance_length": round(1 + accepted / drafts, 3) if drafts else None,
            "workers": len(values)}
