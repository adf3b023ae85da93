"""Which finding clusters become an upstream issue file: only what an engine's maintainer can act on.

Why: users attach issues/ to engine issues as they are. An audit (issue #41) found files no maintainer could act on:
the suite's own "accuracy under load weakly verified" warning filed as a bug, a run against closed ports filed as
"cannot connect", findings about the baseline's own behaviour, the same server error once per stressor. A cluster
is filed when it is a candidate's bug or route error (reports/clusters.py: one cluster per root cause) that the
baseline does not show; otherwise `why_not_filed` says why, and the summary shows that instead of a file:
- warnings and near-ties are the suite's statements about its evidence (weak power, a numerical near-tie), not bugs;
- a finding about the baseline (or no route) judges the reference, not the candidate's engine;
- a cause the baseline shows too (the same answer shape, the same server words) is engine behaviour on both routes
  (a check's other bugs already exclude what the baseline does on the same request);
- "cannot connect" from a route that answered nothing in the whole run is the client's configuration (a wrong URL,
  a server not started), not an engine bug; after the route had answered, it is the server going away, and filed.
Environment: none.
"""
from __future__ import annotations

from typing import Any, Sequence

from spec_route_suite.reports.server_words import REFUSED

FILED_SEVERITIES = ("bug", "error")


def candidates_of(report: dict[str, Any]) -> list[str]:
    return [c.get("name") for c in (report.get("config") or {}).get("candidates", [])]


def baseline_of(report: dict[str, Any]) -> str | None:
    return ((report.get("config") or {}).get("baseline") or {}).get("name")


def answered(report: dict[str, Any], route: str) -> int:
    """Requests the route answered in the run, as the client timed them (0 when it timed none)."""
    return int(((report.get("latency") or {}).get(route) or {}).get("requests") or 0)


def cause_key(cluster: dict[str, Any]) -> tuple[str, str, str]:
    """What makes two routes' clusters the same cause: severity, signature and answer shape, not the route."""
    return cluster["severity"], cluster["signature"], cluster.get("shape") or ""


def why_not_filed(cluster: dict[str, Any], report: dict[str, Any], clusters: Sequence[dict[str, Any]]) -> str:
    """"" when the cluster gets an issue file; else the reason it does not, in a few words."""
    if cluster["severity"] not in FILED_SEVERITIES:
        return (f"a suite {cluster['severity']}, not an engine bug: it weakens or qualifies the evidence "
                f"(verdict and gaps name it)")
    baseline = baseline_of(report)
    if cluster["route"] not in candidates_of(report):
        return (f"about the baseline `{baseline}` itself: the reference the candidates are judged against"
                if cluster["route"] == baseline else "about no candidate route")
    never_reached = cluster["signature"] == REFUSED or "cannot connect" in str(cluster.get("cause", ""))
    if never_reached and not answered(report, cluster["route"]):   # refused, or "died" of a request it never got
        return ("client-side: the suite could not connect and the route answered nothing in this run (a "
                "configuration problem: its URL, port or server start)")
    comparable = cluster["severity"] == "error" or cluster.get("shape")   # a check judges its bugs beside the baseline
    if comparable and any(c["route"] == baseline and cause_key(c) == cause_key(cluster) for c in clusters):
        return f"the baseline `{baseline}` shows the same cause: engine behaviour on both routes, not speculation's"
    return ""
