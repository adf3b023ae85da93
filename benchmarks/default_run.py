"""Time `spec-route-suite -n 8` on the embedded default pair and print its verdict and coverage table.

The default run must fit 5 minutes on 2 cores and still verify every check family on at least one
candidate (issue #12); this measures both instead of a timed test. Extra arguments go to the suite,
e.g. `python -m benchmarks.default_run -- --detect-tv 0.05`.

    python -m benchmarks.default_run [--workers 8] [--repeats 1] [-- SUITE ARGS...]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 300.0


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(workers: int, extra: list[str]) -> tuple[float, float, int, dict]:
    with tempfile.TemporaryDirectory(prefix="default-run-") as out:
        cmd = [sys.executable, "-m", "spec_route_suite.cli", "-p", "no:cacheprovider", "-q", "-n", str(workers),
               "--report-dir", out, *extra]   # the command (not plain pytest): --report-dir takes an absolute path
        start, cpu = time.perf_counter(), children_cpu_s()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, children_cpu_s() - cpu
        reports = sorted(Path(out).glob("*/report.json"))
        report = json.loads(reports[-1].read_text()) if reports else {}
        if not report:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        return wall, cpu, done.returncode, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("suite_args", nargs="*")
    args = parser.parse_args()
    print(f"cpus available: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.1f}")
    # On a shared machine wall time measures the neighbours; CPU seconds / 2 is the wall time the run
    # needs on 2 idle cores (a lower bound: workers also wait on each other).
    print("| run | wall s | CPU s | CPU s / 2 | within 5 min on 2 idle cores | exit | verdict | tests |")
    print("|---|---|---|---|---|---|---|---|")
    last = {}
    for n in range(args.repeats):
        wall, cpu, code, report = run_once(args.workers, args.suite_args)
        last = report or last
        counts = ", ".join(f"{v} {k}" for k, v in sorted(report.get("counts", {}).items()))
        print(f"| {n + 1} | {wall:.0f} | {cpu:.0f} | {cpu / 2:.0f} | {'yes' if cpu / 2 <= BUDGET_S else 'NO'} | "
              f"{code} | {report.get('verdict', '?')} | {counts} |", flush=True)
    if last:
        print(f"\nverdict reason: {last.get('verdict_reason')}\n")
        print("| check | route | what ran | could detect | status | why |")
        print("|---|---|---|---|---|---|")
        for row in last.get("coverage", []):
            print(f"| {row['check']} | {row['route']} | {row['ran']} | {row['could_detect'][:80]} | {row['status']} | "
                  f"{row['why'][:100]} |")
        slowest = sorted(last.get("tests", []), key=lambda t: -t["duration_s"])[:10]
        print("\n| slowest test | s |\n|---|---|")
        for test in slowest:
            print(f"| {test['nodeid']} | {test['duration_s']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
