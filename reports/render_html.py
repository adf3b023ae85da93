"""report.html: the plots people would rather look at than read, in one self-contained file."""
from __future__ import annotations

import json
from collections import Counter
from html import escape
from typing import Any

from spec_route_suite.reports.coverage import COLUMNS, table_cells
from spec_route_suite.reports.svg import bar_chart, heatmap, qq_uniform

STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1000px;color:#222}
h1 .adopt{color:#1a7f37}h1 .pilot{color:#9a6700}h1 .wait{color:#bc4c00}h1 .avoid{color:#cf222e}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
.charts{display:flex;flex-wrap:wrap;gap:1rem}.chart{border:1px solid #eee;background:#fff}
pre{background:#f6f8fa;padding:8px;overflow-x:auto}.sev-bug{color:#cf222e}.sev-error{color:#bc4c00}
"""


def render_html(report: dict[str, Any]) -> str:
    verdict = report["verdict"]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Route qualification {escape(report['run_id'])}</title><style>{STYLE}</style></head><body>",
        f"<h1>Route qualification: <span class='{escape(verdict)}'>{escape(verdict.upper())}</span></h1>",
        f"<p>{escape(report['verdict_reason'])}. Run <code>{escape(report['run_id'])}</code>, "
        f"{report['duration_s']} s{'' if report['complete'] else ' — <strong>INCOMPLETE</strong>'}.</p>",
        _coverage_table(report),
        "<h2>Plots</h2><div class='charts'>",
        *_charts(report),
        "</div>",
        _findings(report),
        "<h2>Configuration (secrets removed)</h2><pre>",
        escape(json.dumps(report.get("config", {}), indent=2, default=str)),
        "</pre></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _coverage_table(report: dict[str, Any]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in table_cells(row)) + "</tr>"
                   for row in report.get("coverage", []))
    return f"<h2>Coverage</h2><table><tr>{head}</tr>{rows}</table>"


def _charts(report: dict[str, Any]) -> list[str]:
    charts = []
    for name, acc in (report.get("acceptance") or {}).items():
        per_pos = acc.get("accepted_per_pos") or []
        drafts = acc.get("drafts") or 0
        if per_pos and drafts:
            rates = [count / drafts for count in per_pos]
            charts.append(bar_chart(rates, labels=[str(i + 1) for i in range(len(rates))],
                                    title=f"{name}: acceptance rate by draft position",
                                    x_label="draft position", y_label="accepted / drafts"))
        elif acc.get("mean_acceptance_length"):
            charts.append(bar_chart([acc["mean_acceptance_length"]], labels=[name],
                                    title=f"{name}: mean acceptance length", x_label="route", y_label="tokens/step"))
    positions = [f["details"]["divergence"]["position"] for f in report["findings"]
                 if isinstance(f.get("details", {}).get("divergence"), dict)]
    positions += [m.get("position") for m in report.get("measurements", {}).get("divergence", [])
                  if m.get("position") is not None]
    if positions:
        buckets = Counter(min(p // 8, 8) for p in positions)
        labels = [f"{8 * b}-{8 * b + 7}" if b < 8 else "64+" for b in range(9)]
        charts.append(bar_chart([buckets.get(b, 0) for b in range(9)], labels=labels,
                                title="first greedy divergence position", x_label="token position", y_label="count"))
    p_values = [m["p_value"] for m in report.get("measurements", {}).get("p_value", [])
                if isinstance(m.get("p_value"), (int, float))]
    if p_values:
        charts.append(qq_uniform(p_values, title=f"p-values of {len(p_values)} statistical tests vs uniform"))
    for finding in report["findings"]:
        cells = finding.get("details", {}).get("contamination_matrix")
        if cells:
            sources = sorted({c["source"] for c in cells})
            victims = sorted({c["victim"] for c in cells})
            counts = {(c["source"], c["victim"]): c["count"] for c in cells}
            charts.append(heatmap([[counts.get((s, v), 0) for v in victims] for s in sources], rows=sources,
                                  cols=victims, title=f"{finding['route']}: cross-request contamination "
                                                      f"(row: source, column: victim)"))
    if not charts:
        charts.append("<p>No plottable data in this run.</p>")
    return charts


def _findings(report: dict[str, Any]) -> str:
    if not report["findings"]:
        return "<h2>Findings</h2><p>None.</p>"
    items = []
    for f in report["findings"]:
        diff = f.get("details", {}).get("diff")
        items.append(f"<li><span class='sev-{escape(f['severity'])}'>[{escape(f['severity'])}]</span> "
                     f"<b>{escape(f['check'])}</b>: {escape(f['title'])} <small>({escape(f['test_id'])})</small>"
                     + (f"<pre>{escape(diff)}</pre>" if diff else "") + "</li>")
    return f"<h2>Findings ({len(items)})</h2><ul>{''.join(items)}</ul>"
