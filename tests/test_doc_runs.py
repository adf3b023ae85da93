"""Every run README.md or docs/ cite is committed under docs/runs/ (issue #41 item 4), and the README's power figures
for the reported protocol are the committed benchmark's (issue #42).

Why: numbers quoted from a run folder on a machine that is gone cannot be checked by anyone. A cited run is a
folder under docs/runs/ holding a suite run (a trimmed report.json and its summary.md: reports/trim.py) or a
benchmark's printed table with its command (benchmark.md); a citation is its path (`docs/runs/NAME/summary.md`).
Environment: none.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "runs"
CITATION = re.compile(r"docs/runs/[\w./-]*[\w/]")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def citations(text: str) -> set[str]:
    return {match.rstrip("/.") for match in CITATION.findall(text)}


def test_every_cited_run_is_committed():
    missing = sorted(f"{doc.name}: {cited}" for doc in documents() for cited in citations(doc.read_text())
                     if not (ROOT / cited).exists())
    assert missing == []


def test_each_committed_run_is_a_suite_run_or_a_benchmark_table():
    folders = [p for p in RUNS.rglob("*") if p.is_dir() and any(f.is_file() for f in p.iterdir())]
    for folder in folders:
        files = {f.name for f in folder.iterdir() if f.is_file()}
        assert {"report.json", "summary.md"} <= files or "benchmark.md" in files, folder
        if "report.json" in files:
            report = json.loads((folder / "report.json").read_text())
            assert report["verdict"] in ("adopt", "pilot", "wait", "avoid") and report.get("command"), folder


def test_the_citation_scan_can_fail():
    assert citations("see docs/runs/nope/summary.md.") == {"docs/runs/nope/summary.md"}
    assert not (ROOT / "docs/runs/nope/summary.md").exists()


POWER_RUN = RUNS / "protocol-power" / "benchmark.md"


def power_table(benchmark: str) -> dict[str, list[float]]:
    """The benchmark's first table: flip rate -> its four shares (first look and overall, AR at 0% and at 1%)."""
    rows = re.findall(r"^\| (\d+)% \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", benchmark, re.M)
    return {rate: [float(x) for x in shares] for rate, *shares in rows}


def test_the_readmes_protocol_power_is_the_committed_benchmarks():
    """The README's sentence on the reported protocol's power quotes the committed benchmark's AR-0% columns, rounded
    to whole percent (a half either way), and its false-charge bound is the clean table's largest overall share."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"flip at ([\d /]+)% is charged in ([\d /]+)% of runs \(([\d /]+)% at the first look.*?"
                     r"no worse than the AR server in at most ([\d.]+)%", readme)
    assert said, "the README's protocol-power sentence changed shape: keep it tied to docs/runs/protocol-power"
    rates, overall, first = (said.group(i).strip().split(" / ") for i in (1, 2, 3))
    bound = said.group(4)
    benchmark = POWER_RUN.read_text()
    table = power_table(benchmark)
    assert set(rates) <= set(table), (rates, sorted(table))
    for rate, share_overall, share_first in zip(rates, overall, first):
        assert abs(100 * table[rate][0] - int(share_first)) <= 0.5 + 1e-9, (rate, table[rate])
        assert abs(100 * table[rate][1] - int(share_overall)) <= 0.5 + 1e-9, (rate, table[rate])
    clean = [float(x) for x in re.findall(r"^\| \d+% \| [\d.]+ \| ([\d.]+) \(alpha", benchmark, re.M)]
    assert clean and float(bound) == round(100 * max(clean), 2), (bound, clean)


def test_the_committed_nightly_table_is_recomputed_from_its_two_runs():
    """docs/runs/nightly-*/benchmark.md quotes the regression table between its two committed runs: recomputed from
    those trimmed report.json files (they keep the greedy answers and the counters a comparison reads), it must be
    the table the page shows, row for row."""
    from spec_route_suite.reports.compare import candidate_table, compare_reports
    for folder in sorted(RUNS.glob("nightly-*")):
        older, newer = sorted((p for p in folder.iterdir() if (p / "report.json").is_file()),
                              key=lambda p: json.loads((p / "report.json").read_text())["started_unix"])
        then, now = (json.loads((p / "report.json").read_text()) for p in (older, newer))
        rows = [line for line in candidate_table(compare_reports(now, then)["candidates"]) if line.startswith("| `")]
        page = (folder / "benchmark.md").read_text()
        quoted = [line for line in page.splitlines() if line.startswith("| `")]
        assert rows and quoted == rows, f"{folder.name}: the page's table is not its runs' comparison"
