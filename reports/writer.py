"""Write the run folder (summary.md, report.json) atomically."""
from __future__ import annotations

import json

from reports.collector import RunCollector
from reports.atomic import write_text_atomic
from reports.render_markdown import render_summary
from reports.run_report import build_run_report


def write_run_folder(collector: RunCollector) -> dict:
    report = build_run_report(collector)
    collector.run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(collector.run_dir / "report.json", json.dumps(report, indent=2, sort_keys=True, default=str))
    write_text_atomic(collector.run_dir / "summary.md", collector.redact.text(render_summary(report)))
    return report
