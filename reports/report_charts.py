"""Which charts a report gets, drawn from report.json's data (reports/charts.py draws them).

Acceptance and speed: the acceptance rate by draft position per candidate (or the mean acceptance length of the
candidates whose counters have no positions), the speed gate's throughput speedup by concurrency, and its time to
first token and decode speed by concurrency with the baseline as a grey band. Other plots: where greedy answers
first diverged, the distribution of the statistical tests' p-values, and each cross-request contamination matrix.
Units come from reports/speed.py, as in summary.md (latency in ms).
Environment: none.
"""
from __future__ import annotations

import re
from collections import Counter
from statistics import median
from typing import Any

from spec_route_suite.reports.charts import Band, Chart, bar_chart, heatmap, line_chart
from spec_route_suite.reports.speed import CHARTED, THROUGHPUT_SPEEDUP, speed_rows

P_BINS = ((0.001, "< 0.001"), (0.01, "0.001–0.01"), (0.05, "0.01–0.05"), (0.5, "0.05–0.5"), (1.0, "0.5–1"))
P_AT_ONE = "exactly 1"
ALPHA = 0.05
STATISTICS_SHOWN = 6
CONTAMINATION_SHOWN = 40


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def candidate_order(report: dict[str, Any]) -> list[str]:
    """The candidates as the report lists them: each keeps its colour and marker from chart to chart."""
    return list(report.get("route_verdicts") or {}) or list(report.get("acceptance") or {})


def acceptance_charts(report: dict[str, Any]) -> list[Chart]:
    acceptance = report.get("acceptance") or {}
    curves = {name: list(enumerate(acc["per_position_acceptance_rate"], start=1))
              for name, acc in acceptance.items() if acc.get("per_position_acceptance_rate")}
    lengths = {name: acc["mean_acceptance_length"] for name, acc in acceptance.items()
               if not acc.get("per_position_acceptance_rate") and acc.get("mean_acceptance_length")}
    charts = [line_chart(curves, slug="acceptance-by-position", title="acceptance rate by draft position",
                         order=candidate_order(report),
                         x_label="draft position", y_label="accepted / drafted at this position", y_range=(0, 1.05),
                         note="From each route's own counters over the whole run: the share of drafts whose token at "
                              "this position was accepted.") if curves else None,
              bar_chart(list(lengths), {"mean acceptance length": list(lengths.values())},
                        slug="mean-acceptance-length", title="mean acceptance length (counters without positions)",
                        x_label="candidate", y_label="tokens per verification step") if lengths else None]
    return [c for c in charts if c]


def _baseline_band(measurements: list[dict[str, Any]], key: str, name: str) -> Band | None:
    """The baseline's value at each level over the runs measured beside each candidate: median and range."""
    quantity = CHARTED[key]
    by_level: dict[float, list[float]] = {}
    for m in measurements:
        for row in (m.get("rows") or {}).get("baseline", []):
            value = quantity.shown(row.get(key))
            if value is not None:
                by_level.setdefault(row["concurrency"], []).append(value)
    if not by_level:
        return None
    runs = max(len(v) for v in by_level.values())
    label = f"baseline {name}" if name != "baseline" else "baseline"
    label += f" (median, band: range of {runs} runs)" if runs > 1 else ""
    return Band(label, [(level, min(v), median(v), max(v)) for level, v in sorted(by_level.items())])


def speed_charts(report: dict[str, Any]) -> list[Chart]:
    measurements = speed_rows(report)
    if not measurements:
        return []
    levels = sorted({u["concurrency"] for m in measurements for u in m.get("speedup", [])})
    charts = [line_chart({m["candidate"]: [(u["concurrency"], u.get("throughput_x")) for u in m.get("speedup", [])]
                          for m in measurements}, slug="speed-throughput-speedup",
                         title=f"speed gate: {THROUGHPUT_SPEEDUP.label}", x_label="concurrency (requests in flight)",
                         y_label=f"candidate / baseline ({THROUGHPUT_SPEEDUP.unit})", levels=levels,
                         reference=(1.0, "1x: as fast as the baseline"), order=candidate_order(report),
                         note="Output tokens per second of the whole level, candidate over baseline; above the "
                              "dashed line the candidate is faster.")]
    baseline = str(measurements[0].get("baseline") or "baseline")
    for key, quantity in CHARTED.items():
        charts.append(line_chart({m["candidate"]: [(r["concurrency"], quantity.shown(r.get(key)))
                                                   for r in (m.get("rows") or {}).get("candidate", [])]
                                  for m in measurements}, slug=f"speed-{_slug(key)}",
                                 title=f"speed gate: {quantity.label}", x_label="concurrency (requests in flight)",
                                 y_label=f"{quantity.label} ({quantity.unit})", levels=levels,
                                 band=_baseline_band(measurements, key, baseline), order=candidate_order(report)))
    return [c for c in charts if c]


def _divergence_chart(report: dict[str, Any]) -> Chart | None:
    positions = [f["details"]["divergence"]["position"] for f in report.get("findings") or []
                 if isinstance((f.get("details") or {}).get("divergence"), dict)]
    positions += [m.get("position") for m in (report.get("measurements") or {}).get("divergence", [])
                  if m.get("position") is not None]
    if not positions:
        return None
    buckets = Counter(min(p // 8, 8) for p in positions)
    labels = [f"{8 * b}-{8 * b + 7}" if b < 8 else "64+" for b in range(9)]
    return bar_chart(labels, {"answers": [buckets.get(b, 0) for b in range(9)]}, slug="divergence-positions",
                     title="first greedy divergence position", x_label="token position of the first difference",
                     y_label="answers", integer=True)


def p_value_chart(report: dict[str, Any]) -> Chart | None:
    """The statistical tests' p-values as counts in bins, p = 1 as a bar of its own, stacked by statistic.

    Why not a QQ plot against Uniform(0, 1): the recorded p-values are not uniform on a correct route. The
    distribution check reports each family's sequential p-value after Holm's adjustment: a family whose screening
    look saw nothing suspicious has no eligible look and reports exactly 1, and the adjustment multiplies the rest
    up and caps them at 1; its tests are also discrete (token counts), which puts mass at 1 of its own. So 39 of 40
    points sat at 1 and the QQ plot said nothing. What every valid p-value (adjusted, sequential or discrete) does
    promise is P(p <= t) <= t on a correct route; so the chart shows how many fell below 0.05 against at most 5%
    expected by chance (the note), the point mass at 1 honestly as its own bar, and which statistic each came from.
    """
    values = [(str(m.get("name", "")).rsplit("/", 1)[-1] or "test", float(m["p_value"]))
              for m in (report.get("measurements") or {}).get("p_value", [])
              if isinstance(m.get("p_value"), (int, float))]
    if not values:
        return None
    common = [name for name, _ in Counter(name for name, _ in values).most_common(STATISTICS_SHOWN)]
    categories = [label for _, label in P_BINS] + [P_AT_ONE]

    def bin_of(p: float) -> int:
        return len(P_BINS) if p >= 1.0 else next(i for i, (upper, _) in enumerate(P_BINS) if p < upper)
    series: dict[str, list[int]] = {}
    for name, p in values:
        shown = name if name in common else "other"
        series.setdefault(shown, [0] * len(categories))[bin_of(p)] += 1
    below = sum(p < ALPHA for _, p in values)
    at_one = sum(p >= 1.0 for _, p in values)
    note = (f"{below} of {len(values)} below {ALPHA:g}: on a correct route a valid p-value falls there at most "
            f"{ALPHA:.0%} of the time ({ALPHA * len(values):.1f} of {len(values)}). {at_one} are exactly 1: a "
            f"distribution family whose screening look saw nothing reports 1, Holm's adjustment caps the others at 1 "
            f"and discrete tests put mass there too, so the bar at 1 is expected on a correct route, not a defect.")
    return bar_chart(categories, series, slug="p-values", title=f"p-values of {len(values)} statistical tests",
                     x_label="p-value", y_label="tests", integer=True,
                     marked=(0, [upper for upper, _ in P_BINS].index(ALPHA), f"below {ALPHA:g}"), note=note)


def _contamination_charts(report: dict[str, Any]) -> list[Chart]:
    charts = []
    for n, finding in enumerate(report.get("findings") or []):
        cells = (finding.get("details") or {}).get("contamination_matrix")
        if not cells:
            continue
        involved = Counter()
        for c in cells:
            involved[c["source"]] += c["count"]
            involved[c["victim"]] += c["count"]
        kept = {name for name, _ in involved.most_common(CONTAMINATION_SHOWN)}
        sources = sorted({c["source"] for c in cells} & kept)
        victims = sorted({c["victim"] for c in cells} & kept)
        counts = {(c["source"], c["victim"]): c["count"] for c in cells}
        hidden = len(involved) - len(kept)
        charts.append(heatmap([[counts.get((s, v), 0) for v in victims] for s in sources], rows=sources,
                              columns=victims, slug=f"contamination-{n}",
                              title=f"{finding['route']}: cross-request contamination",
                              x_label="victim request (answered with the source's context)",
                              y_label="source request", unit="contaminated answers",
                              note="Row: the request whose context leaked; column: the request that answered with "
                                   "it." + (f" {hidden} more requests not shown." if hidden else "")))
    return [c for c in charts if c]


def other_charts(report: dict[str, Any]) -> list[Chart]:
    return [c for c in (_divergence_chart(report), p_value_chart(report)) if c] + _contamination_charts(report)
