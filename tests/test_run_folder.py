"""The run folder under real conditions: a dead route, planted secrets, an interrupted run, Chromium."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spec_route_suite.fixtures.routes.spec import EMBEDDED_MODELS
from tests.test_reports import greedy_finding, make_collector
from spec_route_suite.reports.collector import CheckOutcome
from spec_route_suite.reports.writer import write_run_folder

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-test-planted-key-5f2c9a"
HEADER_SECRET = "hdr-planted-secret-77aa"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def closed_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def secret_routes_file(path: Path, *, base_url: str, model: str, key_env: str, header: tuple[str, str],
                       request_s: float, connect_s: float = 5) -> Path:
    """Embedded hf baseline vs an openai candidate whose API key (from `key_env`) and header are secrets."""
    target = EMBEDDED_MODELS / "target"
    path.write_text(f"""
[baseline]
kind = "hf"
model = "{target}"

[candidate]
kind = "openai"
base_url = "{base_url}"
model = "{model}"
tokenizer = "{target}"
api_key_env = "{key_env}"
headers = {{ "{header[0]}" = "{header[1]}" }}
timeouts = {{ connect = {connect_s}, request = {request_s} }}
""")
    return path


def test_dead_route_becomes_a_finding_and_secrets_stay_out(tmp_path):
    routes = secret_routes_file(tmp_path / "routes.toml", base_url=f"http://127.0.0.1:{closed_port()}/v1",
                                model="tiny", key_env="SPEC_SUITE_TEST_KEY", header=("X-Api-Token", HEADER_SECRET),
                                request_s=10, connect_s=2)
    env = {**subprocess.os.environ, "SPEC_SUITE_TEST_KEY": KEY}
    result = subprocess.run([sys.executable, "-m", "pytest", "equivalence/test_greedy.py", "-p", "no:cacheprovider",
                             "--routes", str(routes), "--report-dir", str(tmp_path / "out"), "--prompt-limit", "1",
                             "--categories", "math,chat"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, result.stdout[-2000:]
    report = json.loads(next((tmp_path / "out").glob("*/report.json")).read_text())
    kinds = {f["details"].get("error_kind") for f in report["findings"]}
    assert kinds == {"connection-lost"} and len(report["findings"]) >= 2
    assert report["verdict"] == "wait"
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert KEY not in text and HEADER_SECRET not in text, f"secret in {path.name}"
    assert KEY not in result.stdout + result.stderr


def test_interrupted_run_leaves_a_valid_report_marked_incomplete(tmp_path):
    log = tmp_path / "pytest.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pytest", "equivalence/test_greedy.py", "-p", "no:cacheprovider",
                                 "-p", "no:xdist", "-v", "--report-dir", str(tmp_path / "out"),
                                 "--max-new-tokens", "128"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and log.read_text().count("PASSED") < 2 and proc.poll() is None:
                time.sleep(0.5)
            proc.send_signal(signal.SIGINT)  # what Ctrl-C does
            proc.wait(timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 2, log.read_text()[-2000:]  # pytest's "interrupted"
    report = json.loads(next((tmp_path / "out").glob("*/report.json")).read_text())
    assert report["complete"] is False and report["interrupted"] is True
    assert report["verdict"] == "wait" and report["counts"].get("passed", 0) >= 2
    assert "INCOMPLETE" in next((tmp_path / "out").glob("*/summary.md")).read_text()


def chromium(html: Path, profile: Path, mode: str) -> subprocess.CompletedProcess:
    """Headless Chromium on a local page: `--dump-dom` (DOM on stdout) or `--screenshot=PATH`; logs on stderr."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--window-size=1100,1600"]
    return subprocess.run([CHROMIUM, *flags, mode, html.as_uri()], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="not verified: Chromium is not installed (apt-get install chromium)")
def test_report_html_renders_in_headless_chromium(tmp_path):
    finding = greedy_finding()
    collector = make_collector(tmp_path, findings=[finding], outcomes=[
        CheckOutcome(finding.test_id, "greedy", "failed", 0.5, "diverges")])
    write_run_folder(collector)
    html = collector.run_dir / "report.html"
    shot = tmp_path / "shot.png"
    result = chromium(html, tmp_path / "profile", f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 10_000, result.stderr[-2000:]
    console_errors = [l for l in result.stderr.splitlines() if "CONSOLE" in l and ("error" in l.lower() or "Uncaught" in l)]
    assert console_errors == []
    dom = chromium(html, tmp_path / "profile", "--dump-dom")
    assert dom.stdout.count("<svg") >= 3 and "AVOID" in dom.stdout
