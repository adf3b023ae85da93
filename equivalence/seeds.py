"""The seed check's judging: where repeated runs of one seeded request part, and whether other seeds can make them.

Why: equivalence/test_seeds.py reads "send the same seeded request REPEATS times, judge, record, fail"; which run
departs from the first and where, the finding it makes, and the positive control (other seeds until one answers
differently: identical answers prove seeding only where answers could differ) live here, where self-tests reach
them without importing a check's test module.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import repeat_repro

CONTROL_SEEDS = 8   # other seeds tried, until one answer differs: the proof that this prompt's answers can differ


@dataclass(frozen=True)
class RunSplit:
    """Run `run` (counted from 1) of the same seeded request departs from run 1 at token `position`."""
    run: int
    position: int
    answer: Completion
    detail: str


def first_split(first: Completion, others: Sequence[Completion]) -> RunSplit | None:
    """The first of `others` (runs 2, 3, ...) whose tokens or finish_reason differ from `first`, None when all agree."""
    for n, other in enumerate(others, start=2):
        at = first_divergence(baseline=first.token_ids, candidate=other.token_ids)
        if at is None and other.finish_reason == first.finish_reason:
            continue
        position = at if at is not None else len(first.token_ids)
        detail = (f"run 1:  {first.text[:120]!r} (finish={first.finish_reason})\n"
                  f"run {n}: {other.text[:120]!r} (finish={other.finish_reason})")
        return RunSplit(run=n, position=position, answer=other, detail=detail)
    return None


def seed_finding(req: Request, first: Completion, split: RunSplit, *, candidate, baseline, prompt_id: str,
                 times: int) -> Finding:
    """The finding for a seeded request answered differently on two runs, with a repro repeating it `times`."""
    return Finding(
        check="seeds", severity="bug", route=candidate.name, prompt_id=prompt_id,
        title=(f"candidate '{candidate.name}' does not honour seeds: the same seeded request differs "
               f"at token {split.position}"),
        details={"diff": split.detail, "seed": req.seed, "temperature": req.temperature, "max_tokens": req.max_tokens,
                 "prompt_ids": list(req.prompt_ids), "run_1_tokens": list(first.token_ids),
                 f"run_{split.run}_tokens": list(split.answer.token_ids),
                 "repro": repeat_repro(req, candidate=candidate, baseline=baseline, times=times)})


def positive_control(candidate, req: Request, answer) -> tuple[int, bool]:
    """(other seeds tried, whether one of them answered differently from `answer`): the same prompt and settings
    with seeds other than the request's, stopping at the first different answer."""
    for n in range(1, CONTROL_SEEDS + 1):
        other = candidate.generate(replace(req, seed=req.seed + 7919 * n, request_id=f"{req.request_id}-control{n}"))
        if other.token_ids != answer.token_ids or other.finish_reason != answer.finish_reason:
            return n, True
    return CONTROL_SEEDS, False


def seeding_reason(*, own: bool, seeding: str, tried: int, differs: bool) -> str:
    """Why "same seed, same answer" is not verified ("" when it is): the adapter seeds (circular), or no other
    seed answered differently (the prompt is near-deterministic)."""
    if not own:
        return f"circular on this route: seeding is done by the {seeding}, so the check cannot fail"
    return "" if differs else (f"the prompt is near-deterministic: {tried} different seeds gave one answer, so a route "
                               f"ignoring seeds would answer alike too")
