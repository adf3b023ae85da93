"""The route suite against a server that answers a share of its requests with malformed shapes.

Every damaged answer (tests/fault_server.py logs which request got which shape) must come back
as a route-error finding that names the request and says what was wrong; the other requests are
still judged (greedy prompts pass), and the run ends with a complete report (report.json, a
verdict, a well-formed summary.md) and no traceback. Runs `python -m pytest` in a subprocess with
xdist, like tests/test_suite_end_to_end.py, on a small budget: the greedy and streaming checks,
4 prompts per category, 8 new tokens.

Every shape is reached on every run, by construction: the fault server hands the shapes out
round-robin (FaultPlan.pick), and the routes file names the fault server twice as two candidates.
The streaming check sends 4 streamed requests per candidate (2 lean prompts, with and without a
stop string), so the 8 streamed requests get the 8 stream shapes once each; the greedy check runs
on the first candidate only (-k), and its 20 plain requests get every body shape at least once.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from spec_route_suite.routes.spec import EMBEDDED_MODELS
from spec_route_suite.reports.render_markdown import CLUSTERS_SHOWN, MAX_CHARS
from tests.fault_server import FaultPlan, serve_faults
from tests.hostile_shapes import BODY_SHAPES, STREAM_SHAPES

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
CHECKS = ("equivalence/test_greedy.py::test_greedy_matches_baseline",
          "equivalence/test_streaming.py::test_stream_matches_non_stream")
CANDIDATES = ("hostile-a", "hostile-b")   # the same fault server twice: 8 streamed requests, one per stream shape
GREEDY_ON_ONE = f"not (test_greedy_matches_baseline and {CANDIDATES[1]})"   # greedy needs no second copy
SHAPE_WORDS = {name: words for name, (_, words) in {**BODY_SHAPES, **STREAM_SHAPES}.items()}


def routes_file(base_url: str, folder: Path) -> Path:
    """The default baseline against the fault server, named once per entry of CANDIDATES."""
    uri = f"openai:{base_url}?model=hostile&tokenizer={TARGET}&timeout=60"
    path = folder / "routes.toml"
    path.write_text(f'baseline = "hf:{TARGET}"\n\n[candidates]\n'
                    + "".join(f'{name} = "{uri}"\n' for name in CANDIDATES))
    return path


def run_against(base_url: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, dict, str]:
    report_dir = tmp_path / "out"
    cmd = [sys.executable, "-m", "pytest", *CHECKS, "-p", "no:cacheprovider", "-n", "2", "--report-dir",
           str(report_dir), "--prompt-limit", "4", "--max-new-tokens", "8",
           "--routes", str(routes_file(base_url, tmp_path)), "-k", GREEDY_ON_ONE]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    runs = sorted(report_dir.glob("*/report.json"))
    assert len(runs) == 1, f"no run folder\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result, json.loads(runs[0].read_text()), (runs[0].parent / "summary.md").read_text()


def unmatched_shapes(served: list[tuple[str, str]], errors: list[dict]) -> dict[str, list[str]]:
    """Per shape, the damaged requests without a finding of their own that names what was wrong.

    One finding per damaged request: request ids repeat (both candidates, with and without a stop
    string), so for each (request id, words) the findings naming those words must be at least as many
    as the requests that got a shape with those words."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for request_id, shape in served:
        wanted.setdefault((request_id, SHAPE_WORDS[shape]), []).append(shape)
    missing: dict[str, list[str]] = {}
    for (request_id, words), shapes in wanted.items():
        found = sum(1 for f in errors if f["details"].get("request_id") == request_id and words in f["title"])
        for shape in shapes[found:]:
            missing.setdefault(shape, []).append(request_id)
    return missing


def markdown_problems(summary: str, report: dict) -> list[str]:
    """What would make summary.md unreadable: a heading that is not the verdict, an unclosed code fence
    or <details>, a JSON block that does not parse, a table row with the wrong number of cells, a finding
    line that opens raw HTML, or more than the summary's limit."""
    lines = summary.splitlines()
    problems = []
    if lines[0] != f"# Route qualification: **{report['verdict'].upper()}**":
        problems.append(f"first line is not the verdict: {lines[0]!r}")
    fence, block, table_width = None, [], None
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            if fence is None:
                fence, block = line[3:], []
            else:
                if fence == "json":
                    try:
                        json.loads("\n".join(block))
                    except ValueError as exc:
                        problems.append(f"line {n}: JSON block does not parse: {exc}")
                fence = None
            continue
        if fence is not None:
            block.append(line)
            continue
        if line.startswith("|"):
            width = len(re.findall(r"(?<!\\)\|", line))
            table_width = table_width or width
            if width != table_width:
                problems.append(f"line {n}: table row has {width - 1} cells, the header {table_width - 1}")
        else:
            table_width = None
    if fence is not None:
        problems.append("a code fence is never closed")
    if summary.count("<details>") != summary.count("</details>"):
        problems.append("<details> and </details> do not pair up")
    rows = [line for line in lines if re.match(r"\| \d+ \| ", line)]   # one line per finding cluster
    shown = min(len(report.get("clusters") or []), CLUSTERS_SHOWN)
    if len(rows) != shown:
        problems.append(f"{len(rows)} finding lines for {shown} clusters shown")
    problems += [f"raw HTML from a server's answer in a finding line: {r[:120]!r}" for r in rows if "<" in r]
    if len(summary) >= MAX_CHARS:
        problems.append(f"{len(summary)} characters, the limit is {MAX_CHARS}")
    return problems


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
    served = {shape for _, shape in plan.served}
    never = [shape for shape in (*BODY_SHAPES, *STREAM_SHAPES) if shape not in served]
    assert not never, f"shapes never served: {never}\n{plan.served}"
    missing = unmatched_shapes(plan.served, errors)
    assert not missing, f"damaged requests without a finding naming what was wrong, per shape: {missing}\n" \
                        + "\n".join(f"{f['details'].get('request_id')}: {f['title']}" for f in errors)
    assert len(errors) == len(plan.served), "a finding per damaged request, and none for the others: " \
                                            f"{len(errors)} for {len(plan.served)}"
    assert {f["route"] for f in errors} == set(CANDIDATES)
    assert report["checks"]["greedy"].get("passed", 0) >= 2, report["checks"]  # the rest is still judged
    assert len(errors) == sum(c.get("failed", 0) + c.get("error", 0) for c in report["checks"].values()), \
        (report["checks"], [f["title"] for f in errors])
    assert report["verdict"] == "wait" and f"{len(errors)} route error(s)" in report["verdict_reason"], \
        (report["verdict"], report["verdict_reason"])
    assert "malformed-response" in summary
    assert not markdown_problems(summary, report), markdown_problems(summary, report)


def test_a_clean_share_gives_a_clean_run(tmp_path):
    """The control at the same budget: the same server with no damage passes both checks."""
    base_url, stop = serve_faults(f"hf:{TARGET}", FaultPlan(share=0.0, stream_share=0.0), base=ROOT)
    try:
        result, report, summary = run_against(base_url, tmp_path)
    finally:
        stop()
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert report["findings"] == [] or all(f["severity"] not in ("error", "bug") for f in report["findings"])
    # every streamed request the damaged run sends (one per stream shape) is sent, and passes, here
    assert report["checks"]["streaming"] == {"passed": len(STREAM_SHAPES)}, report["checks"]
    assert not markdown_problems(summary, report), markdown_problems(summary, report)
