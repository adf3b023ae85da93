"""Greedy (temperature 0) token-for-token comparison of two completions.

The first divergence is what a maintainer needs: the position, both tokens with their
text, the shared prefix, and both tails. Length differences count: a candidate that stops
early or runs past the baseline's EOS diverges at the shorter length.

Each judged pair also leaves its answer record (`answer_record`): the candidate's ids, the baseline's where
they differ, and the candidate answer's own drafting counters where the engine states them, so a later run
compares its answers and its acceptance with this one's prompt by prompt (--compare-to, reports/regression.py).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from spec_route_suite.routes.base import Completion, Request

Decode = Callable[[Sequence[int]], str]
TAIL_TOKENS = 16
ENDED = None


@dataclass(frozen=True)
class Divergence:
    """Where two greedy outputs first differ. A token of None means that side had ended."""

    position: int
    baseline_token: int | None
    candidate_token: int | None
    baseline_token_text: str
    candidate_token_text: str
    shared_prefix_text: str
    baseline_tail_text: str
    candidate_tail_text: str
    baseline_finish: str
    candidate_finish: str

    def diff(self) -> str:
        """A short unified-diff style view for the summary."""
        return "\n".join([
            f"  ...{self.shared_prefix_text[-80:]!r}",
            f"- baseline  @{self.position}: {self.baseline_tail_text!r} (finish={self.baseline_finish})",
            f"+ candidate @{self.position}: {self.candidate_tail_text!r} (finish={self.candidate_finish})",
        ])


def first_divergence(*, baseline: Sequence[int], candidate: Sequence[int]) -> int | None:
    """Index of the first differing token, or None when the sequences are identical."""
    for position, (a, b) in enumerate(zip(baseline, candidate)):
        if a != b:
            return position
    if len(baseline) != len(candidate):
        return min(len(baseline), len(candidate))
    return None


def exposure(*, baseline: Sequence[int], candidate: Sequence[int]) -> int:
    """Tokens at which a split could have happened: the shared prefix plus the divergent position."""
    position = first_divergence(baseline=baseline, candidate=candidate)
    return min(len(baseline), len(candidate)) if position is None else position + 1


def compare_greedy(*, baseline: Completion, candidate: Completion, decode: Decode) -> Divergence | None:
    """None when both routes produced the same tokens and finish reason."""
    a, b = list(baseline.token_ids), list(candidate.token_ids)
    position = first_divergence(baseline=a, candidate=b)
    if position is None:
        if baseline.finish_reason != candidate.finish_reason:
            position = len(a)
        else:
            return None
    token_a = a[position] if position < len(a) else ENDED
    token_b = b[position] if position < len(b) else ENDED
    return Divergence(
        position=position,
        baseline_token=token_a,
        candidate_token=token_b,
        baseline_token_text=decode([token_a]) if token_a is not None else "<ended>",
        candidate_token_text=decode([token_b]) if token_b is not None else "<ended>",
        shared_prefix_text=decode(a[:position]),
        baseline_tail_text=decode(a[position:position + TAIL_TOKENS]),
        candidate_tail_text=decode(b[position:position + TAIL_TOKENS]),
        baseline_finish=baseline.finish_reason,
        candidate_finish=candidate.finish_reason,
    )


def request_digest(req: Request) -> str:
    """What makes two runs' greedy requests the same: the prompt (ids and chat messages), the length and the stops."""
    shape = [list(req.prompt_ids), req.messages, req.max_tokens, list(req.stop)]
    return hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:16]


def answer_record(req: Request, *, baseline: Completion, candidate: Completion) -> dict[str, Any]:
    """One greedy pair, compactly: the candidate's ids (the baseline's only where they differ) and, where the engine
    states them per answer, the candidate answer's drafting counters (steps that drafted, accepted tokens, accepted
    by draft position): greedy drafting is deterministic for a stateless drafter, so they compare across runs."""
    record: dict[str, Any] = {"request": request_digest(req), "ids": list(candidate.token_ids),
                              "finish": candidate.finish_reason}
    if list(baseline.token_ids) != record["ids"] or baseline.finish_reason != candidate.finish_reason:
        record.update(baseline_ids=list(baseline.token_ids), baseline_finish=baseline.finish_reason)
    if candidate.draft_steps is not None:
        record["drafting"] = [candidate.draft_steps, candidate.accepted_tokens or 0, list(candidate.accepted_per_pos)]
    return record
