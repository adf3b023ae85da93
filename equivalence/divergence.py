"""Classify a greedy divergence as a numerical near-tie or a bug.

Batched verification scores k+1 tokens in one pass, so a correct speculative route can
split from its baseline where the baseline's top two tokens are within rounding noise.
At the first divergence we teacher-force the candidate's token through the baseline
(same prompt, same shared prefix) and measure

    margin = logprob_baseline(top-1) - logprob_baseline(candidate token)   [nats]

margin <= tau is a near-tie; a larger margin, or a candidate token outside the
baseline's top-k, is a bug (no rounding error moves a token that far). tau comes from
the A/A calibration (equivalence/calibration.py), never from a constant here.

When one side ended early, its implied token is EOS (finish "stop"); a side that ended
with "length" before max_tokens, or the same tokens with a different finish_reason, has
no token choice to excuse and is a bug. When the baseline cannot teacher-force, the
classification falls back to the baseline's own top-k logprobs at that position (same
context, since the prefix is shared) and says so; with neither, it is "unclassified"
and counts as a bug under both policies. At text level (a server without token ids) the
positions are those of re-tokenized text, so token counts excuse or condemn nothing and the
candidate's "choice" is the re-tokenized token, which the model may never have sampled.
Environment: none.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from spec_route_suite.equivalence.greedy import Divergence
from spec_route_suite.routes.base import Completion, Request, TokenLogprobs
from spec_route_suite.routes.errors import CapabilityMissing, RouteError

NEAR_TIE = "near-tie"
BUG = "bug"
UNCLASSIFIED = "unclassified"
TOP_K = 5
SHOWN = 5

Decode = Callable[[Sequence[int]], str]


@dataclass(frozen=True)
class Classification:
    """The verdict on one first divergence, with the evidence a maintainer needs."""

    verdict: str                      # near-tie | bug | unclassified
    reason: str
    method: str                       # teacher-forced | baseline-logprobs | none
    tau: float
    margin: float | None = None       # nats; None when not measurable
    forced_token: int | None = None   # the candidate's token (or implied EOS) that was scored
    forced_logprob: float | None = None
    forced_rank: int | None = None    # 1-based rank in the baseline's top-k, None if outside
    baseline_top: tuple[tuple[int, float, str], ...] = ()

    @property
    def is_near_tie(self) -> bool:
        return self.verdict == NEAR_TIE

    def summary(self) -> str:
        if self.margin is None:
            return f"{self.verdict}: {self.reason}"
        rank = f"rank {self.forced_rank}" if self.forced_rank else f"outside top-{len(self.baseline_top)}"
        cmp = "<=" if self.margin <= self.tau else ">"
        return (f"{self.verdict}: margin {self.margin:.3g} nats {cmp} tau {self.tau:.3g} "
                f"({rank}, {self.method}); {self.reason}")

    def to_details(self) -> dict[str, Any]:
        return asdict(self)


def margin_verdict(*, scored: TokenLogprobs, tau: float) -> tuple[str, float, int | None, str]:
    """(verdict, margin, rank, reason) for one teacher-forced token against the baseline's top list."""
    if not scored.top:
        return UNCLASSIFIED, math.nan, None, "the baseline returned no top logprobs to compare with"
    ranked = sorted(scored.top, key=lambda p: (-p[1], p[0]))
    top1 = ranked[0][1]
    margin = max(0.0, top1 - scored.logprob)
    rank = next((i + 1 for i, (tid, _) in enumerate(ranked) if tid == scored.token_id), None)
    if rank is None and scored.logprob >= ranked[-1][1] and scored.logprob >= top1 - tau:
        # the route's top list was truncated at equal values; the token is effectively tied
        rank = len(ranked)
    if rank is None:
        return BUG, margin, None, f"the candidate's token is outside the baseline's top-{len(ranked)}"
    if margin <= tau:
        return NEAR_TIE, margin, rank, "within the A/A numerical noise of the baseline"
    return BUG, margin, rank, "the baseline prefers its own token by more than numerical noise explains"


def _implied_token(completion: Completion, position: int, eos_token_id: int | None) -> int | None:
    """The token a side 'chose' at `position`: its own token, or EOS if it stopped there."""
    if position < len(completion.token_ids):
        return completion.token_ids[position]
    if completion.finish_reason == "stop" and eos_token_id is not None:
        return eos_token_id
    return None


def _no_choice_reason(*, divergence: Divergence, baseline: Completion, candidate: Completion,
                      max_tokens: int) -> str | None:
    """A divergence that is not a token choice (length or finish handling): no margin can excuse it."""
    a, b = len(baseline.token_ids), len(candidate.token_ids)
    if a == b and baseline.token_ids == candidate.token_ids:
        return (f"same tokens but finish_reason differs (baseline {baseline.finish_reason!r}, "
                f"candidate {candidate.finish_reason!r})")
    if baseline.text_level or candidate.text_level:
        return None  # re-tokenized counts say nothing about max_tokens
    if b > max_tokens:
        return f"candidate returned {b} tokens for max_tokens={max_tokens}"
    for side, completion, n in (("candidate", candidate, b), ("baseline", baseline, a)):
        if divergence.position == n and completion.finish_reason == "length" and n < max_tokens:
            return f"{side} stopped with finish 'length' after {n} of max_tokens={max_tokens} tokens"
    return None


def _top_with_text(top: Sequence[tuple[int, float]], decode: Decode) -> tuple[tuple[int, float, str], ...]:
    ranked = sorted(top, key=lambda p: (-p[1], p[0]))[:SHOWN]
    return tuple((tid, lp, decode([tid])) for tid, lp in ranked)


def teacher_force(baseline, context: Sequence[int], token: int, *, top_k: int) -> tuple[TokenLogprobs | None, str]:
    """The baseline's logprobs for `token` after `context`: by scoring, else from its own generation.

    Returns (scored, method); scored is None when the baseline can do neither.
    """
    if baseline.capabilities.prompt_logprobs:
        try:
            return baseline.score(tuple(context), (token,), top_k)[0], "teacher-forced"
        except CapabilityMissing:
            pass
    if baseline.capabilities.logprobs:
        k = min(top_k, int(baseline.capabilities.logprobs))
        req = Request(prompt_ids=tuple(context), max_tokens=1, temperature=0.0, logprobs=k,
                      request_id="classify-fallback")
        out = baseline.generate(req)
        if out.logprobs:
            step = out.logprobs[0]
            table = dict(step.top)
            logprob = table.get(token, float("-inf"))
            return TokenLogprobs(token_id=token, logprob=logprob, top=step.top), "baseline-logprobs"
    return None, "none"


def classify_divergence(*, baseline, prompt_ids: Sequence[int], divergence: Divergence,
                        baseline_completion: Completion, candidate_completion: Completion, max_tokens: int,
                        tau: float, eos_token_id: int | None, decode: Decode, top_k: int = TOP_K) -> Classification:
    """Teacher-force the candidate's choice at the first divergence through `baseline` (a RouteHandle)."""
    position = divergence.position
    reason = _no_choice_reason(divergence=divergence, baseline=baseline_completion,
                               candidate=candidate_completion, max_tokens=max_tokens)
    if reason is not None:
        return Classification(verdict=BUG, reason=reason, method="none", tau=tau)
    chosen = _implied_token(candidate_completion, position, eos_token_id)
    if chosen is None:
        return Classification(verdict=BUG, reason="the candidate ended without a stop token to compare",
                              method="none", tau=tau)
    if _implied_token(baseline_completion, position, eos_token_id) == chosen:
        return Classification(verdict=BUG, method="none", tau=tau,
                              reason="both sides chose the same token but report it differently "
                                     "(one returned the stop token, the other did not)")
    context = tuple(prompt_ids) + tuple(candidate_completion.token_ids[:position])
    try:
        scored, method = teacher_force(baseline, context, chosen, top_k=top_k)
    except RouteError as exc:
        return Classification(verdict=UNCLASSIFIED, method="none", tau=tau, forced_token=chosen,
                              reason=f"teacher forcing on baseline '{baseline.name}' failed ({exc.describe()}); "
                                     "the divergence cannot be classified and counts as a bug")
    if scored is None:
        return Classification(verdict=UNCLASSIFIED, method=method, tau=tau, forced_token=chosen,
                              reason=f"baseline route '{baseline.name}' cannot teacher-force (no prompt_logprobs) "
                                     "and returns no logprobs: the divergence cannot be classified and counts as a bug")
    verdict, margin, rank, why = margin_verdict(scored=scored, tau=tau)
    own = _implied_token(baseline_completion, position, eos_token_id)
    top = dict(scored.top)
    if scored.top and own is not None and own in top and max(top.values()) - top[own] > tau:
        why += (f"; note: the baseline's own token {own} is not its top-1 under teacher forcing "
                "(the baseline disagrees with itself here)")
    if method != "teacher-forced":
        why += (f"; baseline '{baseline.name}' cannot teacher-force, so its own top-{top_k} logprobs "
                "at this position were used")
    return Classification(verdict=verdict, reason=why, method=method, tau=tau,
                          margin=margin if math.isfinite(margin) else None, forced_token=chosen,
                          forced_logprob=scored.logprob if math.isfinite(scored.logprob) else None, forced_rank=rank,
                          baseline_top=_top_with_text(scored.top, decode))
