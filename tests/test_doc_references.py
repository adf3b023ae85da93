"""Every document the code cites is in the repository: `docs/NAME.md` references resolve, and nothing points at
notes outside it (the statistics notes once lived in a shared folder no checkout has).
Environment: none.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("spec_route_suite", "equivalence", "stressors", "reports", "fixtures", "tests", "benchmarks", "scripts")
DOC_REF = re.compile(r"docs/([\w.-]+\.md)")
OUTSIDE = re.compile(r"(?<![\w/-])(STATISTICS\.md|BUG_CLASSES\.md|REAL_ENGINE\.md)|\.\./shared/|shared/[A-Z_]+\.md")


def _sources() -> list[Path]:
    return sorted(p for top in SOURCES for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".sh", ".toml"))


def test_cited_documents_exist():
    missing = {f"{path.relative_to(ROOT)}: docs/{name}" for path in _sources() if path.name != Path(__file__).name
               for name in DOC_REF.findall(path.read_text()) if not (ROOT / "docs" / name).is_file()}
    assert missing == set()


def test_no_reference_points_outside_the_repository():
    outside = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in _sources() if path.name != Path(__file__).name
               for n, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert outside == []


def test_the_scans_can_fail():
    assert DOC_REF.findall("see docs/nope.md") == ["nope.md"]
    assert OUTSIDE.search("(STATISTICS.md: the pooled") and OUTSIDE.search("see ../shared/BUG_CLASSES.md")
    assert not OUTSIDE.search("see docs/statistics.md")
