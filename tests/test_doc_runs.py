"""Every run README.md or docs/ cite is committed under docs/runs/ (issue #41 item 4).

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
