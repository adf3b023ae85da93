"""summary.md is read in a minute: short, no cell over 200 characters, and every gap says how to close it (issue #41
item 1).

Why: one run's "why not ADOPT" was a 6,000-character bullet with brackets three deep, and no gap said what to do.
Checked on the default run's report (tests/data), on the five-candidate report (tests/five_candidates.py) and on a
pooled report of real failing runs (the mutation table's, when it ran), and on the code: every kind a Gap is built
with has its remedy in reports/gaps.py.
Environment: none.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from spec_route_suite.reports.compare import compare_reports
from spec_route_suite.reports.coverage import NOT_APPLICABLE, NOT_RUN, NOT_SUPPORTED, NOT_VERIFIED
from spec_route_suite.reports.gaps import CAUSES, KINDS, gap_rows, remedy
from spec_route_suite.reports.render_markdown import CELL_CHARS, LEGEND, MAX_CHARS, render_summary
from tests.five_candidates import five_candidate_report

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RUN = json.loads((ROOT / "tests" / "data" / "default_run_report.json").read_text())
DEFAULT_LIMIT, FAILING_LIMIT = 6_000, 12_000


def cells(summary: str) -> list[str]:
    return [cell.strip() for line in summary.splitlines() if line.startswith("|")
            for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def test_the_default_runs_summary_is_short_and_says_how_to_close_each_gap():
    summary = render_summary(DEFAULT_RUN)
    assert len(summary) < DEFAULT_LIMIT, len(summary)
    assert summary.startswith("# Route qualification: **PILOT**") and LEGEND in summary
    assert max(len(c) for c in cells(summary)) <= CELL_CHARS
    rows = gap_rows(DEFAULT_RUN["route_verdicts"])
    assert rows and all(row["close"] and row["why"] and len(row["why"]) <= 120 for row in rows)
    assert all("| how to close it |" in summary for _ in rows[:1])


def test_a_failing_multi_candidate_summary_stays_under_its_limit():
    report = five_candidate_report()
    summary = render_summary(report)
    assert len(summary) < FAILING_LIMIT and MAX_CHARS <= FAILING_LIMIT
    assert "**AVOID**" in summary and max(len(c) for c in cells(summary)) <= CELL_CHARS
    for name in report["route_verdicts"]:
        assert f"| `{name}` | **" in summary, name


def built_kinds() -> set[str]:
    """Every literal kind in the reports' code: `Gap(..., kind="...")` and `tagged("...", ...)` (run_report.py)."""
    kinds = set()
    for path in (ROOT / "reports").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", "")
            if name == "Gap":
                kinds |= {k.value.value for k in node.keywords if k.arg == "kind" and isinstance(k.value, ast.Constant)}
            elif name == "tagged" and node.args and isinstance(node.args[0], ast.Constant):
                kinds.add(node.args[0].value)
    return kinds


def test_every_gap_kind_the_suite_builds_has_a_remedy():
    """The coverage statuses a gap can carry, and every literal kind a Gap is built with anywhere."""
    built = {NOT_VERIFIED, NOT_SUPPORTED, NOT_RUN} | built_kinds()
    assert {"speculation not proven", "settings", "baseline findings"} <= built   # the scan sees the code
    assert NOT_APPLICABLE not in KINDS and built - set(KINDS) == set(), built - set(KINDS)


def test_the_default_runs_gaps_are_named_causes_not_the_fallback():
    for verdict in DEFAULT_RUN["route_verdicts"].values():
        for gap in verdict["gaps"]:
            why = gap.get("why") or gap["text"]
            known = gap["kind"] == NOT_RUN or any(re.search(p, why, re.IGNORECASE) for p, _ in CAUSES) \
                or gap["kind"] not in (NOT_VERIFIED, NOT_SUPPORTED)
            assert known, f"no cause for: {why[:200]}"
    assert remedy("not verified", "route 'x' serialises requests (no two share an engine step)").close == \
        "use a route that batches concurrent requests"


def test_a_limit_no_route_states_is_one_row_naming_the_option_to_declare():
    """Found on the llama.cpp DFlash preset: the same unstated limit on four candidates read as four rows (each
    reason names its route) that sent the reader to report.html; it is one row saying which option to declare."""
    def verdict(name: str) -> dict:
        why = (f"skipped: drafter's max length boundary on '{name}': no drafter's max length stated (declare "
               f"options.draft_max_len in the routes file) — 0 of 1 instances verified")
        return {"gaps": [{"kind": NOT_VERIFIED, "subject": "boundary", "why": why}]}
    rows = gap_rows({name: verdict(name) for name in ("dflash2", "eagle3")})
    assert [(r["why"], r["close"], r["candidates"]) for r in rows] == [
        ("the route does not state its drafter's max length", "declare options.draft_max_len", ["dflash2", "eagle3"])]
    assert remedy(NOT_VERIFIED, "no KV pool stated").close != "declare options.draft_max_len"


def test_a_nightly_summary_keeps_its_comparison_within_the_limit():
    """The nightly llama.cpp run (docs/runs/nightly-llama-cpp-0.3.35-0.3.36) had 15 causes and a comparison with 39
    still-failing findings: the sections were given up from the last until the text fitted, and the regression
    table a nightly job runs for went with them. Now the findings table and the comparison take their tight forms
    first: the comparison's table stays, with every candidate's row, and the summary stays under its limit."""
    runs = ROOT / "docs" / "runs" / "nightly-llama-cpp-0.3.35-0.3.36"
    then, now = (json.loads((runs / v / "report.json").read_text()) for v in ("0.3.35", "0.3.36"))
    report = {**now, "comparison": compare_reports(now, then)}
    summary = render_summary(report)
    assert len(summary) < MAX_CHARS and "## Since the previous run" in summary, summary[-2000:]
    for name in report["comparison"]["candidates"]:
        assert f"| `{name}` | llama.cpp b1-4df29be -> b1-0c1e570" in summary, name
    assert "## Findings: 15 cause(s)" in summary and "more cause(s): report.json `clusters`" in summary
