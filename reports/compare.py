"""Nightly comparison: what changed since a previous run, and a history line per run.

The findings diff (new, fixed, still failing), the run-wide acceptance length and the p-values that crossed 0.01;
per candidate, its answers, its acceptance (an exact test, prompt by prompt) and its speed against the previous
run's namesake (reports/regression.py), summarised one row per candidate.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from spec_route_suite.reports.regression import candidate_comparisons, versions_text

HISTORY_FILE = "history.jsonl"


def finding_key(finding: dict[str, Any]) -> str:
    """Stable across runs: the same check on the same route and test (titles carry numbers that move)."""
    return f"{finding['check']}|{finding['route']}|{finding['test_id']}"


def load_report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def compare_reports(current: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    now = {finding_key(f): f for f in current["findings"] if f["severity"] in ("bug", "error")}
    then = {finding_key(f): f for f in previous["findings"] if f["severity"] in ("bug", "error")}
    acceptance = {}
    for route in sorted(set(current.get("acceptance", {})) | set(previous.get("acceptance", {}))):
        a = (previous.get("acceptance", {}).get(route) or {}).get("mean_acceptance_length")
        b = (current.get("acceptance", {}).get(route) or {}).get("mean_acceptance_length")
        acceptance[route] = {"previous": a, "current": b,
                             "change": round(b - a, 3) if a is not None and b is not None else None}
    p_now = _p_values(current)
    p_then = _p_values(previous)
    p_changes = {key: {"previous": p_then[key], "current": p_now[key]}
                 for key in sorted(set(p_now) & set(p_then))
                 if (p_now[key] < 0.01) != (p_then[key] < 0.01)}
    return {
        "previous_run": previous["run_id"],
        "previous_verdict": previous["verdict"],
        "new": [now[k]["title"] + f" ({k})" for k in sorted(set(now) - set(then))],
        "fixed": [then[k]["title"] + f" ({k})" for k in sorted(set(then) - set(now))],
        "still_failing": [now[k]["title"] + f" ({k})" for k in sorted(set(now) & set(then))],
        "acceptance_length": acceptance,
        "p_value_crossings": p_changes,
        "candidates": candidate_comparisons(current, previous),
    }


def _p_values(report: dict[str, Any]) -> dict[str, float]:
    values = {}
    for m in report.get("measurements", {}).get("p_value", []):
        if isinstance(m.get("p_value"), (int, float)):
            values[f"{m.get('test_id')}|{m.get('name', '')}"] = float(m["p_value"])
    return values


def history_line(report: dict[str, Any]) -> str:
    return json.dumps({
        "run_id": report["run_id"], "finished_unix": report["finished_unix"], "verdict": report["verdict"],
        "complete": report["complete"], "counts": report["counts"],
        "findings": len(report["findings"]),
        "acceptance_length": {r: a.get("mean_acceptance_length") for r, a in report.get("acceptance", {}).items()},
    }, sort_keys=True)


def append_history(report_dir: Path, report: dict[str, Any]) -> None:
    """One line per run; a single small write, so concurrent runs never interleave within a line."""
    report_dir.mkdir(parents=True, exist_ok=True)
    with open(report_dir / HISTORY_FILE, "a", encoding="utf-8") as handle:
        handle.write(history_line(report) + "\n")


LISTED = 5   # findings listed per kind (new, fixed, still failing); the rest are in report.json `comparison`


def render_comparison(comparison: dict[str, Any], listed: int = LISTED) -> list[str]:
    """The candidates' regression table first (what a nightly reader looks for), then the findings since that run,
    `listed` of each kind, and the run-wide acceptance lengths."""
    lines = ["## Since the previous run", "",
             f"Compared with `{comparison['previous_run']}` (verdict {comparison['previous_verdict']}).", "",
             *candidate_table(comparison.get("candidates") or {})]
    for label in ("new", "fixed", "still_failing"):
        items = comparison[label]
        lines.append(f"- **{label.replace('_', ' ')}** ({len(items)})" + ("" if items else ": none"))
        lines += [f"  - {_cell(item)[:200]}" for item in items[:listed]]
        if len(items) > listed:
            lines.append(f"  - {'... and ' if listed else ''}{len(items) - listed} {'more' if listed else 'listed'} "
                         f"in report.json `comparison`")
    for route, change in comparison["acceptance_length"].items():
        if change["previous"] is not None or change["current"] is not None:   # a route that never speculated: none
            lines.append(f"- acceptance length `{route}` over the whole run: {change['previous']} -> "
                         f"{change['current']}")
    crossings = list(comparison["p_value_crossings"].items())
    for key, change in crossings[:listed]:
        lines.append(f"- p-value crossed 0.01 `{key}`: {change['previous']:.3g} -> {change['current']:.3g}")
    if len(crossings) > listed:
        lines.append(f"- {len(crossings) - listed} {'more ' if listed else ''}p-value crossings: report.json "
                     f"`comparison`")
    return lines + [""]


def candidate_table(candidates: dict[str, Any]) -> list[str]:
    """One row per candidate: its engine in both runs, its greedy answers, its acceptance and what the test says,
    its throughput at each level beside the baseline's (the machine's noise)."""
    if not candidates:
        return []
    lines = ["| candidate | engine | greedy answers | acceptance length (all prompts) | acceptance test | "
             "throughput tok/s (the baseline's), load average |", "|---|---|---|---|---|---|"]
    for name, entry in candidates.items():
        if not entry.get("compared"):
            lines.append(f"| `{name}` | {versions_text(entry['versions']) if entry.get('versions') else '-'} | "
                         f"not compared: {_cell(entry.get('why', ''))} | | | |")
            continue
        answers, acceptance = entry["answers"], entry["acceptance"]
        overall = (acceptance.get("groups") or {}).get("all prompts") or {}
        unconfirmed = entry.get("pair_unconfirmed") or []
        engine = _short_versions(entry["versions"]) + (
            f" (pair unconfirmed: {_cell(', '.join(unconfirmed[:3]))} not stated)" if unconfirmed else "")
        lines.append(f"| `{name}` | {engine} | {_answers_cell(answers, entry['prompts'])} | "
                     f"{_pair([overall.get('previous'), overall.get('current')], '.2f')} | {_verdict_cell(entry)} | "
                     f"{_speed_cell(entry['speed'])} |")
    return lines + ["", "Acceptance: a one-sided sign test over the prompts whose greedy acceptance changed, all "
                        "prompts and each prompt class, and a pooled drop threshold; by position and class: "
                        "report.json `comparison.candidates`. Speed is reported, not judged.", ""]


def _short_versions(versions: dict[str, str]) -> str:
    """versions_text without the releases' package names ("llama.cpp b1-4df29be -> b1-0c1e570"), where the build is
    stated (the report's inventories keep the rest)."""
    def short(text: str) -> str:
        build, _, release = text.partition(" (")
        return text if build.endswith("unknown") else build
    return versions_text({k: short(v) for k, v in versions.items()})


def _cell(text: Any) -> str:
    """Text safe in a table cell: no HTML block, no column break."""
    return str(text).replace("<", "&lt;").replace("|", "\\|")[:200]


def _answers_cell(answers: dict[str, Any], prompts: dict[str, int]) -> str:
    notes = answers["changed, both runs agree with their baselines"]
    changed = [f"{len(notes)} changed as their baseline's did ({', '.join(n['prompt'] for n in notes[:3])})"
               if notes else "",
               f"{answers['changed, already a finding']} now a finding" if answers["changed, already a finding"]
               else "", f"{answers['changed, fixed since']} fixed" if answers["changed, fixed since"] else ""]
    skipped = sum(v for k, v in prompts.items() if k != "compared")
    return (f"{answers['unchanged']}/{prompts['compared']} unchanged" + "".join(f"; {c}" for c in changed if c)
            + (f"; {skipped} prompt(s) not in both runs alike, skipped" if skipped else ""))


def _verdict_cell(entry: dict[str, Any]) -> str:
    """"REGRESSION on all prompts, fixture/code: 10 of 10 changed prompts lower (p=0.00098), -18%, most at draft
    position 4 (0.60 -> 0.00)", or "no regression (...)", or why no test was made."""
    groups = entry["acceptance"].get("groups") or {}
    overall = groups.get("all prompts") or {}
    if "p_value" not in overall:
        return "no test: " + _cell(entry["acceptance"]["why"].partition(", so")[0])
    found = entry.get("regression")
    row = groups[found["details"]["regressed"][0]] if found else overall
    if not row["changed"]:
        return f"no regression (all {row['prompts']} prompts drafted alike)"
    said = (f"{row['lower']} of {row['changed']} {row.get('unit') or 'changed prompts lower'} "
            f"(p={row['p_value']:.2g}), {-row['drop']:+.0%}")
    if row.get("unit"):   # the server's counters' rounds: which evidence it is
        said = f"the server's counters, {said}"
    if not found:
        return f"no regression: {said}"
    falls = [(a - b, i) for i, (a, b) in enumerate(zip(row["positions"]["previous"], row["positions"]["current"]))]
    fall, at = max(falls, default=(0, 0))
    return (f"**REGRESSION** on {_cell(', '.join(found['details']['regressed']))}: {said}"
            + (f", most at draft position {at + 1} ({row['positions']['previous'][at]:.2f} -> "
               f"{row['positions']['current'][at]:.2f})" if fall > 0 else ""))


def _speed_cell(levels: list[dict[str, Any]]) -> str:
    """"c=1: 89 -> 83 (107 -> 99), load 15.0 -> 14.6": the candidate's throughput, the baseline's, the load average."""
    if not levels:
        return "not measured in both runs"
    def noise(s):
        change, speedup = s.get("baseline_change"), s.get("speedup") or [None, None]
        said = f", speedup {_pair(speedup, '.2f')}" if None not in speedup else ""
        return said + (f" (the baseline itself {change:+.0%})" if change is not None else "")
    return "; ".join(f"c={s['concurrency']}: {_pair(s['throughput_tok_s'], '.0f')} "
                     f"({_pair(s['baseline_throughput_tok_s'], '.0f')}){noise(s)}, load "
                     f"{_pair([sum(v) / len(v) if v else None for v in s['load_avg_1m']], '.1f')}" for s in levels)


def _pair(values: list[Any], spec: str) -> str:
    return " -> ".join(format(v, spec) if isinstance(v, (int, float)) else "n/a" for v in values)


def main(argv: list[str] | None = None) -> int:
    """`python -m spec_route_suite.reports.compare RUN/report.json`: the run's comparison with its previous run as
    summary.md has it (the nightly recipe prints it last); exit 4 when the run was not --compare-to another."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m spec_route_suite.reports.compare RUN_DIR/report.json", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 4
    path = Path(args[0])
    path = path / "report.json" if path.is_dir() else path
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"{path}: cannot read a report ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        return 4
    if not report.get("comparison"):
        print(f"{path}: this run was not compared with a previous one (--compare-to RUN_DIR)", file=sys.stderr)
        return 4
    print("\n".join(render_comparison(report["comparison"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
