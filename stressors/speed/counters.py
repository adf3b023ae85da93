"""Acceptance under load from a server's own counters, where answers do not state their drafting (vLLM).

Why: the speed gate judges acceptance that collapses with the load prompt by prompt (stressors/speed/collapse.py), from
each answer's own drafting counters; an engine whose answers state none (vLLM) left the check silent, so a
candidate whose acceptance halves at 8 in flight could read ADOPT. Its server's cumulative counters count every
request, so while the run's tests share the server a level's difference is anybody's; on the idle server after
the tests (the controller's phase, spec_route_suite/load_phases.py) it is the level's own. The same greedy prompts
go one at a time and then `level` at a time, in ROUNDS alternating rounds: on a correct engine each greedy prompt
drafts alike at any load, so the pooled mean acceptance length of a level matches one at a time's up to near-ties
(measured on llama.cpp's clean drafters: every round within 2%). A collapse is a round whose loaded level falls at
least COLLAPSE_DROP below the lowest one-at-a-time round: F4 (docs/llama-cpp-findings.md) strikes only the
prompts that happen to share a draft batch, so it may spare some rounds (measured: one of three rounds at 8 in
flight, 1.75 against 2.73), hence ROUNDS alternating rounds. A warning, like the speed gate's: the answers are right.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from spec_route_suite.reports.findings import Finding
from spec_route_suite.routes.base import AcceptanceSnapshot, Request
from spec_route_suite.stressors.speed.collapse import COLLAPSE_DROP
from spec_route_suite.stressors.driver import burst, drive_handle, plan

ROUNDS = 6
TOKENS = 32


@dataclass(frozen=True)
class LevelRound:
    level: int
    round: int
    drafts: int
    accepted: int

    @property
    def length(self) -> float | None:
        return 1 + self.accepted / self.drafts if self.drafts else None


def measure(handle, prompt_ids: Sequence[Sequence[int]], levels: Sequence[int], *, rounds: int = ROUNDS,
            max_tokens: int = TOKENS) -> list[LevelRound]:
    """Each level of each round: the route's counter difference over the same greedy prompts at that level (after one
    unmeasured request, so the counters read are the ones its answers keep: a route's first snapshot may still be
    the server's)."""
    handle.generate(Request(prompt_ids=tuple(prompt_ids[0]), max_tokens=2, temperature=0.0,
                            request_id=f"load-acceptance-warm-up-{handle.name}"))
    out = []
    for n in range(rounds):
        for level in levels:
            before = handle.acceptance()
            subs = plan(((f"p{i}", Request(prompt_ids=tuple(ids), max_tokens=max_tokens, temperature=0.0))
                         for i, ids in enumerate(prompt_ids)), offsets=burst(len(prompt_ids)), tag=f"la{n}-c{level}")
            drive_handle(handle, subs, concurrency=level, mean_latency_s=0.05 * max_tokens)
            delta = _delta(before, handle.acceptance())
            out.append(LevelRound(level, n, delta.drafts if delta else 0, delta.accepted if delta else 0))
    return out


def prompts_digest(prompt_ids: Sequence[Sequence[int]]) -> str:
    """Which prompts the rounds ran (a short hash of their ids): two runs' rounds compare only over the same ones."""
    import hashlib
    return hashlib.sha256(repr([list(p) for p in prompt_ids]).encode()).hexdigest()[:16]


def _delta(before: AcceptanceSnapshot | None, after: AcceptanceSnapshot | None) -> AcceptanceSnapshot | None:
    """The level's own counters; None when either reading is missing or they count different things."""
    if before is None or after is None or before.scope != after.scope:
        return None
    return after.minus(before)


def unjudged(measured: Sequence[LevelRound]) -> str:
    """Why these rounds cannot judge acceptance under load ("" when they can): a level whose counters never moved
    (nothing drafted, or the counters unreadable) would otherwise read as acceptance that held."""
    silent = sorted({m.level for m in measured if not m.drafts})
    if not measured or silent:
        return (f"the server's counters counted no drafted token at {', '.join(map(str, silent)) or 'any'} in flight "
                f"(nothing drafted, or the counters unreadable), so acceptance under load was not measured")
    return ""


def collapsed_levels(measured: Sequence[LevelRound]) -> list[dict[str, Any]]:
    """The loaded levels with a round at least COLLAPSE_DROP below the lowest one-at-a-time round."""
    alone = [m.length for m in measured if m.level == 1 and m.length is not None]
    found = []
    for level in sorted({m.level for m in measured if m.level > 1}):
        loaded = [m.length for m in measured if m.level == level and m.length is not None]
        if alone and loaded and min(loaded) <= (1 - COLLAPSE_DROP) * min(alone):
            found.append({"level": level, "alone": [round(a, 3) for a in alone],
                          "loaded": [round(b, 3) for b in loaded],
                          "collapsed_rounds": sum(b <= (1 - COLLAPSE_DROP) * min(alone) for b in loaded)})
    return found


def collapse_finding(measured: Sequence[LevelRound], *, route: str) -> Finding | None:
    """The warning naming each collapsed level (None when acceptance held, or nothing was drafted)."""
    found = collapsed_levels(measured)
    if not found:
        return None
    first = found[0]
    return Finding(check="speed", severity="warning", route=route,
                   title=(f"acceptance collapses with the load (the server's counters on the idle server): mean "
                          f"acceptance length {min(first['loaded']):.2f} at {first['level']} in flight against "
                          f"{min(first['alone']):.2f} one at a time or more, in {first['collapsed_rounds']} of "
                          f"{len(first['loaded'])} rounds ({'/'.join(f'{x:.2f}' for x in first['loaded'])} against "
                          f"{'/'.join(f'{x:.2f}' for x in first['alone'])})"),
                   details={"levels": found, "rounds": [m.__dict__ for m in measured], "drop_threshold": COLLAPSE_DROP,
                            "why": "greedy answers draft the same tokens at any load on a correct engine; the "
                                   "answers stay right, the speed is lost (llama.cpp#27117 class)"})
