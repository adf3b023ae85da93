"""report.html read by a person: charts with visible titles, more than two y ticks, units, legends that fit five
series inside the chart, no label said twice; one unit per quantity in summary.md and report.html; every coloured
text at WCAG's 4.5:1; a page rendered from templates that escapes what the report holds and loads nothing.

Rendered by headless Chromium for (a) a recorded default run (tests/data/default_run_report.json: report.json of
`spec-route-suite -n 2 -k "greedy or mixing or speed or distribution"`, cut to the keys report.html reads) and
(b) a synthetic five-candidate report (tests/five_candidates.py, the llama.cpp DFlash preset's shape).
"""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from spec_route_suite.reports import palette
from spec_route_suite.reports.charts import SERIES_COLOURS
from spec_route_suite.reports.contrast import AA_NORMAL_TEXT, contrast_ratio
from spec_route_suite.reports.render_html import render_html
from spec_route_suite.reports.report_charts import p_value_chart
from spec_route_suite.reports.speed import speed_section
from tests.browser import CHROMIUM, chart_layout, chromium, colour_share, png_pixels
from tests.five_candidates import CANDIDATES, five_candidate_report

DEFAULT_RUN = Path(__file__).with_name("data") / "default_run_report.json"
SVG = "{http://www.w3.org/2000/svg}"


def default_run_report() -> dict:
    return json.loads(DEFAULT_RUN.read_text())


def svg_texts(html: str, chart: str, group: str) -> list[str]:
    """The texts of a chart's groups whose id contains `group` (e.g. "ytick_"), read from the SVG markup."""
    found = re.search(rf'<figure class="chart" id="{chart}".*?(<svg.*?</svg>)', html, re.S)
    assert found, f"no chart {chart}"
    root = ET.fromstring(found.group(1))
    return [t.text.strip() for g in root.iter(f"{SVG}g") if group in g.get("id", "")
            for t in g.iter(f"{SVG}text") if t.text and t.text.strip()]


def test_contrast_ratio_matches_wcag_reference_values():
    assert contrast_ratio("#000000", "#ffffff") == pytest.approx(21)
    assert contrast_ratio("#777777", "#777777") == pytest.approx(1)
    assert contrast_ratio("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)   # the lightest AA grey on white
    assert contrast_ratio("#ffffff", "#d4a72c") < AA_NORMAL_TEXT   # the old matrix's white on yellow (2.2:1)


@pytest.mark.parametrize("name", sorted(palette.pairs()))
def test_every_colour_pair_reaches_aa(name):
    text, background = palette.pairs()[name]
    assert contrast_ratio(text, background) >= AA_NORMAL_TEXT, (name, round(contrast_ratio(text, background), 2))


def test_the_stylesheet_draws_only_checked_pairs():
    """Every rule of the rendered page that sets a text or background colour draws one of palette.pairs() (the
    text on the page's background, or the page's text on the rule's background): the contrast test above sees
    every colour pair the page uses."""
    style = re.search(r"<style>(.*?)</style>", render_html(five_candidate_report()), re.S).group(1)
    checked = set(palette.pairs().values())
    drawn = {}
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", style):
        colours = dict(re.findall(r"(?:^|;)(color|background):(#\w+)", body))
        if colours:
            drawn[selector.strip()] = (colours.get("color", palette.TEXT), colours.get("background", palette.PAGE))
    assert sum(bg != palette.PAGE for _, bg in drawn.values()) > len(palette.STATUS), drawn
    assert {selector: pair for selector, pair in drawn.items() if pair not in checked} == {}


def test_one_unit_per_quantity_in_summary_and_report():
    """The time to first token is in ms in summary.md's speed table and on report.html's chart axis, and the
    chart's ticks span the values in ms (not in seconds)."""
    report = five_candidate_report()
    summary = "\n".join(speed_section(report))
    html = render_html(report)
    assert "TTFT p50 / p95 (ms)" in summary and "ITL p50 / p95 (ms)" in summary
    assert "time to first token, p50 (ms)" in svg_texts(html, "speed-ttft-p50-s", "text_")
    highest_ms = max(r["ttft_p50_s"] for m in report["measurements"]["speed"] for r in m["rows"]["candidate"]) * 1000
    ticks = [float(t.replace("\u2212", "-")) for t in svg_texts(html, "speed-ttft-p50-s", "ytick_")]
    assert highest_ms <= max(ticks) < 3 * highest_ms, ticks
    labels = [t for chart in re.findall(r'<figure class="chart" id="([\w-]+)"', html) for t in svg_texts(html, chart, "")]
    assert not [t for t in labels if t.endswith("(s)")], "an axis in seconds"


def test_p_values_at_one_have_their_own_bar_and_the_note_counts_below_alpha():
    """39 of 40 p-values at exactly 1 (discrete tests on a correct route) read as such, not as a uniform plot."""
    report = {"measurements": {"p_value": [{"name": "T1.0/exact", "p_value": 1.0}] * 39
                               + [{"name": "T1.0/exact", "p_value": 0.0457}]}}
    chart = p_value_chart(report)
    assert chart.note.startswith("1 of 40 below 0.05") and "39 are exactly 1" in chart.note
    html = render_html({**default_run_report(), **report})
    bars = svg_texts(html, "p-values", "text_")
    assert "exactly 1" in bars and "39" in bars and "0.01–0.05" in bars


def test_the_page_escapes_the_report_and_loads_nothing():
    """A candidate name and a reason carrying markup come out as text; the page has no script and no address
    outside its own run folder but inline data (a colour bar's gradient; the SVG namespace names are not fetched)."""
    report = five_candidate_report()
    hostile = '<img src=x onerror="alert(1)">'
    report["config"]["candidates"][0]["name"] = hostile
    report["route_verdicts"]["eagle3"]["reason"] = f"diverged {hostile} <script>alert(2)</script>"
    report["matrix"]["greedy"][hostile] = {"status": "no", "why": f"because {hostile}", "instances": ""}
    html = render_html(report)
    assert "<script" not in html.lower() and "<img" not in html and "&lt;img src=x onerror=" in html
    addresses = re.findall(r'(?:src|href)="([^"#][^"]*)"', html)
    assert addresses and all(a.startswith("data:image/png;") or not re.match(r"\w+:", a) for a in addresses)
    assert "<link" not in html and "@import" not in html and "url(http" not in html


def test_chart_labels_are_never_said_twice():
    """No "baseline baseline": no word doubled in any chart text, no legend entry twice."""
    report = five_candidate_report()
    report["measurements"]["speed"][0]["baseline"] = "baseline"
    html = render_html(report)
    for chart in re.findall(r'<figure class="chart" id="([\w-]+)"', html):
        texts = svg_texts(html, chart, "")
        assert not [t for t in texts if re.search(r"\b(\w+) \1\b", t)], (chart, texts)
        legend = svg_texts(html, chart, "legend_")
        assert len(legend) == len(set(legend)), (chart, legend)


def legend_colours(html: str, chart: str) -> dict[str, str]:
    """Legend label -> the stroke colour of the line drawn beside it, read from the chart's SVG."""
    found = re.search(rf'<figure class="chart" id="{chart}".*?(<svg.*?</svg>)', html, re.S)
    legend = found.group(1)[found.group(1).index(f"{chart}-legend_"):]
    return dict((label, colour) for colour, label in
                re.findall(r'stroke: (#[0-9a-f]{6})[^>]*/>.*?<text[^>]*>([^<]+)</text>', legend, re.S))


def test_each_candidate_keeps_its_colour_from_chart_to_chart():
    """Seen on the llama.cpp DFlash run: a candidate green in the acceptance chart was orange in the speed charts
    (colours went by each chart's own series order). The speed rows listed in another order change nothing."""
    report = five_candidate_report()
    report["measurements"]["speed"] = list(reversed(report["measurements"]["speed"]))
    html = render_html(report)
    acceptance = legend_colours(html, "acceptance-by-position")
    assert set(CANDIDATES) <= set(acceptance) and len({acceptance[c] for c in CANDIDATES}) == len(CANDIDATES)
    for chart in ("speed-throughput-speedup", "speed-decode-tok-s"):
        colours = legend_colours(html, chart)
        assert {c: colours[c] for c in CANDIDATES} == {c: acceptance[c] for c in CANDIDATES}, chart


REPORTS = {"default-run": default_run_report, "five-candidates": five_candidate_report}
# chart -> the legend entries it must show, per report
EXPECTED = {
    "default-run": {"acceptance-by-position": ("candidate", "reference-batched"),
                    "speed-throughput-speedup": ("candidate", "reference-batched", "1x: as fast as the baseline"),
                    "speed-ttft-p50-s": ("candidate", "reference-batched", "baseline (median, band: range of 2 runs)"),
                    "speed-decode-tok-s": ("candidate", "reference-batched", "baseline (median, band: range of 2 runs)"),
                    "p-values": ("below 0.05", "goodness_of_fit", "pit_ks", "pit_ad", "top1_rate", "loglik_z")},
    "five-candidates": {"acceptance-by-position": CANDIDATES,
                        "speed-throughput-speedup": (*CANDIDATES, "1x: as fast as the baseline"),
                        "speed-ttft-p50-s": (*CANDIDATES, "baseline llama-ar (median, band: range of 5 runs)"),
                        "speed-decode-tok-s": (*CANDIDATES, "baseline llama-ar (median, band: range of 5 runs)"),
                        "divergence-positions": (), "p-values": ("below 0.05", "exact_count", "pit_ks", "chi2"),
                        "contamination-1": ()},
}


def inside(inner: list[float], outer: list[float], slack: float = 0.5) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack and inner[2] <= outer[2] + slack
            and inner[3] <= outer[3] + slack)


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] - 1 and b[0] < a[2] - 1 and a[1] < b[3] - 1 and b[1] < a[3] - 1


@pytest.mark.skipif(CHROMIUM is None, reason="not verified: Chromium is not installed (scripts/self-tests.sh "
                                              "installs Debian's chromium)")
@pytest.mark.parametrize("name", sorted(REPORTS))
def test_charts_read_well_in_chromium(tmp_path, name):
    """Every chart: its title visible inside it, more than two y-tick labels (a heatmap: its rows and colour bar), every
    expected legend entry once, every text inside the chart's box and no legend entry over another text; the
    screenshot shows the matrix's status colours and each series colour."""
    page = tmp_path / "report.html"
    page.write_text(render_html(REPORTS[name]()))
    charts = {c["id"]: c for c in chart_layout(page)}
    assert set(charts) == set(EXPECTED[name])
    for chart_id, chart in charts.items():
        assert [t["text"] for t in chart["title"]] and inside(chart["title"][0]["box"], chart["svg"]), chart_id
        assert len(chart["yticks"]) > 2, (chart_id, chart["yticks"])
        legend = [t["text"] for t in chart["legend"]]
        assert sorted(legend) == sorted(EXPECTED[name][chart_id]), (chart_id, legend)
        outside = [t["text"] for t in chart["texts"] if not inside(t["box"], chart["svg"])]
        assert outside == [], (chart_id, outside)
        others = [t for t in chart["texts"] if t not in chart["legend"]]
        covered = [(e["text"], o["text"]) for e in chart["legend"] for o in others if overlap(e["box"], o["box"])]
        assert covered == [], (chart_id, covered)

    top = max(c["svg"][3] for c in charts.values() if c["id"].startswith(("acceptance", "speed")))
    shot = tmp_path / f"{name}.png"
    result = chromium(page, f"--screenshot={shot}", window=f"1100,{int(top) + 20}")
    assert shot.exists(), result.stderr[-2000:]
    _, _, rows = png_pixels(shot)
    statuses = {cell["status"] for cells in REPORTS[name]()["matrix"].values() for cell in cells.values()}
    for status in statuses & {"yes", "failed", "partly", "no"}:
        rgb = tuple(int(palette.STATUS_COLOURS[status][i:i + 2], 16) for i in (1, 3, 5))
        assert colour_share(rows, rgb) > 0.0005, f"no {status} cell in the screenshot"
    series = len(EXPECTED[name]["acceptance-by-position"])
    for colour in SERIES_COLOURS[:series]:
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert colour_share(rows, rgb) > 0.00005, f"series colour {colour} missing from the charts"
