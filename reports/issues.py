"""One upstream-ready issue per finding cluster, that is per cause (reports/clusters.py), with every check that saw it
listed: issues/NNN-<engine>-<check>.md (the check with most of its findings), shaped like the engine's own
bug template, under MAX_CHARS (a GitHub issue holds 65,536) whatever the prompts: a repro too long to quote
(a long user prompt in its requests) is named by its path with its first lines quoted.

vLLM's template: the environment, then "Describe the bug" with a minimal repro. llama.cpp's: name and
version, operating system, affected module, command line, problem description and steps, first bad commit
(unknown here). SGLang's: checklist, describe the bug, reproduction, environment. Anything else gets a plain
bug report. Every file says: what the route is (inventory, launch command line), the minimal repro (the curl
lines and the python script of repro/, quoted whole and identical), expected vs actual with the baseline's
answer to the same request as the control, how often it happened, and the suite version and command that
found it. Environment: none.
"""
from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any, Callable

from spec_route_suite.reports.clusters import checks_of, frequency
from spec_route_suite.reports.repro import engine_of, slug

MAX_CHARS = 60_000
EVIDENCE_CHARS = 4_000
HEAD_CHARS, LINE_CHARS = 4_000, 200     # a repro script too long to quote: how much of its start is shown
CUT_NOTE = "\n\n(cut here to fit one issue of {limit:,} characters: see report.json and repro/ in the run folder)\n"


def _fence(text: str, lang: str = "") -> str:
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _route_block(report: dict[str, Any], name: str) -> str:
    """Inventory of a route, one line per fact."""
    inventory = (report.get("inventories") or {}).get(name) or {}
    spec = next((c for c in [*(report.get("config") or {}).get("candidates", []),
                             (report.get("config") or {}).get("baseline") or {}] if c.get("name") == name), {})
    facts = {"route": f"{name} ({spec.get('kind')}: {spec.get('base_url') or spec.get('model') or ''})",
             "engine": f"{inventory.get('engine', '?')} {inventory.get('version', '')}".strip(),
             "model": inventory.get("model"), "draft": inventory.get("draft"),
             "speculation": json.dumps(inventory.get("speculation") or {}, sort_keys=True),
             "dtype": inventory.get("dtype"), "max_model_len": inventory.get("max_model_len"),
             "hardware": inventory.get("hardware"), "tokenizer hash": inventory.get("tokenizer_hash")}
    return "\n".join(f"{k}: {v}" for k, v in facts.items() if v not in (None, "", "{}"))


def _launch(report: dict[str, Any], name: str, routes: dict[str, Any] | None) -> str:
    """How the route's server was started: the managed server's command line, or the in-process server's."""
    launch = (report.get("server_launch") or {}).get(name)
    if isinstance(launch, dict) and launch.get("command"):
        command = launch["command"]
        return " ".join(command) if isinstance(command, list) else str(command)
    if launch:
        return json.dumps(launch, sort_keys=True, default=str)[:2000]
    for info in (routes or {}).values():
        if info.get("name") == name:
            return info.get("serve") or f"(a server at {info.get('base_url')}, started outside the suite)"
    return "(not recorded)"


def _evidence(report: dict[str, Any], cluster: dict[str, Any]) -> str:
    """Expected vs actual of the cluster's first finding, with the baseline's answer to the same request."""
    finding = report["findings"][cluster["findings"][0]]
    details = finding.get("details") or {}
    parts = []
    if details.get("diff"):
        parts.append("Expected (baseline) vs actual (candidate):\n" + _fence(str(details["diff"])[:EVIDENCE_CHARS],
                                                                             "diff"))
    recorded = ((details.get("repro") or {}).get("case") or {}).get("recorded")
    if recorded and (recorded.get("baseline") or recorded.get("candidate")):
        parts.append("Answers during the run (the baseline's is the control, same request):\n"
                     + _fence(json.dumps(recorded, indent=1)[:EVIDENCE_CHARS], "json"))
    if details.get("baseline_control"):
        parts.append("The baseline's answer to the same request (control):\n"
                     + _fence(json.dumps(details["baseline_control"], indent=1, default=str)[:EVIDENCE_CHARS], "json"))
    if not parts:
        rest = {k: v for k, v in details.items() if k not in ("repro", "replay")}
        parts.append("Evidence:\n" + _fence(json.dumps(rest, indent=1, default=str)[:EVIDENCE_CHARS], "json"))
    if cluster["count"] > 1:
        others = [report["findings"][i]["title"] for i in cluster["findings"][1:6]]
        parts.append("Other findings of the same cause:\n" + "\n".join(f"- {t[:300]}" for t in others)
                     + ("\n- ..." if cluster["count"] > 6 else ""))
    return "\n\n".join(parts)


def _checks(cluster: dict[str, Any]) -> str:
    """Every check that saw the cause: its findings, its tests, the first finding's title."""
    rows = cluster.get("checks") or []
    if len(rows) < 2 and not cluster.get("shape"):
        return ""
    cause = (cluster["signature"].removeprefix("answer shape: ") if cluster.get("shape") else
             f"the same {cluster['kind']}: {cluster['signature']}")
    lines = [f"Every check that saw it (one cause: {cause}):",
             "", "| check | findings | tests | first finding |", "|---|---|---|---|"]
    for row in rows:
        of = f" of {row['of']}" if row.get("of") else ""
        title = str(row["title"])[:200].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {row['check']} | {row['count']} | {row['tests_total']}{of} | {title} |")
    return "\n".join(lines) + "\n\n"


def _repro_section(run_dir: Path, cluster: dict[str, Any], *, curl: bool = True, script: bool = True) -> str:
    """The curl lines and the script, quoted whole; without the curl lines (`curl=False`) when both do not fit
    one issue (a load schedule resends every request in flight: the script alone says the same); with the
    script named by its path and its head quoted (`script=False`) when even the script alone does not fit (a
    long user prompt is in every request it resends)."""
    paths = cluster.get("repro") or []
    if not paths:
        return ("No repro script: the finding(s) of this cluster carry no request that can be resent on its own "
                "(see report.json for what the check measured).")
    py, sh = (run_dir / p for p in paths)
    lines = (f"curl (`{paths[1]}`):\n{_fence(sh.read_text(), 'sh')}" if curl else
             f"curl lines: `{paths[1]}` in the run folder (left out here to fit one issue; the script below sends "
             f"the same requests)")
    what = (f"Standalone script (`{paths[0]}`, python3 + httpx; exit 1 when the candidate's failure reproduces and "
            f"the baseline does not show it)")
    if script:
        return f"{lines}\n\n{what}:\n{_fence(py.read_text(), 'python')}"
    text = py.read_text()
    return (f"{lines}\n\n{what}: `{paths[0]}` in the run folder, {len(text):,} characters (its requests carry "
            f"long prompts: more than one issue holds, so it is attached, not quoted). Its first lines, long lines "
            f"cut:\n{_fence(_head(text), 'python')}")


def _head(text: str) -> str:
    """The start of a script, each line cut at LINE_CHARS, at most HEAD_CHARS in all."""
    lines, size = [], 0
    for line in text.splitlines():
        line = line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + f"... ({len(line):,} characters)"
        if size + len(line) > HEAD_CHARS:
            lines.append("# ... (the rest is in the file)")
            break
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _found_by(report: dict[str, Any]) -> str:
    return (f"Found by spec-route-suite {report.get('suite_version', '?')} (run `{report.get('run_id')}`): "
            f"`{report.get('command') or 'spec-route-suite'}`")


def render_issue(run_dir: Path, report: dict[str, Any], cluster: dict[str, Any]) -> str:
    findings, route = report["findings"], cluster["route"]
    repro = (findings[cluster["findings"][0]].get("details") or {}).get("repro") or {}
    baseline = (repro.get("routes") or {}).get("baseline") or ((report.get("config") or {}).get("baseline") or {}).get("name")
    checks = [f"`{c}`" for c in checks_of(cluster).split(", ")]
    named = checks[0] + " check" if len(checks) == 1 else ", ".join(checks[:-1]) + f" and {checks[-1]} checks"
    data = {"title": cluster["title"][:200], "summary": (
        f"Route `{route}` fails the {named} against its baseline `{baseline}` "
        f"({cluster['severity']}): {frequency(cluster)}. The baseline answers the same requests without "
        f"speculation (the control); what it does the same way on the same request is engine behaviour, not "
        f"reported here.\n\n{_checks(cluster)}").rstrip(),
        "environment": f"{_route_block(report, route)}\n\nbaseline (control):\n{_route_block(report, baseline)}\n"
                       f"os: {platform.platform()}",
        "command": _launch(report, route, cluster.get("repro_routes")),
        "baseline_command": _launch(report, baseline, cluster.get("repro_routes")),
        "repro": _repro_section(run_dir, cluster), "evidence": _evidence(report, cluster),
        "found_by": _found_by(report), "version": ((report.get("inventories") or {}).get(route) or {}).get("version")}
    text = TEMPLATES.get(engine_of(report, route), generic)(data)
    if len(text) >= MAX_CHARS:
        data["evidence"] = data["evidence"][:2000] + "\n\n(evidence cut to fit one issue: see report.json)"
        text = TEMPLATES.get(engine_of(report, route), generic)(data)
    if len(text) >= MAX_CHARS:
        data["repro"] = _repro_section(run_dir, cluster, curl=False)
        text = TEMPLATES.get(engine_of(report, route), generic)(data)
    if len(text) >= MAX_CHARS:   # the script alone is too long: a long user prompt in its requests
        data["repro"] = _repro_section(run_dir, cluster, curl=False, script=False)
        text = TEMPLATES.get(engine_of(report, route), generic)(data)
    if len(text) >= MAX_CHARS:   # whatever else a run made long (a command line, an inventory): the bound holds
        note = CUT_NOTE.format(limit=MAX_CHARS)
        text = text[:MAX_CHARS - len(note) - 1] + note
    return text


def _reproduction(d: dict[str, str]) -> str:
    return (f"Server command line:\n{_fence(d['command'], 'shell')}\nBaseline server command line:\n"
            f"{_fence(d['baseline_command'], 'shell')}\n\n{d['repro']}")


def vllm(d: dict[str, str]) -> str:
    return f"""# [Bug]: {d['title']}

### Your current environment

<details>
<summary>Route inventory (in place of collect_env.py: what the server states about itself)</summary>

{_fence(d['environment'], 'text')}

Server command line:
{_fence(d['command'], 'sh')}
Baseline server command line:
{_fence(d['baseline_command'], 'sh')}
</details>

### 🐛 Describe the bug

{d['summary']}

{d['evidence']}

Minimal repro (resends the failing request(s) to the candidate, and to the baseline as the control):

{d['repro']}

{d['found_by']}

### Before submitting a new issue...

- [x] Make sure you already searched for relevant issues, and asked the chatbot living at the bottom right corner of the [documentation page](https://docs.vllm.ai/en/latest/), which can answer lots of frequently asked questions.
"""


def llama_cpp(d: dict[str, str]) -> str:
    return f"""# Misc. bug: {d['title']}

### Name and Version

{_fence(d['version'] or 'unknown (the server did not state its build)', 'text')}

### Operating systems

{platform.system()}

### Which llama.cpp modules do you know to be affected?

llama-server

### Command line

{_fence(d['command'], 'shell')}
Baseline (the same server without speculation):
{_fence(d['baseline_command'], 'shell')}

### Problem description & steps to reproduce

{d['summary']}

{d['evidence']}

Steps to reproduce: start both servers as above, then run the repro below.

{d['repro']}

{d['found_by']}

Route inventory:
{_fence(d['environment'], 'text')}

### First Bad Commit

unknown

### Relevant log output

{_fence('(see the repro script output; the suite records no server log)', 'shell')}
"""


def sglang(d: dict[str, str]) -> str:
    return f"""# [Bug] {d['title']}

### Checklist

- [x] I searched related issues but found no solution.
- [x] The bug persists in the latest version.
- [x] This report has a minimal reproducible example.

### Describe the bug

{d['summary']}

{d['evidence']}

### Reproduction

{_reproduction(d)}

{d['found_by']}

### Environment

{_fence(d['environment'], 'text')}
"""


def generic(d: dict[str, str]) -> str:
    return f"""# Bug: {d['title']}

## Describe the bug

{d['summary']}

## To reproduce

{_reproduction(d)}

## Expected vs actual

{d['evidence']}

## Environment

{_fence(d['environment'], 'text')}

{d['found_by']}
"""


# keyed by the engine's one spelling: its flavour's `engine` (reports/repro.py engine_of)
TEMPLATES: dict[str, Callable[[dict[str, str]], str]] = {"vllm": vllm, "llama.cpp": llama_cpp, "sglang": sglang}


def write_issue_files(run_dir: Path, report: dict[str, Any], clusters: list[dict[str, Any]],
                      redact=lambda text: text) -> list[str]:
    """issues/NNN-<engine>-<check>.md per cluster; sets cluster["issue"] and returns the paths written."""
    written = []
    for cluster in clusters:
        name = f"issues/{cluster['id']:03d}-{slug(engine_of(report, cluster['route']))}-{slug(cluster['check'])}.md"
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redact(render_issue(run_dir, report, cluster)))
        cluster["issue"] = name
        written.append(name)
    return written
