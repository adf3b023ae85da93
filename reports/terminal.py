"""The verdict on the terminal: the block a person reads in five seconds at the end of every run.

Why: the run folder holds everything, but a person at a terminal (and a CI log) needs the answer where the run
ends: per candidate its verdict word, one short reason, how many correctness findings and their top causes, and
where summary.md and the issue files are. Built from report.json's own fields, so it never says anything the
summary does not. Environment: none.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from spec_route_suite.reports.run_report import VERDICT_ORDER

REASON_CHARS = 110
TOP_CAUSES = 3
MEANING = {"adopt": "promote it", "pilot": "nothing failed, but not everything could be verified",
           "wait": "investigate before promoting", "avoid": "a correctness bug: do not promote"}


def verdict_block(report: Mapping[str, Any], run_dir: Path) -> list[str]:
    """The closing lines: a headline, one line per candidate (and its top causes), then the paths."""
    verdicts = report.get("route_verdicts") or {}
    width = max((len(name) for name in verdicts), default=9)
    lines = [f"{report['verdict'].upper()}: {MEANING[report['verdict']]}"
             + ("" if report.get("complete", True) else " (the run did not complete: its results are partial)")]
    for name, verdict in verdicts.items():
        mine = [c for c in report.get("clusters") or [] if c.get("route") == name]
        bugs = [c for c in mine if c.get("severity") == "bug"]
        count = sum(c.get("count", 1) for c in bugs)
        found = f"  [{count} bug finding(s), {len(bugs)} cause(s)]" if bugs else ""
        lines.append(f"  {verdict['verdict'].upper():<5}  {name:<{width}}  {short_reason(verdict)}{found}")
        causes = bugs or ([c for c in mine if c.get("severity") == "error"] if verdict["verdict"] == "wait" else [])
        for cluster in sorted(causes, key=lambda c: -c.get("count", 1))[:TOP_CAUSES]:
            lines.append(f"         {'':<{width}}  - {_cut(cluster.get('title', ''), REASON_CHARS - 10)}"
                         f" ({cluster.get('count', 1)}x)")
    issues = [p for p in report.get("issue_files") or []]
    lines.append(f"summary: {run_dir / 'summary.md'}")
    lines.append(f"issues:  {run_dir / 'issues'} ({len(issues)} file(s), one per cause, ready to file upstream)"
                 if issues else "issues:  none (no candidate finding that the baseline does not show)")
    return lines


def short_reason(verdict: Mapping[str, Any]) -> str:
    """One line: what the verdict rests on; a pilot's gaps by kind, each with the families it covers."""
    word, reason, gaps = verdict["verdict"], str(verdict.get("reason", "")), verdict.get("gaps") or []
    if word == "pilot" and gaps:
        return _cut("; ".join(f"{kind} ({_few(families)})" if families else kind
                              for kind, families in gap_families(gaps).items()), REASON_CHARS)
    return _cut(reason.split("; ")[0], REASON_CHARS)


def _few(names: list[str], shown: int = 4) -> str:
    return ", ".join(names[:shown]) + (f" +{len(names) - shown}" if len(names) > shown else "")


def gap_families(gaps) -> dict[str, list[str]]:
    """Gap kind -> the check families its gaps name (a subject is "family" or "family: part", several joined by
    ", "), in first-seen order."""
    kinds: dict[str, list[str]] = {}
    for gap in gaps:
        families = kinds.setdefault(gap.get("kind") or "gap", [])
        for subject in str(gap.get("subject") or "").split(", "):
            family = subject.partition(": ")[0].strip()
            if family and family not in families:
                families.append(family)
    return kinds


def _cut(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def require_shortfall(report: Mapping[str, Any], required: str) -> list[str]:
    """The candidates whose verdict is below `required` (--require), each with what kept it there:
    "'name' is PILOT: not run (near-tie, seeds); prompt set"."""
    bar = VERDICT_ORDER.index(required)
    return [f"'{name}' is {v['verdict'].upper()}: {short_reason(v)}"
            for name, v in (report.get("route_verdicts") or {}).items() if VERDICT_ORDER.index(v["verdict"]) > bar]
