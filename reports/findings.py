"""The Finding record: one thing a maintainer should look at, with its evidence.

Findings travel from xdist workers to the controller on the test report's
user_properties (serialised JSON), so none is lost in transit and each carries the
test node id that produced it.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# "engine": behaviour the baseline shows the same way on the same request (equivalence/rules.py): a fact about
# the engine, shown in the report; it fails no route and is no finding about the baseline
SEVERITIES = ("bug", "error", "warning", "near-tie", "engine", "info")
FINDING_PROPERTY = "spec_suite_finding"
# The cause a load stressor names (details["cause"]) on an answer that differs under concurrent load from the same
# route's answer alone: one fault under load (a request answered in another's context, batch-dependent numerics,
# state left by hung-up clients) shows in every stressor, attributed to a source request or not, and is one root
# cause with one issue file (reports/clusters.py).
UNDER_LOAD = "answers under concurrent load differ from the same requests answered alone"
# The cause the greedy judges name on a greedy answer that diverges from the baseline's beyond a near-tie, in the
# greedy, chat and agentic checks alike, and a boundary sweep whose answers only differ, breaking no boundary rule
# (one fault of the verifier's bookkeeping diverges on every kind of prompt and request).
DIVERGES = "greedy answers diverge from the baseline's beyond a near-tie"
# The cause the stream check names on a streamed answer that differs from the same request's unstreamed one, in the
# streaming check and the chat check's streams alike.
STREAM_DIFFERS = "streamed answers differ from the same requests answered unstreamed"
# The cause the agentic check names when the server parses the same output tokens into other tool calls, reasoning
# or content than the baseline does, whichever part of the protocol (single answers, sessions) met it.
PARSED_OTHERWISE = "the server parses the same output tokens into other tool calls, reasoning or content"
# The error kind of a check's own health probe that went unanswered (or said false) after its load: with timeouts
# and a route found hung, one cause, "the server stopped answering" (reports/server_words.py).
UNHEALTHY = "unhealthy"
MEASURE_PROPERTY = "spec_suite_measure"


@dataclass(frozen=True)
class Finding:
    """`check` is the test family (greedy, boundary, distribution, mixing...); `severity` says how bad."""

    check: str
    severity: str
    title: str
    route: str
    prompt_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    test_id: str = ""
    uid: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} not in {SEVERITIES}")

    @property
    def fails_route(self) -> bool:
        return self.severity in ("bug", "error")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)

    @classmethod
    def from_route_error(cls, error: Any, *, check: str, **details: Any) -> "Finding":
        """A route failure (a RouteError: HTTP error, timeout, dead connection) as the error finding naming its
        request: the plugin records the ones a test raises, a protocol that carries on past a failed turn its own."""
        return cls(check=check, severity="error", title=error.describe()[:300], route=error.route or "unknown",
                   details={"error_kind": error.kind, "request_id": error.request_id, "detail": error.detail[:2000],
                            **details})

    @classmethod
    def from_route_death(cls, error: Any, *, check: str, control: str, **details: Any) -> "Finding":
        """A route that died on a request its baseline serves: a bug, named once, by the request that did it."""
        cause = getattr(error, "cause", None)
        kind = getattr(cause, "kind", "")
        what = (str(error)[:160] if cause is None else str(cause)[:160] if kind == "route-error"
                else f"{kind}: {str(cause)[:160]}")
        how = "wedged" if kind == "timeout" else "died"   # a wedge: no answer, /health and a canary unanswered too
        found_at = getattr(error, "found_at", "")
        after = f"answered nothing from request {found_at} on" if found_at else "answered nothing"
        if found_at:
            details = {"found_at": found_at, **details}
        return cls(check=check, severity="bug", route=error.route or "unknown",
                   title=f"the route {how} at request {error.request_id} ({what}), then {after}; {control}",
                   details={"error_kind": error.kind, "request_id": error.request_id, "cause": "route died",
                            "signature": "the route died, then answered nothing", "detail": str(error)[:2000],
                            "control": control, **details})

    @classmethod
    def from_json(cls, text: str) -> "Finding":
        return cls(**json.loads(text))
