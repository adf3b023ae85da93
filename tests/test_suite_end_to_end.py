"""The route suite as a user runs it: a correct pair passes, a planted divergence fails, none is lost.

These run `python -m pytest` in a subprocess with xdist, exactly like `pytest -n 8`, and
read the run folder it writes.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from spec_route_suite.routes.spec import EMBEDDED_MODELS

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
DRAFT = EMBEDDED_MODELS / "draft"


def run_suite(tmp_path: Path, *args: str, timeout: float = 600,
              paths: tuple[str, ...] = ("equivalence/test_greedy.py",)) -> tuple[subprocess.CompletedProcess, dict]:
    report_dir = tmp_path / "out"
    cmd = [sys.executable, "-m", "pytest", *paths, "-p", "no:cacheprovider", "--report-dir", str(report_dir), *args]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    runs = sorted(report_dir.glob("*/report.json"))
    assert len(runs) == 1, f"expected one run folder in {report_dir}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert (runs[0].parent / "summary.md").exists()
    return result, json.loads(runs[0].read_text())


def test_default_pair_passes_and_writes_the_run_folder(tmp_path):
    result, report = run_suite(tmp_path, "-n", "2", "--prompt-limit", "2", "--categories", "math,chat,long")
    assert result.returncode == 0, result.stdout[-3000:]
    assert report["checks"]["greedy"].get("passed") == 12, "6 prompts on each of the default pair's two candidates"
    assert report["findings"] == [] and report["complete"]
    assert report["findings_accounting"] == {"recorded": 0, "received": 0, "lost": 0}
    assert set(report["inventories"]) == {"baseline", "candidate", "reference-batched"}
    assert report["acceptance"]["candidate"]["mean_acceptance_length"] > 1.0
    assert report["acceptance"]["reference-batched"]["mean_acceptance_length"] > 1.0
    assert report["verdict"] == "pilot" and "not run:" in report["verdict_reason"], "greedy alone is not every check"


def test_planted_divergence_fails_naming_prompt_and_position(tmp_path):
    candidate = f"hf:{TARGET}?draft={DRAFT}&num_assistant_tokens=4&plant=divergence@5"
    result, report = run_suite(tmp_path, "-n", "2", "--prompt-limit", "2", "--categories", "math,chat",
                               "--candidate", candidate)
    assert result.returncode == 1, result.stdout[-3000:]
    failed = report["checks"]["greedy"].get("failed", 0)
    assert failed >= 3
    chat = report["checks"]["chat"].get("failed", 0)   # the plant hits the chat shape of test_greedy.py too
    assert chat >= 1
    assert report["findings_accounting"] == {"recorded": failed + chat, "received": failed + chat, "lost": 0}
    for finding in report["findings"]:
        assert finding["check"] in ("greedy", "chat") and finding["severity"] == "bug"
        assert finding["details"]["divergence"]["position"] == 5
        assert finding["prompt_id"] in finding["test_id"]
    summary = (next((tmp_path / "out").glob("*/summary.md"))).read_text()
    assert "AVOID" in summary and report["findings"][0]["prompt_id"] in summary


def test_findings_survive_without_xdist(tmp_path):
    candidate = f"hf:{TARGET}?draft={DRAFT}&plant=divergence@0"
    result, report = run_suite(tmp_path, "-p", "no:xdist", "--prompt-limit", "1", "--categories", "math",
                               "--candidate", candidate)
    assert result.returncode == 1
    assert report["findings_accounting"] == {"recorded": 1, "received": 1, "lost": 0}
