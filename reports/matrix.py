"""The family x candidate matrix: one word per cell, folded from the coverage table's rows.

Why: the coverage table has a row per (family, part, route) with what ran and why: the details. A reader first
wants the shape: which family is verified on which candidate. A cell folds the family's rows for that
candidate (and those for every route): "failed" when a test failed, "yes" when every part is verified or
not applicable ("n/a" when all are not applicable), "partly" when some are, else the rows' own status
("no" for not verified, "not run", "not supported"), with "k of n instances verified" summed over its parts
(an instance: a test planned or run for a part, per prompt, route parameter or detector). The reason is
every uncovered part with its why. The
matrix goes into report.json ("matrix"), summary.md and report.html (whose self-test checks its cells against
report.json). Environment: none.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from spec_route_suite.reports.coverage import (ANY_ROUTE, FAILED, FAMILIES, NOT_APPLICABLE, NOT_RUN, NOT_SUPPORTED,
                                               NOT_VERIFIED, VERIFIED, instances_text)

WORDS = {VERIFIED: "yes", NOT_APPLICABLE: "n/a", NOT_VERIFIED: "no", NOT_RUN: "not run", NOT_SUPPORTED: "not supported",
         FAILED: "failed", "partly": "partly"}


def _part(row: Mapping[str, str]) -> str:
    return f"{row['check']}: {row['part']}" if row.get("part") else row["check"]


def cell(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """One family on one candidate: {"status": one word, "why": the uncovered parts and their reasons,
    "instances": "k of n instances verified" over its parts}."""
    if not rows:
        return {"status": WORDS[NOT_RUN], "why": "no test of this family was planned for this candidate",
                "instances": ""}
    return {**_status(rows), "instances": _instances(rows)}


def _instances(rows: Sequence[Mapping[str, Any]]) -> str:
    """The family's instances on this candidate, over every part: the tests planned or run and how many verified."""
    total = sum(r.get("instances", 0) for r in rows)
    return instances_text(total, sum(r.get("verified_instances", 0) for r in rows),
                          sum(r.get("na_instances", 0) for r in rows)) if total else ""


def in_family_order(matrix: Mapping[str, Any]) -> list[str]:
    """The matrix's families in the suite's own order (a report read back from JSON has them sorted)."""
    return sorted(matrix, key=lambda f: FAMILIES.index(f) if f in FAMILIES else len(FAMILIES))


def shown(cell_: Mapping[str, str]) -> str:
    """A cell as the summary and the dashboard show it: its word, then "k of n instances verified"."""
    return f"{cell_['status']} ({cell_['instances']})" if cell_.get("instances") else cell_["status"]


def _status(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    statuses = [r["status"] for r in rows]
    open_rows = [r for r in rows if r["status"] not in (VERIFIED, NOT_APPLICABLE)]
    why = "; ".join(dict.fromkeys(f"{_part(r)}: {r['status']} ({r['why']})" for r in open_rows))[:1500]
    if FAILED in statuses:
        return {"status": WORDS[FAILED], "why": "a test failed: see the findings" + (f"; {why}" if why else "")}
    if not open_rows:
        every = all(s == NOT_APPLICABLE for s in statuses)
        return {"status": WORDS[NOT_APPLICABLE if every else VERIFIED],
                "why": "; ".join(dict.fromkeys(r["why"] for r in rows))[:600]}
    if len(open_rows) < len(rows):
        return {"status": WORDS["partly"], "why": f"{len(rows) - len(open_rows)} of {len(rows)} parts covered; {why}"}
    common = max(set(statuses), key=statuses.count)
    return {"status": WORDS.get(common, common), "why": why}


def coverage_matrix(report: Mapping[str, Any]) -> dict[str, dict[str, dict[str, str]]]:
    """{family: {candidate: cell}} for every family and configured candidate, from report["coverage"]."""
    candidates = [c.get("name") for c in (report.get("config") or {}).get("candidates", [])]
    rows = report.get("coverage") or []
    matrix: dict[str, dict[str, dict[str, str]]] = {}
    for family in FAMILIES:
        mine = [r for r in rows if r["check"] == family]
        matrix[family] = {name: cell([r for r in mine if r["route"] in (name, ANY_ROUTE)]) for name in candidates}
    return matrix
