"""The run folder under real conditions: a dead route, planted secrets, an interrupted run (Chromium renders the
dashboard in tests/test_dashboard.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spec_route_suite.routes.spec import EMBEDDED_MODELS
from spec_route_suite.servers.run_judgement import judge_run

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-test-planted-key-5f2c9a"
HEADER_SECRET = "hdr-planted-secret-77aa"


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


def test_a_dead_route_is_one_finding_and_secrets_stay_out(tmp_path):
    """A route that is not there: without the preflight (which would end the run with exit 4), the first request
    names it dead once, every later test reads "not run", and no secret reaches any file or the terminal."""
    routes = secret_routes_file(tmp_path / "routes.toml", base_url=f"http://127.0.0.1:{closed_port()}/v1",
                                model="tiny", key_env="SPEC_SUITE_TEST_KEY", header=("X-Api-Token", HEADER_SECRET),
                                request_s=10, connect_s=2)
    env = {**subprocess.os.environ, "SPEC_SUITE_TEST_KEY": KEY}
    args = [sys.executable, "-m", "pytest", "equivalence/test_greedy.py", "stressors/test_speed.py", "-p",
            "no:cacheprovider", "--routes", str(routes), "--report-dir", str(tmp_path / "out"), "--prompt-limit", "1",
            "--categories", "math,chat"]
    refused = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 4 and "preflight failed" in refused.stderr, refused.stderr[-2000:]
    assert not (tmp_path / "out").exists() and KEY not in refused.stdout + refused.stderr
    result = subprocess.run([*args, "--no-preflight"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:]
    report = json.loads(next((tmp_path / "out").glob("*/report.json")).read_text())
    [finding] = report["findings"]
    assert finding["details"]["error_kind"] == "route-died" and finding["severity"] == "bug", finding
    assert "the baseline answers the same request" in finding["title"] and report["verdict"] == "avoid"
    skipped = [t for t in report["tests"] if t["outcome"] == "skipped" and "candidate" in t["nodeid"]]
    assert skipped and all(t["reason"].startswith("not run: route 'candidate' died at request ") for t in skipped)
    assert len(list((tmp_path / "out").glob("*/issues/*.md"))) == 1
    assert not [e for e in judge_run(tmp_path / "out", 1)["harness_errors"] if e.startswith("H5")]
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
                                 "--max-new-tokens", "128"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"},   # the log live: a block-buffered one
                                # showed its first PASSED lines after ~80 of the 148 fast tests, too late for Ctrl-C
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # Ctrl-C must reach it: a job started in the background by a non-interactive shell (a CI runner, `cmd &`)
        # has SIGINT ignored, and a child that starts with it ignored never raises KeyboardInterrupt
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


def test_the_speed_gate_alone_writes_its_run_folder(tmp_path):
    """The speed gate carries no check family; run alone it still writes the run folder with its measurements (and
    any acceptance-collapse warning), where it used to leave nothing (2026-12-05, llama.cpp's DFlash preset)."""
    result = subprocess.run([sys.executable, "-m", "pytest", "stressors/test_speed.py", "-p", "no:cacheprovider",
                             "--report-dir", str(tmp_path / "out"), "--prompt-limit", "1", "--categories", "math"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]
    report = json.loads(next((tmp_path / "out").glob("*/report.json")).read_text())
    assert {row["candidate"] for row in report["measurements"]["speed"]} == {"candidate", "reference-batched"}
