"""Write the run folder: report.json, summary.md, report.html, junit.xml, repro/ and issues/ per finding cluster."""
from __future__ import annotations

import json

from spec_route_suite.reports.collector import RunCollector
from spec_route_suite.reports.atomic import write_text_atomic
from spec_route_suite.reports.clusters import cluster_findings
from spec_route_suite.reports.issues import write_issue_files
from spec_route_suite.reports.compare import append_history
from spec_route_suite.reports.render_html import render_html
from spec_route_suite.reports.render_junit import render_junit
from spec_route_suite.reports.render_markdown import render_summary
from spec_route_suite.reports.repro import write_repro_scripts
from spec_route_suite.reports.run_report import build_run_report


def write_run_folder(collector: RunCollector) -> dict:
    report = build_run_report(collector)
    collector.run_dir.mkdir(parents=True, exist_ok=True)
    candidates = [c.get("name") for c in report["config"].get("candidates", [])]
    clusters = cluster_findings(report["findings"], report["tests"], candidates)
    report["repro_scripts"] = write_repro_scripts(collector.run_dir, report, clusters, collector.redact.text)
    report["issue_files"] = write_issue_files(collector.run_dir, report, clusters, collector.redact.text)
    report["clusters"] = clusters
    write_text_atomic(collector.run_dir / "report.json", json.dumps(report, indent=2, sort_keys=True, default=str))
    write_text_atomic(collector.run_dir / "summary.md", collector.redact.text(render_summary(report)))
    write_text_atomic(collector.run_dir / "report.html", collector.redact.text(render_html(report)))
    write_text_atomic(collector.run_dir / "junit.xml", collector.redact.text(render_junit(report)))
    append_history(collector.report_dir, report)
    return report
