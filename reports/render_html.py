"""report.html: the dashboard, one self-contained file (no script, no network, charts as inline SVG).

The verdict and its gaps; the family x candidate matrix (colour and one word per cell with its "k of n instances
verified", the reason on hover and on expanding the cell; `data-family`, `data-route`, `data-status`,
`data-instances` let the self-test compare every cell with report.json's matrix); the acceptance rate by draft
position per candidate; the speed gate (speedup over the baseline by concurrency, time to first token and decode
speed, and its table); divergence positions, p-values, contamination; the finding clusters with their issue and
repro files; then the full coverage table and the configuration, folded.

Why templates: the page is reports/templates/report.html.j2, rendered by Jinja2 with autoescaping from the
report's own data (no HTML built by string concatenation, no markdown table re-parsed); only the few markdown
phrases the verdict lines and cluster frequencies carry (**bold**, `code`) go through markdown-it, which escapes
the rest. Charts come from reports/report_charts.py (matplotlib).
Environment: none.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markdown_it import MarkdownIt
from markupsafe import Markup

from spec_route_suite.reports import palette
from spec_route_suite.reports.charts import Chart
from spec_route_suite.reports.clusters import checks_of, frequency
from spec_route_suite.reports.coverage import COLUMNS, table_cells
from spec_route_suite.reports.matrix import coverage_matrix, in_family_order, shown
from spec_route_suite.reports.report_charts import acceptance_charts, other_charts, speed_charts
from spec_route_suite.reports.speed import COLUMNS as SPEED_COLUMNS, load_text, shape, speed_rows, table_rows
from spec_route_suite.reports.gaps import gap_rows
from spec_route_suite.reports.render_markdown import LEGEND, bug_count, gaps_lead
from spec_route_suite.reports.terminal import short_reason

TEMPLATES = Path(__file__).with_name("templates")


def status_class(status: str) -> str:
    """A status word as a CSS class: "not run" -> "st-not-run"."""
    return "st-" + re.sub(r"[^a-z]+", "-", status).strip("-")


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False})


def inline_markdown(text: str) -> Markup:
    """A markdown phrase (**bold**, `code`) as HTML; markdown-it escapes everything else."""
    return Markup(_markdown().renderInline(text))


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["md"] = inline_markdown
    env.filters["status_class"] = status_class
    return env


def render_html(report: dict[str, Any]) -> str:
    return environment().get_template("report.html.j2").render(**context(report))


def context(report: dict[str, Any]) -> dict[str, Any]:
    """Everything the template shows, as plain data (strings, lists, dicts) and the charts' SVG."""
    verdicts = report.get("route_verdicts") or {}
    return {
        "run_id": report["run_id"], "verdict": report["verdict"], "legend": LEGEND,
        "duration_s": report["duration_s"], "complete": report["complete"],
        "candidate_verdicts": [{"name": name, "verdict": v["verdict"], "why": short_reason(v),
                                "bugs": bug_count(report, name)} for name, v in verdicts.items()],
        "gaps_lead": gaps_lead(report), "gaps": gap_rows(verdicts),
        **_matrix(report),
        "palette": palette,
        "acceptance_charts": _figures([*acceptance_charts(report), *speed_charts(report)]),
        "speed": [{"candidate": m["candidate"], "baseline": m.get("baseline"), "shape": shape(m),
                   "load": ", ".join(load_text(r) for r in (m.get("rows") or {}).get("candidate", [])),
                   "rows": table_rows(m), "prompts": m.get("prompts"), "max_tokens": m.get("max_tokens")}
                  for m in speed_rows(report)],
        "speed_columns": SPEED_COLUMNS,
        "other_charts": _figures(other_charts(report)),
        "clusters": [{"severity": c["severity"], "checks": checks_of(c), "route": c["route"],
                      "title": c["title"][:300], "frequency": frequency(c),
                      "links": [p for p in [c.get("issue"), *(c.get("repro") or [])] if p]}
                     for c in report.get("clusters") or []],
        "coverage_columns": COLUMNS,
        "coverage_rows": [[str(cell) for cell in table_cells(row)] for row in report.get("coverage", [])],
        "config": json.dumps(report.get("config", {}), indent=2, default=str),
    }


def _figures(charts: list[Chart]) -> list[dict[str, Any]]:
    """The charts for the template, their SVG marked safe: matplotlib wrote it and escaped its own text."""
    return [{**chart.__dict__, "svg": Markup(chart.svg)} for chart in charts]


def _matrix(report: dict[str, Any]) -> dict[str, Any]:
    matrix = report.get("matrix") or coverage_matrix(report)
    names = [c.get("name") for c in report.get("config", {}).get("candidates", [])]
    missing = {"status": "not run", "why": "", "instances": ""}
    return {"candidates": names,
            "matrix": [(family, [{"route": name, "shown": shown(cells.get(name, missing)),
                                  **{"instances": "", **cells.get(name, missing)}} for name in names])
                       for family, cells in ((f, matrix[f]) for f in in_family_order(matrix))]}
