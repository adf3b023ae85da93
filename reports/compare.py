"""Nightly comparison: what changed since a previous run, and a history line per run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HISTORY_FILE = "history.jsonl"


def finding_key(finding: dict[str, Any]) -> str:
    """Stable across runs: the same check on the same route and test (titles carry numbers that move)."""
    return f"{finding['check']}|{finding['route']}|{finding['test_id']}"


def load_report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def compare_reports(current: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    now = {finding_key(f): f for f in current["findings"] if f["severity"] in ("bug", "error")}
    then = {finding_key(f): f for f in previous["findings"] if f["severity"] in ("bug", "error")}
    acceptance = {}
    for route in sorted(set(current.get("acceptance", {})) | set(previous.get("acceptance", {}))):
        a = (previous.get("acceptance", {}).get(route) or {}).get("mean_acceptance_length")
        b = (current.get("acceptance", {}).get(route) or {}).get("mean_acceptance_length")
        acceptance[route] = {"previous": a, "current": b,
                             "change": round(b - a, 3) if a is not None and b is not None else None}
    p_now = _p_values(current)
    p_then = _p_values(previous)
    p_changes = {key: {"previous": p_then[key], "current": p_now[key]}
                 for key in sorted(set(p_now) & set(p_then))
                 if (p_now[key] < 0.01) != (p_then[key] < 0.01)}
    return {
        "previous_run": previous["run_id"],
        "previous_verdict": previous["verdict"],
        "new": [now[k]["title"] + f" ({k})" for k in sorted(set(now) - set(then))],
        "fixed": [then[k]["title"] + f" ({k})" for k in sorted(set(then) - set(now))],
        "still_failing": [now[k]["title"] + f" ({k})" for k in sorted(set(now) & set(then))],
        "acceptance_length": acceptance,
        "p_value_crossings": p_changes,
    }


def _p_values(report: dict[str, Any]) -> dict[str, float]:
    values = {}
    for m in report.get("measurements", {}).get("p_value", []):
        if isinstance(m.get("p_value"), (int, float)):
            values[f"{m.get('test_id')}|{m.get('name', '')}"] = float(m["p_value"])
    return values


def history_line(report: dict[str, Any]) -> str:
    return json.dumps({
        "run_id": report["run_id"], "finished_unix": report["finished_unix"], "verdict": report["verdict"],
        "complete": report["complete"], "counts": report["counts"],
        "findings": len(report["findings"]),
        "acceptance_length": {r: a.get("mean_acceptance_length") for r, a in report.get("acceptance", {}).items()},
    }, sort_keys=True)


def append_history(report_dir: Path, report: dict[str, Any]) -> None:
    """One line per run; a single small write, so concurrent runs never interleave within a line."""
    report_dir.mkdir(parents=True, exist_ok=True)
    with open(report_dir / HISTORY_FILE, "a", encoding="utf-8") as handle:
        handle.write(history_line(report) + "\n")


def render_comparison(comparison: dict[str, Any]) -> list[str]:
    lines = ["## Since the previous run", "",
             f"Compared with `{comparison['previous_run']}` (verdict {comparison['previous_verdict']}).", ""]
    for label in ("new", "fixed", "still_failing"):
        items = comparison[label]
        lines.append(f"- **{label.replace('_', ' ')}** ({len(items)})" + ("" if items else ": none"))
        lines += [f"  - {item}" for item in items[:30]]
    for route, change in comparison["acceptance_length"].items():
        lines.append(f"- acceptance length `{route}`: {change['previous']} -> {change['current']}")
    for key, change in comparison["p_value_crossings"].items():
        lines.append(f"- p-value crossed 0.01 `{key}`: {change['previous']:.3g} -> {change['current']:.3g}")
    return lines + [""]
