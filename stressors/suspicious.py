"""Answers under load that are well-formed but suspicious: an empty or one-token answer that says "stop".

The vllm#50021 pattern: at concurrency 64 some requests came back HTTP 200 with one empty token
and finish_reason "stop", where the same request served alone wrote a long answer. Nothing in
the response is malformed, and a greedy comparison reports only "diverges at token 0/1"; this
names the symptom, so a maintainer recognises an engine that drops requests under load instead
of chasing a numerical split. Environment: none.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from spec_route_suite.routes.base import Completion
from spec_route_suite.stressors.driver import Outcome

SHORT_ANSWER = 1          # tokens: an answer this short that says "stop" ...
LONG_REFERENCE = 4        # ... where the serial run wrote at least this many tokens


def early_stops(outcomes: Sequence[Outcome], references: Mapping[str, Completion], *,
                short: int = SHORT_ANSWER, long: int = LONG_REFERENCE) -> list[str]:
    """One line per completed request that stopped after <= `short` tokens where its serial reference
    ran >= `long` tokens (a reference that itself stopped that early is a short answer, not this bug)."""
    lines = []
    for outcome in outcomes:
        reference = references.get(outcome.key)
        got = outcome.completion
        if got is None or reference is None or got.finish_reason != "stop":
            continue
        if len(got.token_ids) <= short and len(reference.token_ids) >= long:
            lines.append(f"{outcome.request_id}: {len(got.token_ids)} token(s) {got.text[:40]!r} with "
                         f"finish_reason 'stop' (in flight with {outcome.in_flight_at_start - 1} others); the serial "
                         f"run wrote {len(reference.token_ids)} tokens ({reference.finish_reason})")
    return lines
