"""report.html: the dashboard, one self-contained file (no script, no network, inline SVG).

The verdict and its gaps; the family x candidate matrix (colour and one word per cell with its "k of n instances
verified", the reason on hover and on expanding the cell; `data-family`, `data-route`, `data-status`,
`data-instances` let the self-test compare every cell with report.json's matrix); the acceptance rate by draft position per candidate; the speed gate (speedup over the
baseline by concurrency, time to first token and decode speed); divergence positions, p-values, contamination;
the finding clusters with their issue and repro files; then the full coverage table and the configuration,
folded.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from html import escape
from typing import Any

from spec_route_suite.reports.clusters import checks_of, frequency
from spec_route_suite.reports.coverage import COLUMNS, table_cells
from spec_route_suite.reports.matrix import coverage_matrix, shown
from spec_route_suite.reports.speed import shape, speed_rows
from spec_route_suite.reports.svg import bar_chart, heatmap, line_chart, qq_uniform
from spec_route_suite.reports.verdict_lines import GAPS_LEAD, candidate_rows, gap_lines, headline_reason

STATUS_COLOURS = {"yes": "#2da44e", "n/a": "#8c959f", "partly": "#d4a72c", "no": "#fb8f44", "not supported": "#bf8700",
                  "not run": "#d0d7de", "failed": "#cf222e"}
STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1 .adopt{color:#1a7f37}h1 .pilot{color:#9a6700}h1 .wait{color:#bc4c00}h1 .avoid{color:#cf222e}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
.charts{display:flex;flex-wrap:wrap;gap:1rem}.chart{border:1px solid #eee;background:#fff}
pre{background:#f6f8fa;padding:8px;overflow-x:auto}.sev-bug{color:#cf222e}.sev-error{color:#bc4c00}
#matrix td.cell{color:#fff;font-weight:600;min-width:7rem}#matrix td.cell details{font-weight:400}
#matrix td.cell summary{cursor:pointer}#matrix td.cell .why{font-size:.8rem;max-width:22rem;white-space:normal}
.st-not-run,.st-n-a{color:#222 !important}
"""


def _inline(text: str) -> str:
    """The summary's markdown bits (**bold**, `code`) as HTML, the rest escaped."""
    html = escape(text)
    html = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html)


def render_html(report: dict[str, Any]) -> str:
    verdict = report["verdict"]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Route qualification {escape(report['run_id'])}</title><style>{STYLE}</style></head><body>",
        f"<h1>Route qualification: <span class='{escape(verdict)}'>{escape(verdict.upper())}</span></h1>",
        f"<p>{escape(headline_reason(report))}. Run <code>{escape(report['run_id'])}</code>, "
        f"{report['duration_s']} s{'' if report['complete'] else ' — <strong>INCOMPLETE</strong>'}.</p>",
        _verdicts(report),
        _matrix(report),
        "<h2>Acceptance and speed</h2><div class='charts'>", *_speed_charts(report), "</div>",
        _speed_lines(report),
        "<h2>Other plots</h2><div class='charts'>", *_charts(report), "</div>",
        _clusters(report),
        _coverage_table(report),
        "<details><summary>Configuration (secrets removed)</summary><pre>",
        escape(json.dumps(report.get("config", {}), indent=2, default=str)),
        "</pre></details></body></html>",
    ]
    return "\n".join(p for p in parts if p)


def _verdicts(report: dict[str, Any]) -> str:
    rows = [r for r in candidate_rows(report) if r.startswith("| `")]
    table = "".join("<tr>" + "".join(f"<td>{_inline(c.strip())}</td>" for c in r.strip("|").split(" | ")) + "</tr>"
                    for r in rows)
    gaps = "".join(f"<li>{_inline(line[2:])}</li>" for line in gap_lines(report))
    return ((f"<table><tr><th>candidate</th><th>verdict</th><th>why</th></tr>{table}</table>" if table else "")
            + (f"<p>{escape(GAPS_LEAD[report['verdict'] == 'pilot'])}</p><ul>{gaps}</ul>" if gaps else ""))


def _matrix(report: dict[str, Any]) -> str:
    matrix = report.get("matrix") or coverage_matrix(report)
    names = [c.get("name") for c in report.get("config", {}).get("candidates", [])]
    head = "<tr><th>family</th>" + "".join(f"<th>{escape(n)}</th>" for n in names) + "</tr>"
    rows = []
    for family, cells in matrix.items():
        tds = []
        for name in names:
            cell = cells.get(name, {"status": "not run", "why": ""})
            status, why = cell["status"], cell["why"]
            css = "st-" + re.sub(r"[^a-z]+", "-", status).strip("-")
            tds.append(f"<td class='cell {css}' style='background:{STATUS_COLOURS.get(status, '#999')}' "
                       f"data-family='{escape(family)}' data-route='{escape(name)}' data-status='{escape(status)}' "
                       f"data-instances='{escape(cell.get('instances', ''))}' "
                       f"title='{escape(why)}'><details><summary>{escape(shown(cell))}</summary>"
                       f"<div class='why'>{escape(why)}</div></details></td>")
        rows.append(f"<tr><th>{escape(family)}</th>{''.join(tds)}</tr>")
    return (f"<h2>Coverage by family</h2><table id='matrix'>{head}{''.join(rows)}</table>"
            f"<p><small>yes: every part verified (every instance planned for it, per prompt, route parameter or "
            f"detector, ran with evidence); partly: some; no: not verified. Hover or open a cell for the reason; "
            f"the full table is below.</small></p>")


def _speed_charts(report: dict[str, Any]) -> list[str]:
    charts = []
    curves = {name: list(enumerate(acc.get("per_position_acceptance_rate") or [], start=1))
              for name, acc in (report.get("acceptance") or {}).items() if acc.get("per_position_acceptance_rate")}
    if curves:
        charts.append(line_chart(curves, title="acceptance rate by draft position", x_label="draft position",
                                 y_label="accepted / drafts"))
    for name, acc in (report.get("acceptance") or {}).items():
        if not acc.get("per_position_acceptance_rate") and acc.get("mean_acceptance_length"):
            charts.append(bar_chart([acc["mean_acceptance_length"]], labels=[name], x_label="route",
                                    title=f"{name}: mean acceptance length", y_label="tokens/step"))
    measurements = speed_rows(report)
    if measurements:
        levels = sorted({u["concurrency"] for m in measurements for u in m.get("speedup", [])})
        charts.append(line_chart({m["candidate"]: [(u["concurrency"], u.get("throughput_x"))
                                                   for u in m.get("speedup", [])] for m in measurements},
                                 title="speed gate: throughput speedup over the baseline", x_label="concurrency",
                                 y_label="candidate / baseline", x_ticks=levels, reference=1.0))
        for key, label in (("ttft_p50_s", "time to first token p50 (s)"), ("decode_tok_s", "decode tokens/s")):
            series = {f"{m['candidate']}": [(r["concurrency"], r.get(key)) for r in m["rows"]["candidate"]]
                      for m in measurements}
            series[f"baseline {measurements[0].get('baseline')}"] = [(r["concurrency"], r.get(key))
                                                                     for r in measurements[0]["rows"]["baseline"]]
            charts.append(line_chart(series, title=f"speed gate: {label}", x_label="concurrency", y_label=label,
                                     x_ticks=levels))
    return [c for c in charts if c] or ["<p>No acceptance counters or speed measurements in this run.</p>"]


def _speed_lines(report: dict[str, Any]) -> str:
    items = "".join(f"<li><code>{escape(m['candidate'])}</code>: {escape(shape(m))}; machine load average "
                    f"{escape(', '.join(str(r.get('load_avg_1m')) for r in m['rows']['candidate']))}</li>"
                    for m in speed_rows(report))
    return f"<p>Speed gate (measured, not judged):</p><ul>{items}</ul>" if items else ""


def _charts(report: dict[str, Any]) -> list[str]:
    charts = []
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
    return charts or ["<p>No divergences, p-values or contamination in this run.</p>"]


def _clusters(report: dict[str, Any]) -> str:
    clusters = report.get("clusters") or []
    if not clusters:
        return "<h2>Findings</h2><p>None (no bug, error, near-tie or warning).</p>"
    items = []
    for c in clusters:
        links = " ".join(f"<a href='{escape(p)}'>{escape(p)}</a>" for p in [c.get("issue"), *(c.get("repro") or [])]
                         if p)
        items.append(f"<li><span class='sev-{escape(c['severity'])}'>[{escape(c['severity'])}]</span> "
                     f"<b>{escape(checks_of(c))}</b> on <code>{escape(c['route'])}</code>: {escape(c['title'][:300])} "
                     f"<small>({escape(frequency(c))})</small><br>{links}</li>")
    return f"<h2>Findings: {len(clusters)} cause(s)</h2><ul>{''.join(items)}</ul>"


def _coverage_table(report: dict[str, Any]) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in table_cells(row)) + "</tr>"
                   for row in report.get("coverage", []))
    return f"<details><summary>Coverage, part by part</summary><table><tr>{head}</tr>{rows}</table></details>"
