"""Findings clustered by cause: one entry per cause on a route, with every check that saw it, a count and examples.

Why: one cause shows up once per prompt, per variant and per check. A server whose context is smaller than the
suite was told fails every long greedy prompt with the same refusal; a server that counts an accepted block
before sending it ends answers short in the boundary sweep (each variant), the stop-string sweep (each prompt),
the greedy and feature checks and the n-choice usage checks. A maintainer wants one report that lists every
check it broke ("77 findings in boundary, features, distribution, chat"), not 28. A cause is, in order:
- a route error's cause in the server's words (reports/server_words.py: its status and message with numbers and
  ids taken out, or one cause per kind of silence), whichever check met it;
- a bug whose answers show a shape (reports/shapes.py: how the answer ended, e.g. "ends before max_tokens while
  usage counts tokens never returned"), across checks;
- a bug whose check names its cause (`details["cause"]`), across checks: an answer that differs under concurrent
  load from the same request alone (reports/findings.py UNDER_LOAD: mixing attributed or not, untrustworthy serial
  references, accuracy flips, batch-composition and KV-pressure differences, hung-up clients' neighbours; load
  findings carry no answers that show a shape), a greedy answer that diverges from the baseline's beyond a
  near-tie (DIVERGES: the greedy and chat checks alike), or stream token ids the baseline carries and the
  candidate drops, seen by the streaming and the chat checks alike;
- otherwise a bug's check and the test function that found it, whatever its parameters: one test is one mechanism
  (the penalties' test for frequency, presence and repetition penalties alike, the structured-output test for
  json_object and json_schema, logit_bias raised or lowered), so one fault of it is one cause;
- otherwise (a warning, a near-tie, a finding of no test) the check and the finding's signature: its title with
  what varies per request taken out (its prompt id, the request id in an error, quoted text, signed numbers other
  than an HTTP status), unless the check states one (`details["signature"]`): the same first-split pattern, the
  same broken rule.
Engine notes and info lines are not clustered (the summary lists engine behaviour apart; info is context). Which
clusters become issue files is reports/filing.py's rule.
Environment: none.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Sequence

from spec_route_suite.reports.coverage import ANY_ROUTE, route_of_test
from spec_route_suite.reports.server_words import SILENCES, SILENT_KINDS, cause_of_error, server_words
from spec_route_suite.reports.shapes import shape_of

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
    text = re.sub(r"(?<!HTTP )(?<![A-Za-z_])[-+]?\d+(\.\d+)?(e-?\d+)?", "N", text)
    return re.sub(r"\s+", " ", text).strip()[:300]


def kind_of(finding: dict[str, Any]) -> str:
    """The finding's kind: its severity, and for a route error what failed (HTTP status, timeout, ...)."""
    error = (finding.get("details") or {}).get("error_kind")
    return f"{finding['severity']}/{error}" if finding.get("severity") == "error" and error else finding["severity"]


def cause_of(finding: dict[str, Any]) -> tuple[str, str, str]:
    """(scope, signature, shape key) of the finding's cause: scope is its check for a cause of one check, "" for
    one that crosses checks (a route error's words, a cause the check names, an answer shape)."""
    if finding.get("severity") == "error":
        return "", cause_of_error(finding), ""
    if finding.get("severity") == "bug":
        shape = shape_of(finding)
        if shape is not None:
            return "", f"answer shape: {shape.phrase}", shape.key
        cause = (finding.get("details") or {}).get("cause")
        if cause:   # a cause the check names as crossing checks (under load, a divergence, a dropped capability)
            return "", str(cause), ""
        if test_function(finding) and not (finding.get("details") or {}).get("signature"):
            return finding["check"], f"found by {test_function(finding)}", ""
    return finding["check"], signature(finding), ""


def death_keys(findings: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str, str, str, str]]:
    """Route -> the cluster key of its death (a route-died finding), for the routes that died in the run."""
    keys = {}
    for finding in findings:
        if (finding.get("details") or {}).get("error_kind") == "route-died" and finding.get("severity") in CLUSTERED:
            keys.setdefault(finding["route"], (finding["route"], finding["severity"], *cause_of(finding)))
    return keys


def dying_words(finding: dict[str, Any]) -> bool:
    """A route error a dying server gives (a lost or refused connection, a server error, the silence of a wedge:
    a timeout, a health check unanswered): on a route that died in the run it is one cause with the death,
    whichever check met it (one issue file, not one per check)."""
    details = finding.get("details") or {}
    if finding.get("severity") != "error":
        return False
    kind = details.get("error_kind")
    return kind == "connection-lost" or kind in SILENT_KINDS or bool(details.get("hung")) or (
        kind == "http-error" and bool(re.search(r"HTTP 5\d\d", finding.get("title", ""))))


def test_function(finding: dict[str, Any]) -> str:
    """The test function that recorded the finding, without its parameters ("" when it names none)."""
    nodeid = str(finding.get("test_id") or "")
    return nodeid.rsplit("::", 1)[-1].split("[", 1)[0] if "::" in nodeid else ""


def cluster_findings(findings: Sequence[dict[str, Any]], tests: Sequence[dict[str, Any]] = (),
                     candidates: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Clusters, most severe first and then the largest; `id` numbers them from 1 (the repro and issue files'
    NNN). `check` is the check with most of the cluster's findings (it names the files), `checks` every check
    that saw the cause, each with its findings, tests and how many of its tests ran on the route (`of`)."""
    groups: dict[tuple[str, str, str, str, str], list[int]] = {}
    deaths = death_keys(findings)
    for index, finding in enumerate(findings):
        if finding.get("severity") in CLUSTERED:
            scope, sig, shape = cause_of(finding)
            key = (finding["route"], finding["severity"], scope, sig, shape)
            if finding["route"] in deaths and dying_words(finding):
                key = deaths[finding["route"]]
            groups.setdefault(key, []).append(index)
    ordered = sorted(groups.items(), key=lambda item: (CLUSTERED.index(item[0][1]), -len(item[1]), item[1][0]))
    clusters = []
    for number, ((route, severity, _, sig, shape), members) in enumerate(ordered, start=1):
        per_check = _per_check(findings, members, tests=tests, route=route, candidates=candidates)
        main = per_check[0]
        # the main check's findings first: the issue quotes the first one, the repro script resends its requests
        members = sorted(members, key=lambda i: ([c["check"] for c in per_check].index(findings[i]["check"]), i))
        first = next((findings[i] for i in members if findings[i]["severity"] == severity), findings[members[0]])
        prompts = list(dict.fromkeys(findings[i].get("prompt_id") for i in members if findings[i].get("prompt_id")))
        cause, title = _titles(first, sig, shape, per_check)
        clusters.append({
            "id": number, "check": main["check"], "checks": per_check, "route": route,
            "severity": first["severity"], "kind": kind_of(first), "signature": sig, "shape": shape or None,
            "count": len(members), "findings": members, "cause": cause, "title": title,
            "prompts": prompts[:EXAMPLES], "prompts_total": len(prompts),
            "tests": list(dict.fromkeys(findings[i].get("test_id", "") for i in members))[:EXAMPLES],
            "tests_total": len({findings[i].get("test_id", "") for i in members}),
            "of": sum(c["of"] for c in per_check),
        })
    return clusters


def _titles(first: dict[str, Any], sig: str, shape: str, per_check: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """(cause, title): the cause in words, with the checks that saw it when it crosses checks (an issue's title), and
    the same with the first finding's title as an example where that says more (the summary's line). An answer
    shape's phrase or a cause the check names, always with its checks; a route error's server message as the first
    finding got it (status and words, not normalised), or its kind of silence with the first finding's title; else
    the first finding's title."""
    title = first["title"]
    named = shape or (first["severity"] == "bug" and (first.get("details") or {}).get("cause"))
    if named:
        head = sig.removeprefix("answer shape: ")
    elif first["severity"] == "error":
        head = server_words(first) or (f"{sig}; first: {title}" if sig in SILENCES else title)
    else:
        head = title
    cause = f"{head[:300]} ({_checks_phrase(per_check)})" if named or len(per_check) > 1 else head[:300]
    return cause, (f"{cause}; e.g. {title}"[:500] if named and not title.startswith(head) else cause)


def _per_check(findings: Sequence[dict[str, Any]], members: Sequence[int], *, tests: Sequence[dict[str, Any]],
               route: str, candidates: Sequence[str]) -> list[dict[str, Any]]:
    """The checks of a cluster's findings, most findings first (then first seen): count, tests, an example."""
    counts = Counter(findings[i]["check"] for i in members)
    order = list(dict.fromkeys(findings[i]["check"] for i in members))
    rows = []
    for check in sorted(order, key=lambda c: (-counts[c], order.index(c))):
        mine = [findings[i] for i in members if findings[i]["check"] == check]
        rows.append({"check": check, "count": counts[check], "title": mine[0]["title"],
                     "tests_total": len({f.get("test_id", "") for f in mine}),
                     "of": _tests_of(tests, check=check, route=route, candidates=candidates)})
    return rows


def _checks_phrase(per_check: Sequence[dict[str, Any]]) -> str:
    return "seen by " + ", ".join(f"{c['check']} ({c['count']})" for c in per_check)


def _tests_of(tests: Sequence[dict[str, Any]], *, check: str, route: str, candidates: Sequence[str]) -> int:
    """Tests of `check` that ran on `route` (a baseline finding: every test of the check)."""
    ran = [t for t in tests if t.get("check") == check and t.get("outcome") not in ("skipped", "deselected")]
    if route not in candidates:
        return len(ran)
    return sum(route_of_test(t.get("nodeid", ""), candidates) in (route, ANY_ROUTE) for t in ran)


def frequency(cluster: dict[str, Any]) -> str:
    """How often: "3 finding(s) on 3 prompt(s), in 3 of 70 greedy test(s) on `candidate`"; a cause several checks
    saw names each: "... in 12 of 40 boundary test(s), 2 of 9 chat test(s) on `candidate`"."""
    prompts = f" on {cluster['prompts_total']} prompt(s)" if cluster.get("prompts_total") else ""
    per_check = cluster.get("checks") or [{"check": cluster["check"], "tests_total": cluster["tests_total"],
                                           "of": cluster.get("of")}]
    tests = ", ".join(_tests_phrase(c) for c in per_check)
    return f"{cluster['count']} finding(s){prompts}, in {tests} on `{cluster['route']}`"


def _tests_phrase(row: dict[str, Any]) -> str:
    of = f" of {row['of']}" if row.get("of") else ""
    return f"{row['tests_total']}{of} {row['check']} test(s)"


def checks_of(cluster: dict[str, Any]) -> str:
    """The checks that saw a cluster's cause, for a table cell: "boundary" or "boundary, features, chat"."""
    return ", ".join(c["check"] for c in cluster.get("checks") or [{"check": cluster["check"]}])
