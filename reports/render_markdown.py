"""summary.md: written for a person, first line the verdict, details folded away."""
from __future__ import annotations

import json
from typing import Any

from spec_route_suite.reports.compare import render_comparison
from spec_route_suite.reports.coverage import COLUMNS, table_cells

MAX_FINDINGS_SHOWN = 50


def _route_verdicts(report: dict[str, Any]) -> list[str]:
    """With several candidates, each one's own verdict: a route is promoted on its own evidence."""
    verdicts = report.get("route_verdicts") or {}
    if len(verdicts) < 2:
        return []
    rows = [f"| `{name}` | **{v['verdict'].upper()}** | {v['reason']} |" for name, v in verdicts.items()]
    return ["| candidate | verdict | why |", "|---|---|---|", *rows, ""]


def render_summary(report: dict[str, Any]) -> str:
    lines = [
        f"# Route qualification: **{report['verdict'].upper()}**",
        "",
        f"{report['verdict_reason']}.",
        "",
        *_route_verdicts(report),
        f"Run `{report['run_id']}`, {report['duration_s']} s"
        + ("" if report["complete"] else " — **INCOMPLETE**: interrupted or a worker crashed; results are partial"),
        "",
        _routes_line(report),
        "",
        *[f"> **Warning**: {w}" for w in report.get("warnings", [])],
        *([""] if report.get("warnings") else []),
        *_coverage_table(report),
    ]
    lines += _speculation_table(report)
    if report.get("comparison"):
        lines += [""] + render_comparison(report["comparison"])
    lines += ["", f"## Findings ({len(report['findings'])})", ""]
    if not report["findings"]:
        lines.append("None.")
    scripts = report.get("repro_scripts", [])
    for index, finding in enumerate(report["findings"][:MAX_FINDINGS_SHOWN]):
        lines += _finding_block(finding)
        mine = [s for s in scripts if s.startswith(f"repro/{index:03d}-")]
        if mine:
            lines += [f"- repro: " + ", ".join(f"`{s}`" for s in mine) + " (standalone; run from the run folder)", ""]
    if len(report["findings"]) > MAX_FINDINGS_SHOWN:
        lines.append(f"... and {len(report['findings']) - MAX_FINDINGS_SHOWN} more in report.json")
    if report["not_verified"]:
        lines += ["", "## Not verified", ""]
        lines += [f"- `{n['test']}`: {n['reason']}" for n in report["not_verified"]]
    if report.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {note}" for note in report["notes"][:20]]
    accounting = report["findings_accounting"]
    lines += ["", f"Findings recorded by workers: {accounting['recorded']}, received: {accounting['received']}.", ""]
    lines += _details("Acceptance profile", report.get("acceptance", {}))
    lines += _details("Route inventory and baseline parity", {"inventories": report.get("inventories", {}),
                                                              "parity": report.get("parity", [])})
    lines += _details("Latency and memory (context, not a criterion)",
                      {"latency": report.get("latency", {}), "memory": report.get("memory", {})})
    lines += _details("Configuration (secrets removed)", report.get("config", {}))
    return "\n".join(lines) + "\n"


def _coverage_table(report: dict[str, Any]) -> list[str]:
    """The one table that says what each check could have detected on this run, and whether it is verified."""
    lines = ["## Coverage", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in report.get("coverage", []):
        cells = [str(c).replace("|", "\\|").replace("\n", " ") for c in table_cells(row)]
        lines.append("| " + " | ".join(cells) + " |")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.get("counts", {}).items()))
    return lines + ["", f"Tests: {counts or 'none'}."]


def _speculation_table(report: dict[str, Any]) -> list[str]:
    """Did speculation really run, and how well did the drafter do (per candidate)."""
    rows = report.get("speculation") or []
    if not rows:
        return []
    lines = ["", "## Speculation", "", "| candidate | speculation | mean acceptance length | acceptance by position |"
             " counter invariants |", "|---|---|---|---|---|"]
    for row in rows:
        acc = (report.get("acceptance") or {}).get(row["route"]) or {}
        rates = ", ".join(f"{r:.2f}" for r in acc.get("per_position_acceptance_rate") or []) or "n/a"
        invariants = {True: "hold", False: "BROKEN"}.get(acc.get("invariants_hold"), "n/a")
        lines.append(f"| `{row['route']}` | {row['status']} | {acc.get('mean_acceptance_length') or 'n/a'} | "
                     f"{rates} | {invariants} |")
    return lines


def _routes_line(report: dict[str, Any]) -> str:
    config = report.get("config", {})
    baseline = config.get("baseline", {})
    candidates = config.get("candidates", [])
    names = ", ".join(f"`{c.get('name')}` ({c.get('kind')})" for c in candidates)
    return f"Baseline `{baseline.get('name')}` ({baseline.get('kind')}) vs candidate(s) {names}."


def _finding_block(finding: dict[str, Any]) -> list[str]:
    # A title may quote a server's answer ("<html>...", "<details>"): escaped, it cannot open an HTML block.
    title = finding["title"].replace("<", "&lt;")
    head = f"### [{finding['severity']}] {finding['check']}: {title}"
    lines = [head, "", f"- route: `{finding['route']}`"]
    if finding.get("prompt_id"):
        lines.append(f"- prompt: `{finding['prompt_id']}`")
    lines.append(f"- test: `{finding['test_id']}`")
    diff = finding.get("details", {}).get("diff")
    if diff:
        lines += ["", "```diff", diff, "```"]
    lines += _details("Evidence", {k: v for k, v in finding.get("details", {}).items() if k != "diff"})
    return lines


def _details(title: str, data: Any) -> list[str]:
    if not data:
        return []
    return ["<details><summary>" + title + "</summary>", "", "```json",
            json.dumps(data, indent=2, sort_keys=True, default=str), "```", "", "</details>", ""]
