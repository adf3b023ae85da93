"""The route suite against a server that answers a share of its requests with malformed shapes.

Every damaged answer (tests/fault_server.py logs which request got which shape) must come back
as a route-error finding that names the request and says what was wrong; the other requests are
still judged (greedy prompts pass), and the run ends with a complete report and no traceback.
Runs `python -m pytest` in a subprocess with xdist, like tests/test_suite_end_to_end.py, on a
small budget: the greedy and streaming checks, 4 prompts per category, 8 new tokens.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from spec_route_suite.fixtures.routes.spec import EMBEDDED_MODELS
from tests.fault_server import FaultPlan, serve_faults
from tests.hostile_shapes import BODY_SHAPES, STREAM_SHAPES

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
CHECKS = ("equivalence/test_greedy.py::test_greedy_matches_baseline",
          "equivalence/test_streaming.py::test_stream_matches_non_stream")
SHAPE_WORDS = {name: words for name, (_, words) in {**BODY_SHAPES, **STREAM_SHAPES}.items()}


def run_against(base_url: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict, str]:
    report_dir = tmp_path / "out"
    candidate = f"openai:{base_url}?model=hostile&tokenizer={TARGET}&timeout=60"
    cmd = [sys.executable, "-m", "pytest", *CHECKS, "-p", "no:cacheprovider", "-n", "2", "--report-dir",
           str(report_dir), "--prompt-limit", "4", "--max-new-tokens", "8", "--candidate", candidate]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    runs = sorted(report_dir.glob("*/report.json"))
    assert len(runs) == 1, f"no run folder\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result, json.loads(runs[0].read_text()), (runs[0].parent / "summary.md").read_text()


def test_every_malformed_shape_becomes_a_named_route_error_finding(tmp_path):
    # the streaming check's plain requests are spared, so its stream requests are sent (and damaged)
    plan = FaultPlan(share=0.75, stream_share=1.0, spare=("stream-",))
    base_url, stop = serve_faults(f"hf:{TARGET}", plan, base=ROOT)
    try:
        result, report, summary = run_against(base_url, tmp_path)
    finally:
        stop()
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Traceback" not in output, output[-5000:]
    assert report["complete"] and report["findings_accounting"]["lost"] == 0
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    by_request: dict[str, list[str]] = {}
    for finding in errors:
        by_request.setdefault(finding["details"].get("request_id", ""), []).append(finding["title"])
    missing = [(rid, shape) for rid, shape in plan.served
               if not any(SHAPE_WORDS[shape] in title for title in by_request.get(rid, []))]
    assert not missing, f"damaged requests without a finding naming what was wrong: {missing}\n{by_request}"
    served = {shape for _, shape in plan.served}
    assert served >= set(BODY_SHAPES), f"body shapes never served: {set(BODY_SHAPES) - served}"
    assert len(served & set(STREAM_SHAPES)) >= 2, f"stream shapes served: {served & set(STREAM_SHAPES)}"
    assert report["checks"]["greedy"].get("passed", 0) >= 2, report["checks"]  # the rest is still judged
    assert len(errors) == sum(c.get("failed", 0) + c.get("error", 0) for c in report["checks"].values()), \
        (report["checks"], [f["title"] for f in errors])
    assert "malformed-response" in summary


def test_a_clean_share_gives_a_clean_run(tmp_path):
    """The control at the same budget: the same server with no damage passes both checks."""
    base_url, stop = serve_faults(f"hf:{TARGET}", FaultPlan(share=0.0, stream_share=0.0), base=ROOT)
    try:
        result, report, _ = run_against(base_url, tmp_path)
    finally:
        stop()
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert report["findings"] == [] or all(f["severity"] not in ("error", "bug") for f in report["findings"])
