"""Acceptance by kind of traffic, from the answers that state their own speculation counters.

Why: a run's acceptance from the server's cumulative counters mixes the greedy checks with thousands of sampled
requests at temperatures up to 1.6, where any drafter is accepted less, so one run-wide figure reads 2.1 for a
drafter that accepts 3.5 on greedy traffic. A user compares the run with the drafter's published acceptance
(measured greedy, or at T=1); the answers that state their own counters (llama.cpp `timings`, SGLang `meta_info`,
the in-process engines) say what each kind of traffic got. Only answers through `generate` with n=1 are counted:
the n-sample hooks return token ids alone, and an n>1 answer's counters may cover all its choices, so that
traffic is in the server's total only. A RouteWrapper: every hook is the wrapped route's.
Environment: none.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from spec_route_suite.routes.base import Completion, Request, Route, RouteWrapper, summed_positions

BANDS = ("greedy", "sampled, T <= 1", "sampled, T > 1")


def band(req: Request) -> str:
    """The kind of traffic a request is: greedy, or sampled at a temperature up to 1 or above it."""
    if req.greedy:
        return BANDS[0]
    return BANDS[1] if req.temperature <= 1.0 else BANDS[2]


COUNTS = ("answers", "tokens", "draft_tokens", "accepted", "steps", "answers_without_steps")


@dataclass
class BandTally:
    """Summed per-answer counters of one kind of traffic (steps: verification steps, where every answer says)."""

    answers: int = 0
    tokens: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    steps: int = 0
    answers_without_steps: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def add(self, answer: Completion) -> None:
        self.answers += 1
        self.tokens += len(answer.token_ids)
        self.draft_tokens += answer.draft_tokens or 0
        self.accepted += answer.accepted_tokens or 0
        if answer.draft_steps is None:
            self.answers_without_steps += 1
        else:
            self.steps += answer.draft_steps
        self.accepted_per_pos = list(summed_positions((self.accepted_per_pos, answer.accepted_per_pos)))

    def merged(self, other: "BandTally") -> "BandTally":
        counts = {name: getattr(self, name) + getattr(other, name) for name in COUNTS}
        return BandTally(**counts, accepted_per_pos=list(summed_positions((self.accepted_per_pos,
                                                                           other.accepted_per_pos))))

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / steps, only when every answer stated its steps (else the ratio would be inflated)."""
        if self.answers_without_steps or not self.steps:
            return None
        return round(1 + self.accepted / self.steps, 3)

    def as_dict(self) -> dict[str, Any]:
        rates = [round(a / self.steps, 3) for a in self.accepted_per_pos] if self.steps else []
        return {**asdict(self), "mean_acceptance_length": self.mean_acceptance_length,
                "per_position_acceptance_rate": rates if not self.answers_without_steps else []}


def merged_bands(workers: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One route's tallies from every worker (each band -> BandTally fields), summed; bands in BANDS order."""
    total: dict[str, BandTally] = {}
    for worker in workers:
        for name, fields in worker.items():
            tally = BandTally(**{k: fields.get(k, 0) for k in COUNTS},
                              accepted_per_pos=list(fields.get("accepted_per_pos") or []))
            total[name] = total[name].merged(tally) if name in total else tally
    return {name: total[name].as_dict() for name in BANDS if name in total}


class TrafficAcceptance(RouteWrapper):
    """Tallies each n=1 answer's own speculation counters by its kind of traffic (band)."""

    def __init__(self, route: Route):
        super().__init__(route)
        self.bands: dict[str, BandTally] = {}

    async def generate(self, req: Request) -> Completion:
        completion = await self.inner.generate(req)
        if req.n == 1 and completion.draft_tokens is not None:
            self.bands.setdefault(band(req), BandTally()).add(completion)
        return completion

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """Raw tallies (summable across workers: merged_bands)."""
        return {name: asdict(tally) for name, tally in self.bands.items()}


def traffic_tallies(route: Route) -> dict[str, dict[str, Any]]:
    """The raw tallies of the TrafficAcceptance wrapper in `route`'s chain ({} when there is none)."""
    while isinstance(route, RouteWrapper):
        if isinstance(route, TrafficAcceptance):
            return route.as_dict()
        route = route.inner
    return {}
