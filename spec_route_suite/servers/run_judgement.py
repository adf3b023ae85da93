"""Did a CI run of the suite break (harness errors), or did it run and judge the engine (findings)?

Why its own module: the CI stages and `python -m spec_route_suite.servers.ENGINE judge` read a finished run
folder; nothing here starts or stops a server.
Environment: none read here.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

# what an engine does to a request (a dead engine included: the finding names the request it died on)
ENGINE_ERROR_KINDS = ("http-error", "timeout", "malformed-response", "connection-lost", "route-error", "route-died")


def find_run_dir(report_dir: Path) -> Path | None:
    runs = sorted((p.parent for p in report_dir.glob("*/report.json")), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def judge_run(report_dir: Path, exit_code: int, servers_file: str = "vllm-servers.json") -> dict[str, Any]:
    """Did the suite break (harness errors), or did it run and judge the engine (route findings)?

    Harness errors, each a reason the CI stage fails:
      H1 pytest exit code other than 0 (all checks passed) or 1 (route findings): 2 interrupted,
         3 internal error, 4 usage error, 5 no tests collected, or killed by a signal;
      H2 no run folder with a readable report.json under the report dir;
      H3 the report says the run is incomplete: not `complete`, `interrupted`, crashed workers,
         or findings lost between workers and controller;
      H4 no test passed or failed (everything skipped or deselected: nothing was judged);
      H5 a test failed or errored without any finding attributed to it (test code or a fixture
         broke; every route failure produces a finding, from the check or from the RouteError hook);
      H6 a finding whose details.error_kind is not an engine-side kind (capability-missing means
         a test that should have skipped did not; anything unknown is the suite's own error);
      H7 a speculative route without its inventory or acceptance profile in the run folder.
    Everything else - failed checks with findings, HTTP errors, timeouts, a dead engine - is data
    about the engine and is reported, not failed on.
    """
    errors: list[str] = []
    if exit_code not in (0, 1):
        meaning = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}
        errors.append(f"H1 pytest exit code {exit_code} ({meaning.get(exit_code, 'killed or unknown')})")
    run_dir = find_run_dir(report_dir)
    report: dict[str, Any] = {}
    if run_dir is None:
        errors.append(f"H2 no report.json under {report_dir}")
    else:
        try:
            report = json.loads((run_dir / "report.json").read_text())
        except (OSError, ValueError) as exc:
            errors.append(f"H2 report.json unreadable: {exc}")
    findings = report.get("findings", [])
    if report:
        lost = (report.get("findings_accounting") or {}).get("lost", 0)
        if not report.get("complete") or report.get("interrupted") or report.get("crashed_workers") or lost:
            errors.append(f"H3 incomplete run: complete={report.get('complete')} interrupted="
                          f"{report.get('interrupted')} crashed_workers={report.get('crashed_workers')} lost={lost}")
        counts = report.get("counts", {})
        if counts.get("passed", 0) + counts.get("failed", 0) == 0:
            errors.append(f"H4 no test was judged (counts {counts})")
        with_findings = {f.get("test_id") for f in findings}
        for test in report.get("tests", []):
            if test.get("outcome") in ("failed", "error") and test.get("nodeid") not in with_findings:
                errors.append(f"H5 {test.get('nodeid')} {test.get('outcome')} without a finding: "
                              f"{str(test.get('reason', ''))[:300]}")
        for finding in findings:
            kind = (finding.get("details") or {}).get("error_kind")
            if kind is not None and kind not in ENGINE_ERROR_KINDS:
                errors.append(f"H6 finding with error_kind {kind!r} in {finding.get('test_id')}: "
                              f"{finding.get('title', '')[:200]}")
    servers: dict[str, Any] = {}
    if run_dir is not None:
        try:
            servers = json.loads((run_dir / servers_file).read_text())
        except (OSError, ValueError):
            errors.append(f"H7 {servers_file} (inventory and acceptance of the server routes) missing")
    for name in servers.get("speculative_routes", []):
        entry = servers["routes"].get(name, {})
        if not (entry.get("inventory") or {}).get("version") or not entry.get("acceptance"):
            errors.append(f"H7 speculative route {name!r} lacks inventory (engine version) or acceptance profile")
    by_route: dict[str, dict[str, int]] = {}
    for finding in findings:
        per = by_route.setdefault(finding.get("route", "?"), {})
        per[finding.get("severity", "?")] = per.get(finding.get("severity", "?"), 0) + 1
    return {"run_dir": str(run_dir) if run_dir else None, "exit_code": exit_code, "harness_errors": errors,
            "ok": not errors, "verdict": report.get("verdict"), "counts": report.get("counts"),
            "findings_by_route": by_route,
            "acceptance": {n: e.get("acceptance") for n, e in servers.get("routes", {}).items()},
            "server_health": {n: {"process_alive": e.get("process_alive"),
                                  "first_seen_down_unix": (e.get("health") or {}).get("first_seen_down_unix"),
                                  "last_ok_unix": (e.get("health") or {}).get("last_ok_unix"),
                                  "errors": (e.get("log_errors") or {}).get("distinct", [])[:3]}
                              for n, e in servers.get("routes", {}).items()}}


def print_judgement(result: Mapping[str, Any]) -> None:
    print(f"run folder: {result['run_dir']}")
    print(f"pytest exit code: {result['exit_code']}  verdict: {result['verdict']}  counts: {result['counts']}")
    print(f"route findings (data about the engine, not CI failures): {result['findings_by_route'] or 'none'}")
    for name, acc in sorted(result["acceptance"].items()):
        if acc and acc.get("drafts") is not None:
            print(f"acceptance {name}: mean length {acc['mean_acceptance_length']} over {acc['drafts']} drafts, "
                  f"per position {acc['per_position_acceptance_rate']}, invariants hold: {acc['invariants_hold']}")
    for name, health in sorted(result.get("server_health", {}).items()):
        if not health["process_alive"]:
            down, last_ok = health["first_seen_down_unix"], health["last_ok_unix"]
            clock = lambda t: time.strftime("%H:%M:%S", time.localtime(t)) if t else "never"  # noqa: E731
            print(f"engine {name}: DIED during the run (last answered {clock(last_ok)}, first seen down "
                  f"{clock(down)}); log says:")
            for line in health["errors"]:
                print(f"    {line[:300]}")
    if result["harness_errors"]:
        print("HARNESS ERRORS (the suite broke):")
        for error in result["harness_errors"]:
            print(f"  - {error}")
    else:
        print("no harness errors: the suite ran to completion and wrote its reports")
