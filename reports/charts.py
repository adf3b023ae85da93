"""Charts for report.html, drawn by matplotlib and embedded as inline SVG (no script, no network).

Why matplotlib: axes with ticks and units, visible titles and legends that fit five or more series come with it,
where the hand-drawn SVG had one y tick, its title only as hover text and a legend clipped past three series.
The SVG keeps its text as <text> elements (svg.fonttype "none"), so titles, ticks and legend entries are in the
page's DOM, searchable and checked by the browser self-test; every element id of a chart is prefixed with the
chart's slug, so several charts in one page never share a clip path. The figures are matplotlib's object API
(no pyplot): no global figure registry, nothing left open between reports.
Environment: none.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from io import StringIO
from typing import Mapping, Sequence

import matplotlib
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from spec_route_suite.reports.contrast import readable_text

STYLE = {"svg.fonttype": "none", "svg.hashsalt": "spec-route-suite", "font.family": "DejaVu Sans",
         "font.size": 9.5, "axes.titlesize": 11, "axes.titleweight": "bold", "axes.titlelocation": "left",
         "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "axes.axisbelow": True,
         "grid.color": "#e1e4e8", "grid.linewidth": 0.8, "text.color": "#1f2328", "axes.labelcolor": "#1f2328",
         "xtick.color": "#1f2328", "ytick.color": "#1f2328", "legend.frameon": False}
# Okabe and Ito's colour-blind-safe palette (its pale yellow left out: too faint on white), with a marker and a
# dash pattern per series, so six or more series stay apart in grey print too
SERIES_COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":")
BASELINE_COLOUR = "#6e7781"
WIDTH_IN, HEIGHT_IN, LEGEND_ROW_IN = 5.6, 3.3, 0.24
TITLE_CHARS = 58


@dataclass(frozen=True)
class Chart:
    """One chart of the page: its <svg> and what the template and the self-test need to know about it."""
    slug: str       # the figure's id in the page
    title: str
    kind: str       # "line", "bars" or "heatmap": bars and lines carry values on the y axis, a heatmap does not
    svg: str
    note: str = ""  # how to read it, under the chart


@dataclass(frozen=True)
class Band:
    """A grey reference series drawn as a middle line over a low-high band (e.g. the baseline measured once
    beside each candidate: the median of those runs and their range)."""
    label: str
    points: Sequence[tuple[float, float, float, float]]   # (x, low, middle, high)


def _figure(height: float = HEIGHT_IN) -> Figure:
    return Figure(figsize=(WIDTH_IN, height), layout="constrained")


def _title(axes, title: str) -> None:
    axes.set_title(textwrap.fill(title, TITLE_CHARS), gid="chart-title")


def _legend(figure: Figure, axes) -> None:
    """Below the axes, outside them, two columns (one when a name is long), the figure taller by its rows: every
    entry fits the chart and the axes keep their height."""
    handles, labels = axes.get_legend_handles_labels()
    if len(labels) > 1:
        columns = 1 if max(len(label) for label in labels) > 34 else 2
        figure.set_figheight(figure.get_figheight() + LEGEND_ROW_IN * -(-len(labels) // columns))
        figure.legend(handles, labels, loc="outside lower center", ncols=columns)


def _svg(figure: Figure, slug: str) -> str:
    buffer = StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    return _prefixed_ids(text[text.index("<svg"):], slug)


def _prefixed_ids(svg: str, prefix: str) -> str:
    """Every id (and every reference to one: url(#id), href="#id") prefixed, so ids stay unique in the page."""
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    return re.sub(r'(\bid="|url\(#|href="#)([^")]+)',
                  lambda m: m.group(1) + (f"{prefix}-{m.group(2)}" if m.group(2) in ids else m.group(2)), svg)


def _value_axis(axes, top: float, *, integer: bool = False) -> None:
    """The y axis from 0 with room above the highest value, at least four ticks (counts: whole numbers)."""
    axes.set_ylim(0, max(top * 1.15, 3) if integer else (top * 1.15 or 1.0))
    axes.yaxis.set_major_locator(MaxNLocator(nbins=6, min_n_ticks=4, integer=integer))


def line_chart(series: Mapping[str, Sequence[tuple[float, float | None]]], *, slug: str, title: str,
               x_label: str, y_label: str, levels: Sequence[float] | None = None, y_range: tuple[float, float] | None = None,
               reference: tuple[float, str] | None = None, band: Band | None = None, note: str = "",
               order: Sequence[str] = ()) -> Chart | None:
    """One line per named series. `levels`: a log2 x axis ticked at exactly these values (concurrency 1, 8, 32);
    otherwise integer x ticks (draft positions). `reference`: a dashed horizontal line and its legend label.
    `order`: every name the page charts, so a series has one colour and marker in every chart of the page."""
    kept = {name: [(x, y) for x, y in points if y is not None] for name, points in series.items()}
    kept = {name: points for name, points in kept.items() if points}
    if not kept:
        return None
    with matplotlib.rc_context(STYLE):
        figure = _figure()
        axes = figure.add_subplot()
        if band is not None:
            xs = [p[0] for p in band.points]
            axes.fill_between(xs, [p[1] for p in band.points], [p[3] for p in band.points], color=BASELINE_COLOUR,
                              alpha=0.18, linewidth=0)
            axes.plot(xs, [p[2] for p in band.points], color=BASELINE_COLOUR, linewidth=2.2, label=band.label)
        for name, points in sorted(kept.items(), key=lambda item: _style_index(item[0], order, list(kept))):
            n = _style_index(name, order, list(kept))
            axes.plot([x for x, _ in points], [y for _, y in points], label=name,
                      color=SERIES_COLOURS[n % len(SERIES_COLOURS)], marker=MARKERS[n % len(MARKERS)],
                      linestyle=DASHES[(n // len(SERIES_COLOURS)) % len(DASHES)], linewidth=1.8, markersize=5)
        if reference is not None:
            axes.axhline(reference[0], color="#57606a", linestyle=(0, (4, 3)), linewidth=1, label=reference[1])
        if levels:
            axes.set_xscale("log", base=2)
            axes.set_xticks(list(levels), [f"{level:g}" for level in levels])
            axes.minorticks_off()
        else:
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        values = [y for points in kept.values() for _, y in points] + [p[3] for p in (band.points if band else [])]
        if y_range is not None:
            axes.set_ylim(*y_range)
            axes.yaxis.set_major_locator(MaxNLocator(nbins=6, min_n_ticks=4))
        else:
            _value_axis(axes, max(values + [reference[0] if reference else 0]))
        axes.set_xlabel(x_label)
        axes.set_ylabel(y_label)
        _title(axes, title)
        _legend(figure, axes)
        return Chart(slug, title, "line", _svg(figure, slug), note)


def _style_index(name: str, order: Sequence[str], names: Sequence[str]) -> int:
    return list(order).index(name) if name in order else len(order) + list(names).index(name)


def bar_chart(categories: Sequence[str], series: Mapping[str, Sequence[float]], *, slug: str, title: str,
              x_label: str, y_label: str, integer: bool = False, marked: tuple[int, int, str] | None = None,
              note: str = "") -> Chart | None:
    """Bars per category, stacked when there are several series (with a legend); each stack's total above it.
    `marked`: (first, last category, label): a shaded span behind those bars, in the legend."""
    if not categories or not series:
        return None
    with matplotlib.rc_context(STYLE):
        figure = _figure()
        axes = figure.add_subplot()
        positions = range(len(categories))
        bottoms = [0.0] * len(categories)
        if marked is not None:
            axes.axvspan(marked[0] - 0.5, marked[1] + 0.5, color="#ffebe9", label=marked[2], zorder=0)
        for n, (name, values) in enumerate(series.items()):
            axes.bar(positions, values, bottom=bottoms, color=SERIES_COLOURS[n % len(SERIES_COLOURS)], label=name,
                     width=0.7)
            bottoms = [b + v for b, v in zip(bottoms, values)]
        for x, total in zip(positions, bottoms):
            axes.annotate(f"{total:g}" if integer else f"{total:.2f}", (x, total), textcoords="offset points",
                          xytext=(0, 2), ha="center", va="bottom", fontsize=8.5)
        axes.set_xticks(list(positions), list(categories), rotation=30 if max(map(len, categories)) > 8 else 0,
                        ha="right" if max(map(len, categories)) > 8 else "center")
        axes.grid(axis="x", visible=False)
        _value_axis(axes, max(bottoms), integer=integer)
        axes.set_xlabel(x_label)
        axes.set_ylabel(y_label)
        _title(axes, title)
        _legend(figure, axes)
        return Chart(slug, title, "bars", _svg(figure, slug), note)


def _short(name: str, chars: int = 24) -> str:
    return name if len(name) <= chars else name[:chars - 1] + "…"


def heatmap(counts: Sequence[Sequence[int]], *, rows: Sequence[str], columns: Sequence[str], slug: str, title: str,
            x_label: str, y_label: str, unit: str, note: str = "") -> Chart | None:
    """A count per (row, column), the count written in each non-empty cell in a colour readable on it."""
    if not counts or not rows or not columns:
        return None
    with matplotlib.rc_context({**STYLE, "axes.grid": False}):
        size = max(len(rows), len(columns))
        figure = _figure(HEIGHT_IN + max(0, size - 8) * 0.16)
        axes = figure.add_subplot()
        # vector cells (pcolormesh, not a raster image): crisp at any zoom, nothing embedded as a picture
        image = axes.pcolormesh(counts, cmap="Reds", vmin=0, edgecolors="#ffffff", linewidth=1)
        axes.invert_yaxis()
        top = max((v for row in counts for v in row), default=0) or 1
        small = 8 if size <= 12 else 6.5
        for r, row in enumerate(counts):
            for c, value in enumerate(row):
                if value:
                    colour = to_hex(image.cmap(value / top))
                    axes.text(c + 0.5, r + 0.5, f"{value}", ha="center", va="center", fontsize=small,
                              color=readable_text(colour))
        slanted = max(len(name) for name in columns) > 4
        axes.set_xticks([c + 0.5 for c in range(len(columns))], [_short(name) for name in columns],
                        rotation=60 if slanted else 0, ha="right" if slanted else "center", fontsize=small)
        axes.set_yticks([r + 0.5 for r in range(len(rows))], [_short(name) for name in rows], fontsize=small)
        axes.spines[:].set_visible(False)
        figure.colorbar(image, ax=axes, label=unit, shrink=0.85).ax.yaxis.set_major_locator(
            MaxNLocator(integer=True))
        axes.set_xlabel(x_label)
        axes.set_ylabel(y_label)
        _title(axes, title)
        return Chart(slug, title, "heatmap", _svg(figure, slug), note)
