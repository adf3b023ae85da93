"""report.html as a dashboard, rendered by headless Chromium: the family x candidate matrix says what report.json
says, cell by cell, and shows in the screenshot in its colours; the acceptance and speed-gate plots render.

The run is synthetic (a RunCollector filled with coverage records, outcomes, acceptance counters and a speed
measurement), planted so the matrix holds every kind of cell: verified, failed, not verified, partly (one part
verified, one refused), not applicable and not run.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spec_route_suite.routes.base import AcceptanceSnapshot
from spec_route_suite.routes.speculation.acceptance import acceptance_profile
from spec_route_suite.reports.collector import CheckOutcome, RunCollector, WorkerState
from spec_route_suite.reports.coverage import CoverageRecord
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.palette import STATUS_COLOURS
from spec_route_suite.reports.writer import write_run_folder
from tests.browser import CHROMIUM, chromium, colour_share, png_pixels

# (family, part, route, outcome, record fields): what each test of the planted run did
PLANTED = [
    ("greedy", "", "alpha", "passed", dict(verified=True, ran={"prompts": 1})),
    ("greedy", "", "beta", "failed", dict(verified=True, ran={"prompts": 1})),
    ("streaming", "", "alpha", "passed", dict(verified=False, ran={"streams": 1}, reason="the stream had no ids")),
    ("streaming", "", "beta", "passed", dict(verified=True, ran={"streams": 1})),
    ("features", "n", "alpha", "passed", dict(verified=True, ran={"requests": 1})),
    ("features", "min_tokens", "alpha", "skipped", dict(verified=False, supported=False, reason="refused min_tokens")),
    ("features", "n", "beta", "passed", dict(verified=True, ran={"requests": 1})),
    ("features", "min_tokens", "beta", "passed", dict(verified=True, ran={"requests": 1})),
    ("prefix-cache", "", "alpha", "passed", dict(verified=False, applicable=False, reason="no prefix cache")),
    ("prefix-cache", "", "beta", "passed", dict(verified=False, applicable=False, reason="no prefix cache")),
    ("chat", "", "alpha", "passed", dict(verified=True, ran={"turns": 2})),
    ("chat", "", "alpha", "skipped", dict(verified=True)),   # one prompt of two skipped: the part is not verified
]
EXPECTED = {("greedy", "alpha"): "yes", ("greedy", "beta"): "failed", ("streaming", "alpha"): "no",
            ("streaming", "beta"): "yes", ("features", "alpha"): "partly", ("features", "beta"): "yes",
            ("prefix-cache", "alpha"): "n/a", ("mixing", "beta"): "not run", ("chat", "alpha"): "no"}


def planted_run(tmp_path: Path) -> RunCollector:
    collector = RunCollector(run_dir=tmp_path / "run", run_id="dashboard-1", redact=Redactor(()), is_worker=False,
                             config_public={"baseline": {"name": "base", "kind": "hf", "model": "m"},
                                            "candidates": [{"name": "alpha", "kind": "hf", "model": "m"},
                                                           {"name": "beta", "kind": "reference", "model": "m"}]})
    records = []
    for n, (family, part, route, outcome, fields) in enumerate(PLANTED):
        nodeid = f"t.py::test_{family.replace('-', '_')}_{n}[{route}]"
        collector.outcomes[nodeid] = CheckOutcome(nodeid, family, outcome, 0.1,
                                                  "not verified: refused" if outcome == "skipped" else "")
        records.append({**CoverageRecord(check=family, route=route, part=part, could_detect="x",
                                         **fields).as_measurement(), "test_id": nodeid})
    collector.measurements = {"coverage": records, "speed": [speed_measurement("alpha"), speed_measurement("beta")]}
    collector.worker_states = [WorkerState().__dict__]
    collector.server_acceptance = {name: acceptance_profile(AcceptanceSnapshot(10, 40, 24, (9, 7, 5, 3)))
                                   for name in ("alpha", "beta")}
    return collector


def speed_measurement(candidate: str) -> dict:
    def row(c, tput):
        return {"concurrency": c, "ttft_p50_s": 0.05 * c, "ttft_p95_s": 0.08 * c, "itl_p50_s": 0.01, "itl_p95_s": 0.02,
                "decode_tok_s": 100.0, "throughput_tok_s": tput, "load_avg_1m": [1.0, 1.1]}
    base, cand = [row(1, 50), row(8, 300)], [row(1, 150), row(8, 420)]
    return {"candidate": candidate, "baseline": "base", "levels": [1, 8], "prompts": 8, "max_tokens": 32,
            "rows": {"baseline": base, "candidate": cand},
            "speedup": [{"concurrency": 1, "throughput_x": 3.0, "decode_x": 1.0, "ttft_x": 1.0},
                        {"concurrency": 8, "throughput_x": 1.4, "decode_x": 1.0, "ttft_x": 1.0}]}


def dom_cells(dom: str) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(family, route) -> (status, reason, instances) of every matrix cell in the rendered DOM."""
    cells = {}
    for tag in re.findall(r"<td [^>]*class=\"cell[^>]*>", dom):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', tag))
        cells[(attrs["data-family"], attrs["data-route"])] = (attrs["data-status"], attrs["title"],
                                                              attrs["data-instances"])
    return cells


@pytest.mark.skipif(CHROMIUM is None, reason="not verified: Chromium is not installed (scripts/self-tests.sh "
                                              "installs Debian's chromium)")
def test_dashboard_matrix_matches_report_json_and_renders(tmp_path):
    from html import unescape
    collector = planted_run(tmp_path)
    write_run_folder(collector)
    report = json.loads((collector.run_dir / "report.json").read_text())
    matrix = report["matrix"]
    for (family, route), status in EXPECTED.items():
        assert matrix[family][route]["status"] == status, (family, route, matrix[family][route])
    assert "refused min_tokens" in matrix["features"]["alpha"]["why"]
    assert matrix["chat"]["alpha"]["instances"] == "1 of 2 instances verified"
    assert matrix["greedy"]["alpha"]["instances"] == "1 of 1 instances verified"

    html = collector.run_dir / "report.html"
    dom = chromium(html, "--dump-dom")
    cells = dom_cells(dom.stdout)
    expected = {(f, r): (c["status"], c["why"], c["instances"]) for f, row in matrix.items() for r, c in row.items()}
    assert {k: (s, unescape(w), unescape(n)) for k, (s, w, n) in cells.items()} == expected, dom.stderr[-2000:]
    assert "no (1 of 2 instances verified)" in dom.stdout
    assert "acceptance rate by draft position" in dom.stdout and "speed gate: throughput speedup" in dom.stdout
    assert "3.00x throughput at c=1 fading to 1.40x at c=8" in dom.stdout

    shot = tmp_path / "shot.png"
    result = chromium(html, f"--screenshot={shot}", window="1100,1100")
    assert shot.exists(), result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "CONSOLE" in line and "rror" in line]
    assert errors == []
    width, height, rows = png_pixels(shot)
    assert (width, height) == (1100, 1100)
    for status in ("yes", "failed", "partly", "no"):   # the matrix is on the first screen, in its colours
        rgb = tuple(int(STATUS_COLOURS[status][i:i + 2], 16) for i in (1, 3, 5))
        assert colour_share(rows, rgb) > 0.0005, f"no {status} cell ({STATUS_COLOURS[status]}) in the screenshot"
