"""Tiny inline-SVG charts for report.html (no plotting dependency, renders anywhere)."""
from __future__ import annotations

from html import escape
from typing import Sequence

WIDTH, HEIGHT, PAD = 420, 240, 36


def _frame(body: str, title: str, x_label: str, y_label: str) -> str:
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
            f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
            f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - 8}" y2="{HEIGHT - PAD}" stroke="#444"/>'
            f'<line x1="{PAD}" y1="8" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>'
            f'<text x="{WIDTH / 2}" y="{HEIGHT - 6}" text-anchor="middle" font-size="11">{escape(x_label)}</text>'
            f'<text x="10" y="{HEIGHT / 2}" font-size="11" transform="rotate(-90 10 {HEIGHT / 2})" '
            f'text-anchor="middle">{escape(y_label)}</text>{body}</svg>')


def bar_chart(values: Sequence[float], *, labels: Sequence[str], title: str, x_label: str, y_label: str) -> str:
    if not values:
        return ""
    top = max(max(values), 1e-9)
    inner_w, inner_h = WIDTH - PAD - 12, HEIGHT - 2 * PAD
    step = inner_w / len(values)
    bars = []
    for i, (value, label) in enumerate(zip(values, labels)):
        h = inner_h * value / top
        x = PAD + 4 + i * step
        bars.append(f'<rect x="{x:.1f}" y="{HEIGHT - PAD - h:.1f}" width="{max(step - 6, 2):.1f}" height="{h:.1f}" '
                    f'fill="#4c72b0"><title>{escape(label)}: {value:g}</title></rect>'
                    f'<text x="{x + step / 2 - 3:.1f}" y="{HEIGHT - PAD + 13}" font-size="10" '
                    f'text-anchor="middle">{escape(label)}</text>')
    bars.append(f'<text x="{PAD - 4}" y="14" font-size="10" text-anchor="end">{top:g}</text>')
    return _frame("".join(bars), title, x_label, y_label)


def qq_uniform(p_values: Sequence[float], *, title: str) -> str:
    """Observed p-values against Uniform(0,1) quantiles: a correct route hugs the diagonal."""
    if not p_values:
        return ""
    ordered = sorted(p_values)
    n = len(ordered)
    inner_w, inner_h = WIDTH - PAD - 12, HEIGHT - 2 * PAD
    points = []
    for i, p in enumerate(ordered):
        expected = (i + 0.5) / n
        points.append(f'<circle cx="{PAD + expected * inner_w:.1f}" cy="{HEIGHT - PAD - p * inner_h:.1f}" r="2.5" '
                      f'fill="#dd8452"><title>p={p:.4g}</title></circle>')
    diagonal = (f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{PAD + inner_w}" y2="{HEIGHT - PAD - inner_h}" '
                f'stroke="#999" stroke-dasharray="4 3"/>')
    return _frame(diagonal + "".join(points), title, "uniform quantile", "observed p-value")


def heatmap(matrix: Sequence[Sequence[int]], *, rows: Sequence[str], cols: Sequence[str], title: str) -> str:
    """Contamination matrix: row = source request, column = victim request."""
    if not matrix:
        return ""
    top = max((v for row in matrix for v in row), default=0) or 1
    cell = min(24, (WIDTH - 120) / max(len(cols), 1))
    height = 40 + cell * len(rows) + 60
    cells = []
    for r, row in enumerate(matrix):
        cells.append(f'<text x="96" y="{40 + r * cell + cell * 0.7:.1f}" font-size="9" text-anchor="end">'
                     f'{escape(rows[r][:14])}</text>')
        for c, value in enumerate(row):
            shade = int(255 - 200 * value / top)
            cells.append(f'<rect x="{100 + c * cell:.1f}" y="{40 + r * cell:.1f}" width="{cell - 1:.1f}" '
                         f'height="{cell - 1:.1f}" fill="rgb(255,{shade},{shade})"><title>{escape(rows[r])} -&gt; '
                         f'{escape(cols[c])}: {value}</title></rect>')
    for c, name in enumerate(cols):
        x = 100 + c * cell + cell / 2
        y = 40 + cell * len(rows) + 8
        cells.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="9" transform="rotate(60 {x:.1f} {y:.1f})">'
                     f'{escape(name[:14])}</text>')
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {height:.0f}" width="{WIDTH}" height="{height:.0f}" '
            f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
            f'<text x="100" y="20" font-size="11">source (row) leaked into victim (column)</text>{"".join(cells)}</svg>')


PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def line_chart(series: dict[str, Sequence[tuple[float, float]]], *, title: str, x_label: str, y_label: str,
               x_ticks: Sequence[float] | None = None, reference: float | None = None) -> str:
    """One polyline per named series (a legend at the top), points evenly spaced over `x_ticks` when given (so
    concurrency 1, 8, 32 sit apart); `reference` draws a dashed horizontal line (1.0: no speedup)."""
    points = [p for values in series.values() for p in values if p[1] is not None]
    if not points:
        return ""
    ticks = list(x_ticks) if x_ticks else sorted({p[0] for p in points})
    top = max([p[1] for p in points] + ([reference] if reference is not None else [])) * 1.1 or 1.0
    inner_w, inner_h = WIDTH - PAD - 16, HEIGHT - 2 * PAD - 14
    def x_of(x: float) -> float:
        index = ticks.index(x) if x in ticks else 0
        return PAD + 8 + (inner_w - 16) * (index / max(len(ticks) - 1, 1))
    def y_of(y: float) -> float:
        return HEIGHT - PAD - inner_h * y / top
    body = [f'<text x="{x_of(t):.1f}" y="{HEIGHT - PAD + 13}" font-size="10" text-anchor="middle">{t:g}</text>'
            for t in ticks]
    body.append(f'<text x="{PAD - 4}" y="{HEIGHT - PAD - inner_h + 4:.1f}" font-size="10" text-anchor="end">'
                f'{top:.3g}</text>')
    if reference is not None:
        body.append(f'<line x1="{PAD}" y1="{y_of(reference):.1f}" x2="{WIDTH - 8}" y2="{y_of(reference):.1f}" '
                    f'stroke="#999" stroke-dasharray="4 3"/>')
    for n, (name, values) in enumerate(series.items()):
        colour = PALETTE[n % len(PALETTE)]
        kept = [(x, y) for x, y in values if y is not None]
        coords = " ".join(f"{x_of(x):.1f},{y_of(y):.1f}" for x, y in kept)
        body.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        body += [f'<circle cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" r="3" fill="{colour}"><title>{escape(name)}: '
                 f'{x:g} -&gt; {y:.4g}</title></circle>' for x, y in kept]
        body.append(f'<text x="{PAD + 8 + 120 * n}" y="22" font-size="10" fill="{colour}">{escape(name[:22])}</text>')
    return _frame("".join(body), title, x_label, y_label)
