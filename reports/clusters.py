"""Findings clustered by root cause: one entry per (check, route, kind, signature) with a count and examples.

Why: one cause shows up once per prompt. A server whose context is smaller than the suite was told fails every
long greedy prompt with the same refusal; a stream that drops its last token does so on every prompt. A
maintainer wants one report with "14 of 70 prompts", not 14 reports. The signature is the finding's title
with what varies per request taken out (its prompt id, the request id in an error, quoted text, numbers other
than an HTTP status), unless the check states one (`details["signature"]`): the same error text, the same
first-split pattern, the same broken rule. Engine notes and info lines are not clustered (the summary lists
engine behaviour apart; info is context). Environment: none.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from spec_route_suite.reports.coverage import ANY_ROUTE, route_of_test

CLUSTERED = ("bug", "error", "near-tie", "warning")   # in the order the summary lists them
EXAMPLES = 5


def signature(finding: dict[str, Any]) -> str:
    """What stays the same when one cause strikes several requests."""
    details = finding.get("details") or {}
    if details.get("signature"):
        return str(details["signature"])
    text = finding.get("title", "")
    if finding.get("prompt_id"):
        text = text.replace(str(finding["prompt_id"]), "<prompt>")
    text = re.sub(r"\[[^\]]*\]", "[...]", text)                       # an error's [route request id]
    text = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "'...'", text)         # quoted answers and names
    text = re.sub(r"(?<!HTTP )(?<![A-Za-z_])-?\d+(\.\d+)?(e-?\d+)?", "N", text)
    return re.sub(r"\s+", " ", text).strip()[:300]


def kind_of(finding: dict[str, Any]) -> str:
    """The finding's kind: its severity, and for a route error what failed (HTTP status, timeout, ...)."""
    error = (finding.get("details") or {}).get("error_kind")
    return f"{finding['severity']}/{error}" if finding.get("severity") == "error" and error else finding["severity"]


def cluster_findings(findings: Sequence[dict[str, Any]], tests: Sequence[dict[str, Any]] = (),
                     candidates: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Clusters, most severe first and then the largest; `id` numbers them from 1 (the repro and issue files'
    NNN). `of` is how many tests of that check ran on that route, for "N of M"."""
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for index, finding in enumerate(findings):
        if finding.get("severity") in CLUSTERED:
            key = (finding["check"], finding["route"], kind_of(finding), signature(finding))
            groups.setdefault(key, []).append(index)
    ordered = sorted(groups.items(), key=lambda item: (CLUSTERED.index(item[0][2].split("/")[0]), -len(item[1]),
                                                       item[1][0]))
    clusters = []
    for number, ((check, route, kind, sig), members) in enumerate(ordered, start=1):
        first = findings[members[0]]
        prompts = list(dict.fromkeys(findings[i].get("prompt_id") for i in members if findings[i].get("prompt_id")))
        clusters.append({
            "id": number, "check": check, "route": route, "severity": first["severity"], "kind": kind,
            "signature": sig, "count": len(members), "findings": members, "title": first["title"],
            "prompts": prompts[:EXAMPLES], "prompts_total": len(prompts),
            "tests": list(dict.fromkeys(findings[i].get("test_id", "") for i in members))[:EXAMPLES],
            "tests_total": len({findings[i].get("test_id", "") for i in members}),
            "of": _tests_of(tests, check=check, route=route, candidates=candidates),
        })
    return clusters


def _tests_of(tests: Sequence[dict[str, Any]], *, check: str, route: str, candidates: Sequence[str]) -> int:
    """Tests of `check` that ran on `route` (a baseline finding: every test of the check)."""
    ran = [t for t in tests if t.get("check") == check and t.get("outcome") not in ("skipped", "deselected")]
    if route not in candidates:
        return len(ran)
    return sum(route_of_test(t.get("nodeid", ""), candidates) in (route, ANY_ROUTE) for t in ran)


def frequency(cluster: dict[str, Any]) -> str:
    """How often: "3 finding(s) on 3 prompt(s), in 3 of 70 greedy test(s) on `candidate`"."""
    prompts = f" on {cluster['prompts_total']} prompt(s)" if cluster.get("prompts_total") else ""
    of = f" of {cluster['of']}" if cluster.get("of") else ""
    return (f"{cluster['count']} finding(s){prompts}, in {cluster['tests_total']}{of} {cluster['check']} test(s) "
            f"on `{cluster['route']}`")
