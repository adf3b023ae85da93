"""What a run folder must keep, whatever it found: summary.md under 20,000 characters, an issue file under 60,000 for
every finding cluster filed (the others say why not, reports/filing.py) that quotes its repro script and curl lines
whole (or, when they do not fit, names them by their paths, as issues.py says), a repro for every bug and error
cluster.

`pooled_report_problems` renders one report that pools the findings of several run folders (the mutation
table's: every cluster kind it produces, 50 findings and more), the "run with 50 findings" a nightly job meets.
Environment: none.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Iterable

from spec_route_suite.reports.clusters import CLUSTERED, cluster_findings
from spec_route_suite.reports.issues import MAX_CHARS as ISSUE_CHARS, write_issue_files
from spec_route_suite.reports.matrix import coverage_matrix
from spec_route_suite.reports.render_markdown import MAX_CHARS as SUMMARY_CHARS, render_summary
from spec_route_suite.reports.repro import write_repro_scripts

NEEDS_REPRO = ("bug", "error")


def folder_problems(run_dir: Path, report: dict, summary: str) -> list[str]:
    problems = []
    if len(summary) >= SUMMARY_CHARS:
        problems.append(f"{run_dir.name}: summary.md has {len(summary)} characters (limit {SUMMARY_CHARS})")
    for cluster in report.get("clusters") or []:
        name = f"{run_dir.name} cluster {cluster['id']} ({cluster['check']} on {cluster['route']})"
        if not cluster.get("issue"):
            if not cluster.get("not_filed"):
                problems.append(f"{name}: neither an issue file nor why not")
            continue
        issue = run_dir / cluster["issue"]
        if not issue.is_file():
            problems.append(f"{name}: no issue file")
            continue
        text = issue.read_text()
        if len(text) >= ISSUE_CHARS:
            problems.append(f"{name}: {issue.name} has {len(text)} characters (limit {ISSUE_CHARS})")
        if not cluster.get("repro") and cluster["severity"] in NEEDS_REPRO:
            problems.append(f"{name}: a {cluster['severity']} cluster without a repro script: {cluster['title'][:200]}")
        for path in cluster.get("repro") or []:
            left_out = (f"curl lines: `{path}` in the run folder (left out here to fit" in text if path.endswith(".sh")
                        else f"`{path}` in the run folder, " in text and "attached, not quoted" in text)
            if (run_dir / path).read_text() not in text and not left_out:
                problems.append(f"{name}: {issue.name} does not quote {path} as written")
    return problems


def run_folder_problems(run_dir: Path) -> list[str]:
    report = json.loads((run_dir / "report.json").read_text())
    return folder_problems(run_dir, report, (run_dir / "summary.md").read_text())


def pooled_report_problems(run_dirs: Iterable[Path], *, min_findings: int) -> list[str]:
    """Pool the findings of `run_dirs` into one report, write its repro scripts and issue files and render its
    summary in a temporary folder, and check them like a run folder."""
    reports = [json.loads((d / "report.json").read_text()) for d in run_dirs]
    pooled = dict(reports[0])
    candidates = {c["name"]: c for r in reports for c in r.get("config", {}).get("candidates", [])}
    pooled["config"] = {**reports[0].get("config", {}), "candidates": list(candidates.values())}
    for key in ("findings", "tests", "coverage"):
        pooled[key] = [item for r in reports for item in r.get(key) or []]
    pooled["inventories"] = {k: v for r in reports for k, v in (r.get("inventories") or {}).items()}
    pooled["route_verdicts"] = {k: v for r in reports for k, v in (r.get("route_verdicts") or {}).items()}
    pooled["notes"] = [n for r in reports for n in r.get("notes") or []]
    counted = sum(f.get("severity") in CLUSTERED for f in pooled["findings"])
    if counted < min_findings:
        return [f"the pooled report has {counted} bug, error, near-tie and warning findings, fewer than {min_findings}"]
    pooled["matrix"] = coverage_matrix(pooled)
    with tempfile.TemporaryDirectory(prefix="pooled-report-") as folder:
        run_dir = Path(folder)
        pooled["clusters"] = cluster_findings(pooled["findings"], pooled["tests"], list(candidates))
        write_repro_scripts(run_dir, pooled, pooled["clusters"])
        write_issue_files(run_dir, pooled, pooled["clusters"])
        return folder_problems(run_dir, pooled, render_summary(pooled))
