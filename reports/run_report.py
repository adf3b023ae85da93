"""Assemble the machine-readable run report from what the collector gathered."""
from __future__ import annotations

import os
import platform
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from spec_route_suite.reports.acceptance import (UNKNOWN, baseline_problems, speculation_leads, speculation_problems,
                                                 speculation_status)
from spec_route_suite.reports.by_class import class_gaps, class_problems, class_report
from spec_route_suite.reports.collector import RunCollector
from spec_route_suite.reports.compare import compare_reports, load_report
from spec_route_suite.reports.coverage import ANY_ROUTE, Gap, coverage_gaps, coverage_rows, route_of_test, table_dicts
from spec_route_suite.reports.parity import parity
from spec_route_suite.reports.regression import regression_gaps
from spec_route_suite.routes.speculation.acceptance import summed_worker_profile
from spec_route_suite.routes.wrappers.traffic_acceptance import merged_bands

NOT_VERIFIED_PREFIX = "not verified"


def verdict_of(*, failed: int, bug_findings: int, error_findings: int, not_verified: int,
               complete: bool, problems: Sequence[str] = (), gaps: Sequence[str] = (),
               speculation: Sequence[str] = ()) -> tuple[str, str]:
    """adopt / pilot / wait / avoid, with the reason a person reads first.

    "adopt" promises that every check family ran and could have found its bug class here; each
    gap (a family not run or not verified, a warning that weakens the evidence, a finding about
    the baseline) is named in the "pilot" line. `speculation` says the route's speculation did not run
    or accepted nothing: it makes the route wait, and its reason says so first, before any finding."""
    if not complete:
        return "wait", "the run did not complete; its results are partial"
    lead = list(speculation)
    if bug_findings:
        return "avoid", "; ".join([*lead, f"{bug_findings} correctness finding(s) against the candidate"])
    if lead or error_findings or failed or problems:   # every cause is named: route errors never hide it
        errors = ([f"{failed} failed check(s), {error_findings} route error(s): investigate before promoting"]
                  if error_findings or failed else [])
        return "wait", "; ".join([*lead, *errors, *problems])
    if gaps:
        return "pilot", "all checks that ran passed, but: " + "; ".join(gaps)
    if not_verified:
        return "pilot", f"all checks that ran passed, but {not_verified} could not be verified on this route"
    return "adopt", "every check family ran, passed and could have detected its bug class on this run"


def speculation_verdict_parts(collector: RunCollector, context: dict[str, Any], *, baseline_name: str | None,
                              route: str | None = None) -> tuple[list[str], list[str]]:
    """(leads, problems) for the run or one route: speculation that did not run or accepted nothing leads the
    reason; then missing evidence, broken counters, a class that accepted nothing, a baseline that speculated."""
    statuses = [s for s in context["speculation"] if route in (None, s["route"])]
    leads = speculation_leads(statuses)
    problems = [p for p in speculation_problems(statuses) if p not in leads]
    by_class = class_report(collector.measurements)
    for s in statuses:   # each class that accepted nothing is named, also when the whole route accepted nothing
        problems += class_problems(by_class, s["route"])
    return leads, problems + baseline_problems(baseline_name, context["acceptance"].get(baseline_name))


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
    recorded = (collector.findings_recorded() if collector.worker_states
                else collector.worker_state.findings_recorded + collector.controller_findings)
    received = len(collector.findings)
    complete = not collector.interrupted and not collector.crashed_workers and recorded == received
    baseline_name = (collector.config_public.get("baseline") or {}).get("name")
    bug_findings = sum(1 for f in collector.findings if f.severity == "bug" and f.route != baseline_name)
    error_findings = sum(1 for f in collector.findings if f.severity == "error")
    context = route_context(collector)
    leads, problems = speculation_verdict_parts(collector, context, baseline_name=baseline_name)
    candidates = [c.get("name") for c in collector.config_public.get("candidates", [])]
    planned = {k: v for state in [collector.worker_state.__dict__, *collector.worker_states]
               for k, v in (state.get("planned") or {}).items()}
    coverage = coverage_rows(records=collector.measurements.get("coverage", []), outcomes=outcomes,
                             candidates=candidates, planned=planned)
    unknown = [s for s in context["speculation"] if s["status"] == UNKNOWN]
    not_verified += [{"test": "(whole run)", "check": "speculation",
                      "reason": f"{NOT_VERIFIED_PREFIX}: whether speculation ran on `{s['route']}`: {s['reason']}"}
                     for s in unknown]
    warnings = [p["warning"] for p in context["parity"] if p["warning"]]
    from spec_route_suite import __version__
    from spec_route_suite.reports.matrix import coverage_matrix
    report = {
        "run_id": collector.run_id,
        "suite_version": __version__,
        "command": collector.command,
        "client": client_machine(),
        "started_unix": collector.started,
        "finished_unix": time.time(),
        "duration_s": round(time.time() - collector.started, 2),
        "complete": complete,
        "interrupted": collector.interrupted,
        "crashed_workers": collector.crashed_workers,
        "config": collector.config_public,
        "counts": dict(counts),
        "checks": {check: dict(c) for check, c in sorted(per_check.items())},
        "tests": [o.__dict__ for o in sorted(outcomes, key=lambda o: o.nodeid)],
        "not_verified": not_verified,
        "coverage": table_dicts(coverage),
        "by_class": class_report(collector.measurements),
        "findings": findings,
        "measurements": collector.measurements,
        "findings_accounting": {"recorded": recorded, "received": received, "lost": recorded - received},
        "warnings": warnings,
        # the controller's own notes (e.g. managed servers that did not start) and every worker's
        "notes": sorted({*collector.worker_state.notes, *(n for w in collector.worker_states for n in w.get("notes", [])),
                         *([collector.config_public["defaults_note"]] if collector.config_public.get("defaults_note")
                           else [])}),
        **context,
    }
    if collector.compare_to is not None:   # before the verdicts: a regression since that run keeps ADOPT away
        report["comparison"] = compare_reports(report, load_report(collector.compare_to))
    comparison = report.get("comparison")
    gaps = evidence_gaps(collector, coverage, context, baseline_name=baseline_name, comparison=comparison)
    verdict, reason = verdict_of(failed=counts["failed"] + counts["error"], bug_findings=bug_findings,
                                 error_findings=error_findings, not_verified=0,  # skips reach it as coverage gaps
                                 complete=complete, problems=problems, gaps=gaps, speculation=leads)
    per_route = {name: route_verdict(collector, name, candidates, coverage=coverage, context=context,
                                     complete=complete, baseline_name=baseline_name, outcomes=outcomes,
                                     comparison=comparison)
                 for name in candidates}
    verdict, reason = headline_verdict((verdict, reason), per_route)
    report.update(verdict=verdict, verdict_reason=reason, route_verdicts=per_route, gaps=gaps)
    report = collector.redact.data(report)
    report["matrix"] = coverage_matrix(report)
    return report


def client_machine() -> dict[str, Any]:
    """The machine the suite ran on (the client): an issue tells it apart from the server's, which only the
    server's own statements (or the suite having started it here) describe."""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        cpu = ""
    return {"os": platform.platform(), "system": platform.system(), "machine": platform.machine(),
            "cpu": f"{cpu or platform.processor() or 'unknown cpu'}, {os.cpu_count()} cores",
            "python": platform.python_version()}


def evidence_gaps(collector: RunCollector, coverage, context: dict[str, Any], *, baseline_name: str | None,
                  route: str | None = None, comparison: dict[str, Any] | None = None) -> list[str]:
    """What keeps the run (or, given `route`, that candidate) from "adopt" though everything that ran passed:
    uncovered families, a partial prompt set, unproven speculation, weakening warnings, parity, baseline findings,
    an acceptance regression since the run --compare-to names."""
    def ours(name: str | None) -> bool:
        return route is None or name in (route, baseline_name)
    unknown = [s for s in context["speculation"] if s["status"] == UNKNOWN and ours(s["route"])]
    warnings = [p["warning"] for p in context["parity"] if p["warning"] and ours(p["route"])]
    about_baseline = [f for f in collector.findings if f.route == baseline_name and f.severity == "bug"]
    def tagged(kind: str, texts) -> list[Gap]:
        return [Gap(text, kind=kind, why=text) for text in texts]
    gaps = [*coverage_gaps(coverage, route=route), *tagged("prompt set", prompt_set_gaps(collector.config_public)),
            *tagged("settings", settings_gaps(collector.config_public)),
            *tagged("server", server_gaps({n: p for n, p in context["acceptance"].items() if ours(n)})),
            *(Gap(f"speculation not proven on `{s['route']}` ({s['reason']})", kind="speculation not proven",
                  subject=s["route"], why=s["reason"]) for s in unknown),
            *tagged("prompt class", class_gaps(class_report(collector.measurements), route)),
            *load_acceptance_gaps(collector.measurements, route),
            *tagged("warnings", evidence_warnings([f for f in collector.findings if ours(f.route)],
                                                  baseline_name=baseline_name)),
            *tagged("baseline parity", (f"baseline parity: {w}" for w in warnings)),
            *regression_gaps(comparison, route)]
    if about_baseline:
        gaps.append(Gap(f"{len(about_baseline)} finding(s) about the baseline `{baseline_name}` itself "
                        f"(e.g. {about_baseline[0].check}: {about_baseline[0].title[:120]}): the reference the "
                        f"candidate is judged against is not trustworthy there", kind="baseline findings"))
    return gaps


def load_acceptance_gaps(measurements: dict[str, Any], route: str | None = None) -> list[Gap]:
    """A candidate whose speed gate could not judge acceptance under load: its answers state no drafting and no
    server counters were measured on the idle server (stressors/speed/counters.py)."""
    judged = {m["route"] for m in measurements.get("load_acceptance", []) if m.get("judged")}
    why_not = {m["route"]: m.get("why", "") for m in measurements.get("load_acceptance", []) if not m.get("judged")}
    gaps = []
    for speed in measurements.get("speed", []):
        name = speed.get("candidate")
        rows = (speed.get("rows") or {}).get("candidate") or []
        if route not in (None, name) or name in judged or any(r.get("acceptance_by_prompt") for r in rows):
            continue
        why = why_not.get(name) or ("its answers state no drafting and its server exports no speculation counters, "
                                    "so acceptance under load could not be compared with one at a time")
        gaps.append(Gap(f"speed: acceptance under load not verified on `{name}` ({why})", kind="not verified",
                        subject="speed: acceptance under load", why=why))
    return gaps


VERDICT_ORDER = ("adopt", "pilot", "wait", "avoid")


def route_verdict(collector: RunCollector, name: str, candidates: Sequence[str], *, coverage,
                  context: dict[str, Any], complete: bool, baseline_name: str | None,
                  outcomes: Sequence[Any], comparison: dict[str, Any] | None = None) -> dict[str, Any]:
    """One candidate's verdict on its own evidence: a family verified on another candidate (a batching engine
    beside a serial one) does not make this one "adopt". What concerns the baseline or no particular route
    (its findings, failed tests, route errors) counts for every candidate."""
    shared = (baseline_name, None, "", ANY_ROUTE)
    errors = sum(1 for f in collector.findings if f.severity == "error" and f.route in (name, *shared))
    failed = sum(1 for o in outcomes if o.outcome in ("failed", "error")
                 and route_of_test(o.nodeid, candidates) in (name, ANY_ROUTE))
    leads, problems = speculation_verdict_parts(collector, context, baseline_name=baseline_name, route=name)
    gaps = evidence_gaps(collector, coverage, context, baseline_name=baseline_name, route=name,
                         comparison=comparison)
    verdict, reason = verdict_of(
        failed=failed, bug_findings=sum(1 for f in collector.findings if f.severity == "bug" and f.route == name),
        error_findings=errors, not_verified=0, complete=complete, problems=problems, gaps=gaps, speculation=leads)
    return {"verdict": verdict, "reason": reason, "gaps": [g.as_dict() for g in gaps]}


def headline_verdict(run: tuple[str, str], per_route: dict[str, dict[str, str]]) -> tuple[str, str]:
    """The headline never says more than the weakest candidate earned: when a candidate's own verdict is worse
    than the run's, the headline takes it and names every candidate's verdict."""
    worst = max([run[0], *(v["verdict"] for v in per_route.values())], key=VERDICT_ORDER.index)
    if worst == run[0]:
        return run
    if len(per_route) == 1:
        return worst, next(iter(per_route.values()))["reason"]
    return worst, ("candidates differ (" + ", ".join(f"`{name}` {v['verdict']}" for name, v in per_route.items())
                   + "): each route's verdict and reason are listed below")


def settings_gaps(config: dict[str, Any]) -> list[str]:
    """Settings that weaken what a passing run proves, named in the verdict line (not only in the notes)."""
    from spec_route_suite.config import DEFAULT_DETECT_TV
    gaps = []
    tv = config.get("detect_tv")
    if isinstance(tv, (int, float)) and tv > DEFAULT_DETECT_TV:
        gaps.append(f"the distribution check is planned for TV {tv:g} (--detect-tv; the full budget is "
                    f"{DEFAULT_DETECT_TV:g}): smaller distribution shifts may pass unseen")
    if config.get("near_tie_tau") is not None:
        excused = (" and --greedy-policy classify excuses every greedy divergence whose margin is below it"
                   if config.get("greedy_policy") == "classify" else "")
        gaps.append(f"the near-tie margin tau is pinned at {config['near_tie_tau']:g} nats (--near-tie-tau), not "
                    f"calibrated from the baseline's A/A run{excused}")
    return gaps


def server_gaps(acceptance: dict[str, Any]) -> list[str]:
    """A server that restarted during the run, or stopped answering before its end: its counters and its
    answers cover part of the run only."""
    gaps = []
    for name, profile in sorted(acceptance.items()):
        if (profile or {}).get("server_restarted"):
            gaps.append(f"the server behind `{name}` restarted during the run (its counters went down): the run's "
                        f"evidence spans two server lives")
        if (profile or {}).get("server_answering_at_end") is False:
            gaps.append(f"the server behind `{name}` was not answering at the end of the run")
    return gaps


def prompt_set_gaps(config: dict[str, Any]) -> list[str]:
    """A run on part of the prompt set checked part of what the suite would have checked."""
    from spec_route_suite.config import PROMPT_CATEGORIES
    gaps = []
    if config.get("prompts"):   # the user's sources: --categories chose among their own categories
        if config.get("categories"):
            gaps.append(f"only prompt categories {', '.join(config['categories'])} of the prompt sources were run "
                        f"(--categories)")
    else:
        left_out = [c for c in PROMPT_CATEGORIES if c not in (config.get("categories") or PROMPT_CATEGORIES)]
        if left_out:
            gaps.append(f"prompt categories not run: {', '.join(left_out)} (--categories)")
    if config.get("prompt_limit"):
        gaps.append(f"at most {config['prompt_limit']} prompt(s) per category (--prompt-limit)")
    return gaps


def evidence_warnings(findings, *, baseline_name: str | None) -> list[str]:
    """Warnings that weaken the evidence (near-tie excess, a candidate less accurate than the baseline,
    weakly verified checks), one line per check family, each naming its first warning."""
    by_check: dict[str, list] = defaultdict(list)
    for finding in findings:
        if finding.severity == "warning":
            by_check[finding.check].append(finding)
    return [f"{len(items)} {check} warning(s)" + (f" about the baseline" if all(f.route == baseline_name for f in items)
                                                   else "") + f" (e.g. {items[0].title[:140]})"
            for check, items in sorted(by_check.items())]


def _per_route(collector: RunCollector, key: str) -> dict[str, list[Any]]:
    return collector.merged_worker_field(key) or {k: [v] for k, v in getattr(collector.worker_state, key).items()}


def with_launch_facts(inventory: dict[str, Any], launch: Any) -> dict[str, Any]:
    """The inventory, completed by what the server stated when the suite started it (its engine, version and
    model, where the route's own probe got no answer) and the release the suite built it from: the version each
    issue file and comparison names must not depend on the server answering a probe mid-run."""
    at_start = (launch or {}).get("server_at_start") if isinstance(launch, dict) else None
    if not isinstance(at_start, dict):
        return inventory
    completed = dict(inventory)
    for key in ("engine", "version", "model"):
        if completed.get(key) in (None, "", "unknown", "openai-compatible") and at_start.get(key):
            completed[key] = at_start[key]
    if at_start.get("package"):
        completed["release"] = at_start["package"]
    return completed


def route_context(collector: RunCollector) -> dict[str, Any]:
    """Inventory, acceptance profile, "speculation really ran", baseline parity, latency and memory."""
    config = collector.config_public
    inventories = {name: with_launch_facts(values[0], collector.server_launch.get(name))
                   for name, values in _per_route(collector, "inventories").items()}
    # Counters a route took from its own answers (in-process engines, per-answer draft counts) are per worker:
    # sum them. A server's cumulative /metrics counters are shared by all workers, so only the controller's
    # before/after difference is meaningful, and it is preferred where the server has one.
    acceptance = {name: summed_worker_profile(route_scoped)
                  for name, values in _per_route(collector, "acceptance").items()
                  if (route_scoped := [v for v in values if v.get("scope", "route") == "route"])}
    acceptance.update(collector.server_acceptance)
    baseline_name = (config.get("baseline") or {}).get("name")
    candidates = [c.get("name") for c in config.get("candidates", [])]
    return {
        "inventories": inventories,
        "acceptance": acceptance,
        # every candidate gets a row: no evidence at all is "unknown" (speculation not proven), never silence
        "speculation": [speculation_status(name, inventory=inventories.get(name), profile=acceptance.get(name))
                        for name in candidates],
        "parity": [parity(inventories.get(baseline_name), inventories.get(name), candidate_name=name)
                   for name in candidates],
        "acceptance_by_traffic": {name: merged_bands(workers)
                                  for name, workers in _per_route(collector, "acceptance_by_traffic").items()
                                  if any(workers)},
        "latency": {name: latency_summary([s for worker in lists for s in worker])
                    for name, lists in _per_route(collector, "latency").items()},
        "memory": {"worker_peak_rss_mib": max((s.get("memory", {}).get("peak_rss_mib", 0)
                                               for s in collector.worker_states), default=None),
                   "servers": collector.server_memory},
        "server_launch": collector.server_launch,
    }


def latency_summary(samples: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Context, not a criterion: per-request wall time as the suite's client saw it."""
    if not samples:
        return {"requests": 0}
    seconds = sorted(s[0] for s in samples)
    tokens = sum(s[1] for s in samples)

    def pct(q: float) -> float:
        return round(seconds[min(len(seconds) - 1, int(q * len(seconds)))], 4)
    return {"requests": len(seconds), "p50_s": pct(0.5), "p95_s": pct(0.95), "max_s": round(seconds[-1], 4),
            "tokens": tokens, "tokens_per_request_second": round(tokens / sum(seconds), 1) if sum(seconds) else None}
