"""The harness benchmark runs end to end (its numbers are read from its table, never asserted here):
both clients get every answer from the fast server, and each holds the requested concurrency."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_benchmark_runs_both_clients_at_the_requested_level():
    done = subprocess.run([sys.executable, "-m", "benchmarks.harness", "--levels", "16", "--requests", "128",
                           "--repeats", "1", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)
    assert row["concurrency"] == 16 and row["requests"] == 128
    assert row["bare_peak"] == row["suite_peak"] == 16, row
    assert row["bare_rps"] > 0 and row["suite_rps"] > 0 and row["suite_cpu_ms"] > 0, row
