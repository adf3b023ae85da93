"""A route error's cause in the server's own words: what stays the same whichever check met it.

Why: one server error reaches many checks. A proxy that refuses a chat ("HTTP 400: All non-assistant messages must
contain 'content'") fails one request in each of six stressors; each stressor words its failure its own way ("accuracy
load: 1 of 96 requests failed at concurrency 8; first ... : http-error"), so clustered by those titles it was six
issue files that never quoted the server. Here the cause is the server's status and message, with what varies per
request taken out (numbers, ids, request and route names), found wherever the finding keeps it: a load run's first
failure, a route error's own description, a check's problem lines. Errors that are not the server's words have one
cause per kind of silence:
- STOPPED: requests time out, the run found the route hung, a check's health probe went unanswered or said false (a
  wedge after client disconnects is one cause, whether the aborts check or a later load run met it first);
- GONE: the connection dropped or was refused after the server had answered (a crash);
- REFUSED: the client could not connect at all, which is a client-side (configuration) problem when the route
  answered nothing in the whole run (reports/filing.py decides, from the run's answered-request counts).
Environment: none.
"""
from __future__ import annotations

import re
from typing import Any

from spec_route_suite.reports.findings import UNHEALTHY

STOPPED = "requests got no answer in time (timeouts, the route found hung, its health check unanswered)"
GONE = "the server dropped or refused connections after it had answered (it crashed or restarted?)"
REFUSED = "cannot connect to the server"
SILENCES = (STOPPED, GONE, REFUSED)
SILENT_KINDS = {"timeout", "route-hung", "run-deadline", UNHEALTHY}   # the driver's and the checks' kinds of silence
HTTP = re.compile(r"HTTP (\d{3}): (.+)", re.DOTALL)
WORDS_CHARS = 200


def error_text(finding: dict[str, Any]) -> tuple[str, str]:
    """(kind, text) of a route error finding as the server or the connection put it: a load run's earliest failure,
    else the route error the finding was made from (its title is the error's description), else the first
    problem line that quotes an HTTP status."""
    details = finding.get("details") or {}
    failures = [f for f in details.get("failures") or [] if isinstance(f, dict)]
    if failures:
        first = min(failures, key=lambda f: f.get("at_s") or 0.0)
        return str(first.get("kind") or ""), str(first.get("error") or "")
    kind = str(details.get("error_kind") or "")
    texts = [finding.get("title") or "", str(details.get("detail") or ""),
             *map(str, details.get("problems") or []), str(details.get("diff") or "")]
    quoted = next((t for t in texts if HTTP.search(t)), None)
    return (kind or ("http-error" if quoted else "")), quoted or texts[0]


def normalise(message: str) -> str:
    """The message with what varies per request taken out: ids and long hex become <id>, numbers N; whitespace
    collapsed."""
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<id>", message, flags=re.I)
    text = re.sub(r"\b(?:chatcmpl|cmpl|req|request|resp)[-_][\w-]+", "<id>", text, flags=re.I)
    text = re.sub(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", "<id>", text, flags=re.I)
    text = re.sub(r"(?<![A-Za-z_])-?\d+(\.\d+)?(e-?\d+)?", "N", text)
    return re.sub(r"\s+", " ", text).strip(" :;,.")[:WORDS_CHARS]


def cause_of_error(finding: dict[str, Any]) -> str:
    """The cause of a route error finding: "HTTP 400: <the server's message>", STOPPED, GONE, REFUSED, or the kind
    and the normalised description of anything else (a malformed answer: what was wrong with it)."""
    kind, text = error_text(finding)
    found = HTTP.search(text)
    if found:
        return f"HTTP {found.group(1)}: {normalise(found.group(2))}"
    if kind in SILENT_KINDS or (finding.get("details") or {}).get("hung"):
        return STOPPED
    if kind == "connection-lost":
        return REFUSED if "cannot connect" in text else GONE
    return f"{kind or 'error'}: {normalise(_message(text))}"


def _message(text: str) -> str:
    """A route error's description without its kind and where ("http-error [route request id]: what: ...")."""
    return re.sub(r"^[\w-]+ \[[^\]]*\]:\s*", "", text)


def server_words(finding: dict[str, Any]) -> str:
    """The server's message as it came, for the issue to quote (not normalised): "" when it is no HTTP answer."""
    found = HTTP.search(error_text(finding)[1])
    return f"HTTP {found.group(1)}: {found.group(2).strip()}"[:2000] if found else ""
