"""A run folder trimmed to what docs/ quotes: report.json without its bulk, summary.md whole.

    python -m spec_route_suite.reports.trim RUN_DIR docs/runs/NAME [--extra FILE ...]

Why: every number in README.md and docs/ cites a committed run, but a full report.json carries every test and
every measurement (megabytes). The trimmed copy keeps what a reader checks a claim against (the verdicts and their
gaps, the findings and their clusters, coverage, acceptance, classes, speed, inventories, notes) and drops the
per-test list and the raw measurements other than the ones those sections are built from (and the greedy answers
a nightly comparison between two committed runs is recomputed from). The summary is rendered
from the same report, so it is copied whole. `--extra` copies more files beside them (a benchmark's printed table,
a server's log tail). Environment: none.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

# coverage: its rows are kept; greedy_answer: a nightly comparison (reports/regression.py) is recomputed from two
# trimmed runs
KEPT_MEASUREMENTS = ("speed", "class_acceptance", "load_acceptance", "comparison", "greedy_answer")
DETAILED = ("bug", "error", "warning", "near-tie")   # severities whose findings keep their details
DROPPED = ("tests",)
FINDING_DETAIL_CHARS = 2_000


def trimmed(report: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in report.items() if k not in DROPPED}
    measurements = report.get("measurements") or {}
    out["measurements"] = {k: measurements[k] for k in KEPT_MEASUREMENTS if k in measurements}
    out["findings"] = [_finding(f) for f in report.get("findings") or []]
    out["trimmed"] = (f"from {report.get('run_id')}: the per-test list and the raw measurements other than "
                      f"{', '.join(KEPT_MEASUREMENTS)} left out (reports/trim.py)")
    return out


def _finding(finding: dict[str, Any]) -> dict[str, Any]:
    if finding.get("severity") not in DETAILED:   # an info or engine line: its title says it
        return {k: v for k, v in finding.items() if k != "details"}
    details = json.dumps(finding.get("details") or {}, default=str)
    if len(details) <= FINDING_DETAIL_CHARS:
        return finding
    return {**finding, "details": {"trimmed": details[:FINDING_DETAIL_CHARS] + "…"}}


def trim_run(run_dir: Path, dest: Path, extra: list[Path] = ()) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    report = json.loads((run_dir / "report.json").read_text())
    (dest / "report.json").write_text(json.dumps(trimmed(report), indent=1, sort_keys=True, default=str) + "\n")
    shutil.copyfile(run_dir / "summary.md", dest / "summary.md")
    for path in extra:
        shutil.copyfile(path, dest / path.name)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--extra", type=Path, action="append", default=[])
    args = parser.parse_args()
    print(trim_run(args.run_dir, args.dest, args.extra))


if __name__ == "__main__":
    main()
