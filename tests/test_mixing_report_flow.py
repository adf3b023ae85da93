"""The report a maintainer gets for the motivating bug, end to end over real HTTP.

The reference engine with its cross-context mixing fault is served as an OpenAI-compatible
server (spec_route_suite.servers.inprocess); the route suite's mixing stressor judges it through the
openai adapter, with a secret API key and a secret header in the route file. The run folder
must hold an issue-ready summary.md, an HTML report that renders in Chromium, and a repro
script that reproduces the failure against the same server on its own. A second run against
the correct engine, with --compare-to, must list the mixing finding as fixed. Neither secret
may appear anywhere in either run folder.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spec_route_suite.routes.spec import EMBEDDED_MODELS
from spec_route_suite.servers.inprocess import serve_in_thread
from tests.browser import CHROMIUM, chromium
from tests.test_run_folder import secret_routes_file

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk-mixing-flow-planted-3b7e"
HEADER_SECRET = "hdr-mixing-flow-planted-91cd"
MODEL = "tiny-target"
SUITE_ARGS = ("--concurrency", "8", "--stress-requests", "100", "-p", "no:cacheprovider", "-q")


def run_mixing_suite(tmp_path: Path, name: str, uri: str, *extra: str) -> tuple[int, Path, str]:
    base_url, stop = serve_in_thread(uri, model_name=MODEL)
    try:
        routes = secret_routes_file(tmp_path / f"{name}.toml", base_url=base_url, model=MODEL,
                                    key_env="MIXING_FLOW_KEY", header=("X-Auth-Token", HEADER_SECRET), request_s=120)
        env = {**os.environ, "MIXING_FLOW_KEY": API_KEY}
        done = subprocess.run([sys.executable, "-m", "pytest", "stressors/test_mixing.py", "--routes", str(routes),
                               "--report-dir", str(tmp_path / name), *SUITE_ARGS, *extra],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    finally:
        stop()
    run_dir = next((tmp_path / name).glob("*/report.json")).parent
    return done.returncode, run_dir, done.stdout[-3000:] + done.stderr[-2000:]


def serve_and_run(script: Path, uri: str, baseline_url: str) -> subprocess.CompletedProcess:
    """The repro script alone: a clean environment, only the servers' addresses (the candidate's, as older scripts
    took it, and the baseline's: the control) and the API key the route names."""
    base_url, stop = serve_in_thread(uri, model_name=MODEL)
    try:
        return subprocess.run([sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True,
                              timeout=600, env={"PATH": os.environ.get("PATH", ""), "REPRO_BASE_URL": base_url,
                                                "REPRO_BASELINE_URL": baseline_url, "MIXING_FLOW_KEY": API_KEY})
    finally:
        stop()


def test_mixing_fault_yields_an_issue_ready_report_a_standalone_repro_and_a_nightly_diff(tmp_path):
    faulty = "reference:?fault=cross_context_mixing&mix_rate=0.1"
    code, run_dir, output = run_mixing_suite(tmp_path, "faulty", faulty)
    assert code == 1, output
    report = json.loads((run_dir / "report.json").read_text())
    mixing = [f for f in report["findings"] if f["check"] == "mixing" and f["severity"] == "bug"]
    assert report["verdict"] == "avoid" and mixing, output
    assert "answered in another request's context" in mixing[0]["title"]

    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("# Route qualification: **AVOID**")
    assert "cross-request mixing" in summary and "## Speculation" in summary and len(summary) < 20_000

    scripts = [run_dir / s for s in report["repro_scripts"] if s.endswith(".py") and "mixing" in s]
    assert scripts, report["repro_scripts"]
    text = scripts[0].read_text()
    assert not re.search(r"^\s*(from|import)\s+(fixtures|reports|equivalence|stressors)\b", text, re.M)
    baseline_url, stop_baseline = serve_in_thread(f"hf:{EMBEDDED_MODELS / 'target'}")
    try:
        reproduced = serve_and_run(scripts[0], faulty, baseline_url)
        assert reproduced.returncode == 1 and "REPRODUCED" in reproduced.stdout, reproduced.stdout + reproduced.stderr
        clean = serve_and_run(scripts[0], "reference:", baseline_url)
        assert clean.returncode == 0, clean.stdout + clean.stderr
    finally:
        stop_baseline()

    if CHROMIUM is None:
        pytest.fail("chromium is needed for the report.html render check (apt-get install chromium)")
    dom = chromium(run_dir / "report.html", "--dump-dom")
    assert "AVOID" in dom.stdout and "cross-request contamination" in dom.stdout, dom.stderr[-2000:]
    assert dom.stdout.count("<svg") >= 2  # acceptance by position, contamination matrix

    code, fixed_dir, output = run_mixing_suite(tmp_path, "correct", "reference:", "--compare-to", str(run_dir))
    assert code == 0, output
    comparison = json.loads((fixed_dir / "report.json").read_text())["comparison"]
    assert any("mixing" in item for item in comparison["fixed"]) and not comparison["new"], comparison
    assert "**fixed** (" in (fixed_dir / "summary.md").read_text()

    for folder in (run_dir, fixed_dir):
        for path in folder.rglob("*"):
            if path.is_file():
                content = path.read_bytes()
                assert API_KEY.encode() not in content and HEADER_SECRET.encode() not in content, path
