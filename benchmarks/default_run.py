"""Time `spec-route-suite -n 8` on the embedded default pair and print its verdict and coverage table.

The default run must fit 5 minutes on 2 cores and still verify every check family on at least one
candidate (issue #12; issue #26: 150 s wall, 250 CPU-s, reference-batched reading adopt); this measures
both instead of a timed test. Extra arguments go to the suite, e.g. `python -m benchmarks.default_run --
--detect-tv 0.1`. `--before REV` first runs the suite as it was at git revision REV (exported to a
temporary folder, the same command) and prints both rows: the before/after table.

    python -m benchmarks.default_run [--workers 8] [--repeats 1] [--before REV] [-- SUITE ARGS...]
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


def run_once(workers: int, extra: list[str], root: Path = ROOT) -> tuple[float, float, int, dict]:
    with tempfile.TemporaryDirectory(prefix="default-run-") as out:
        cmd = [sys.executable, "-m", "spec_route_suite", "-p", "no:cacheprovider", "-q", "-n", str(workers),
               "--report-dir", out, *extra]   # the command (not plain pytest): --report-dir takes an absolute path
        start, cpu = time.perf_counter(), children_cpu_s()
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, children_cpu_s() - cpu
        reports = sorted(Path(out).glob("*/report.json"))
        report = json.loads(reports[-1].read_text()) if reports else {}
        if not report:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        return wall, cpu, done.returncode, report


def coverage_changes(before: dict, after: dict) -> str:
    """Coverage rows whose status changed between the two runs (a row verified before must stay verified)."""
    def rows(report: dict) -> dict:
        return {(r["check"], r.get("part", ""), r["route"]): r["status"] for r in report.get("coverage", [])}
    old, new = rows(before), rows(after)
    changed = [(key, old.get(key, "-"), new.get(key, "-")) for key in sorted(set(old) | set(new))
               if old.get(key) != new.get(key)]
    lost = sum(1 for _, was, now in changed if was == "verified")
    lines = [f"coverage rows changed: {len(changed)} ({lost} verified before and not after)",
             "| check: part | route | before | after |", "|---|---|---|---|"]
    lines += [f"| {c}{': ' + p if p else ''} | {r} | {was} | {now} |" for (c, p, r), was, now in changed]
    return "\n".join(lines)


def exported(rev: str, into: Path) -> Path:
    """The repository at `rev`, as files (git archive), to run the suite as it was."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--before", metavar="REV", help="also run the suite as it was at this git revision, first")
    parser.add_argument("suite_args", nargs="*")
    args = parser.parse_args()
    print(f"cpus available: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.1f}")
    # On a shared machine wall time measures the neighbours; CPU seconds / 2 is the wall time the run
    # needs on 2 idle cores (a lower bound: workers also wait on each other).
    print("| run | tree | wall s | CPU s | CPU s / 2 | within 5 min on 2 idle cores | exit | verdict | tests | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    last, first = {}, {}
    with tempfile.TemporaryDirectory(prefix="default-run-before-") as before:
        trees = ([(f"before ({args.before})", exported(args.before, Path(before)))] if args.before else [])
        trees.append(("this tree", ROOT))
        for label, root in trees:
            for n in range(args.repeats):
                load = os.getloadavg()[0]
                wall, cpu, code, report = run_once(args.workers, args.suite_args, root)
                last = report or last
                first = first or report
                counts = ", ".join(f"{v} {k}" for k, v in sorted(report.get("counts", {}).items()))
                within = "no report" if not report else "yes" if cpu / 2 <= BUDGET_S else "NO"
                print(f"| {n + 1} | {label} | {wall:.0f} | {cpu:.0f} | {cpu / 2:.0f} | {within} | "
                      f"{code} | {report.get('verdict', '?')} | {counts} | {load:.1f} |", flush=True)
    if args.before and first and last and first is not last:
        print("\n" + coverage_changes(first, last))
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
    return 0 if last else 1   # a run that wrote no report measured nothing


if __name__ == "__main__":
    sys.exit(main())
