"""One upstream-ready issue per root cause a maintainer can act on (reports/filing.py decides which clusters), with
every check that saw it listed: issues/NNN-<engine>-<check>.md (the check with most of its findings), in the engine's
own bug template (reports/issue_templates.py), under MAX_CHARS (a GitHub issue holds 65,536) whatever the prompts:
a repro too long to quote (a long user prompt in its requests) is named by its path with its first lines quoted.

Every file says: how to file it (an HTML comment with the `gh issue create` line), what the route is, the server and
the client apart (the server as its inventory states it, "unknown" where it states nothing; its host is the
client's only when the suite started it), the minimal repro (the curl lines and the python script of repro/,
quoted whole and identical), expected vs actual with the baseline's answer to the same request as the control, a
route error's words as the server gave them, how often it happened, the last lines of the server's log when the
suite started that server, and the suite version and command that found it. Nothing is ticked for the reporter.
Environment: none.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spec_route_suite.reports.clusters import checks_of, frequency
from spec_route_suite.reports.filing import answered, baseline_of, why_not_filed
from spec_route_suite.reports.issue_environment import (environment, log_section, models, server_hardware, server_os,
                                                        server_version)
from spec_route_suite.reports.issue_templates import fence, template_for
from spec_route_suite.reports.repro import engine_of, slug
from spec_route_suite.reports.server_words import REFUSED, server_words

MAX_CHARS = 60_000
EVIDENCE_CHARS = 4_000
HEAD_CHARS, LINE_CHARS = 4_000, 200     # a repro script too long to quote: how much of its start is shown
CUT_NOTE = "\n\n(cut here to fit one issue of {limit:,} characters: see report.json and repro/ in the run folder)\n"


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
        parts.append("Expected (baseline) vs actual (candidate):\n" + fence(str(details["diff"])[:EVIDENCE_CHARS],
                                                                             "diff"))
    recorded = ((details.get("repro") or {}).get("case") or {}).get("recorded")
    if recorded and (recorded.get("baseline") or recorded.get("candidate")):
        parts.append("Answers during the run (the baseline's is the control, same request):\n"
                     + fence(json.dumps(recorded, indent=1)[:EVIDENCE_CHARS], "json"))
    if details.get("baseline_control"):
        parts.append("The baseline's answer to the same request (control):\n"
                     + fence(json.dumps(details["baseline_control"], indent=1, default=str)[:EVIDENCE_CHARS], "json"))
    if not parts:
        rest = {k: v for k, v in details.items() if k not in ("repro", "replay")}
        parts.append("Evidence:\n" + fence(json.dumps(rest, indent=1, default=str)[:EVIDENCE_CHARS], "json"))
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
    lines = (f"curl (`{paths[1]}`):\n{fence(sh.read_text(), 'sh')}" if curl else
             f"curl lines: `{paths[1]}` in the run folder (left out here to fit one issue; the script below sends "
             f"the same requests)")
    what = (f"Standalone script (`{paths[0]}`, python3 + httpx; exit 1 when the candidate's failure reproduces and "
            f"the baseline does not show it)")
    if script:
        return f"{lines}\n\n{what}:\n{fence(py.read_text(), 'python')}"
    text = py.read_text()
    return (f"{lines}\n\n{what}: `{paths[0]}` in the run folder, {len(text):,} characters (its requests carry "
            f"long prompts: more than one issue holds, so it is attached, not quoted). Its first lines, long lines "
            f"cut:\n{fence(_head(text), 'python')}")


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


def _summary(report: dict[str, Any], cluster: dict[str, Any], baseline: str | None) -> str:
    checks = [f"`{c}`" for c in checks_of(cluster).split(", ")]
    named = checks[0] + " check" if len(checks) == 1 else ", ".join(checks[:-1]) + f" and {checks[-1]} checks"
    route, how_often = cluster["route"], frequency(cluster)
    if cluster["severity"] == "error":
        earlier = (f" It had answered {answered(report, route)} request(s) in this run before."
                   if cluster["signature"] == REFUSED else "")
        lead = (f"Route `{route}` fails requests in the {named}, whichever check sends them: {how_often}. The "
                f"baseline `{baseline}` (the same requests without speculation: the control) does not fail them."
                f"{earlier}")
    else:
        lead = (f"Route `{route}` fails the {named} against its baseline `{baseline}` ({cluster['severity']}): "
                f"{how_often}. The baseline answers the same requests without speculation (the control); what it does "
                f"the same way on the same request is engine behaviour, not reported here.")
    return f"{lead}\n\n{_checks(cluster)}".rstrip()


def _words(report: dict[str, Any], cluster: dict[str, Any]) -> str:
    """A route error as the server (or the connection) put it, unnormalised: the first failed request's."""
    if cluster["severity"] != "error":
        return ""
    first = report["findings"][cluster["findings"][0]]
    words = server_words(first) or first.get("title", "")
    return f"The server's answer to the first failed request, as it came:\n{fence(words[:EVIDENCE_CHARS], 'text')}"


def render_issue(run_dir: Path, report: dict[str, Any], cluster: dict[str, Any], path: str = "issue.md") -> str:
    """The issue file's text for one filed cluster, `path` being where it is written in the run folder."""
    route = cluster["route"]
    repro = (report["findings"][cluster["findings"][0]].get("details") or {}).get("repro") or {}
    baseline = (repro.get("routes") or {}).get("baseline") or baseline_of(report)
    template = template_for(engine_of(report, route), cluster["severity"])
    parts = {"summary": _summary(report, cluster, baseline), "words": _words(report, cluster),
             "environment": environment(report, route, baseline),
             "command": _launch(report, route, cluster.get("repro_routes")),
             "baseline_command": _launch(report, baseline, cluster.get("repro_routes")),
             "repro": _repro_section(run_dir, cluster), "evidence": _evidence(report, cluster),
             "found_by": _found_by(report), "log": log_section(report, route),
             "version": server_version(report, route), "os": server_os(report, route),
             "hardware": server_hardware(report, route), "models": models(report, route)}
    title = (cluster.get("cause") or cluster["title"])[:200]
    text = template.render(title, path, parts)
    shrink = (("evidence", lambda: parts["evidence"][:2000] + "\n\n(evidence cut to fit one issue: see report.json)"),
              ("repro", lambda: _repro_section(run_dir, cluster, curl=False)),
              # the script alone is too long: a long user prompt in its requests
              ("repro", lambda: _repro_section(run_dir, cluster, curl=False, script=False)))
    for key, smaller in shrink:
        if len(text) < MAX_CHARS:
            break
        parts[key] = smaller()
        text = template.render(title, path, parts)
    if len(text) >= MAX_CHARS:   # whatever else a run made long (a command line, an inventory): the bound holds
        note = CUT_NOTE.format(limit=MAX_CHARS)
        text = text[:MAX_CHARS - len(note) - 1] + note
    return text


def write_issue_files(run_dir: Path, report: dict[str, Any], clusters: list[dict[str, Any]],
                      redact=lambda text: text) -> list[str]:
    """issues/NNN-<engine>-<check>.md per cluster a maintainer can act on; sets each cluster's "issue" (its path, or
    None) and "not_filed" (why not, or ""); returns the paths written."""
    written = []
    for cluster in clusters:
        cluster["not_filed"] = why_not_filed(cluster, report, clusters)
        cluster["issue"] = None
        if cluster["not_filed"]:
            continue
        name = f"issues/{cluster['id']:03d}-{slug(engine_of(report, cluster['route']))}-{slug(cluster['check'])}.md"
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redact(render_issue(run_dir, report, cluster, name)))
        cluster["issue"] = name
        written.append(name)
    return written
