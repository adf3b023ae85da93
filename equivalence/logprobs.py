"""Are the candidate's returned logprobs the target's, for the tokens it emitted?

A speculative route has two models' numbers in hand, and real engines have returned the
wrong ones: the draft's logprobs (llama.cpp#27972), all zeros (vllm#17876), values from
a different position after a rejection. The reference is the baseline teacher-forcing
the candidate's own tokens (so a greedy split does not end the comparison), or, without
teacher forcing, the baseline's own logprobs over the shared prefix.

Per emitted token: the value must match within the A/A tolerance, shared top-k entries
too, the route must agree with itself (the token's logprob equals its entry in the top
list), and at temperature 0 the emitted token must be the baseline's rank 1, where a
token within tau of the top-1 counts as tied.
Environment: none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.routes.base import Completion, Request, TokenLogprobs
from spec_route_suite.routes.errors import CapabilityMissing
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import logprobs_repro

SHOWN = 8
ZERO_RUN = 4          # sampled tokens that must all report exactly 0.0 before it is a finding
CERTAIN = -1e-6       # a teacher-forced logprob above this: the model really is that sure of the token
LOGPROB_REPRO_FLOOR = 1e-3   # the repro compares logprobs as the servers print them (JSON floats, rounded)


@dataclass(frozen=True)
class LogprobMismatch:
    """One disagreement; `kind` is value, top-value, rank, self-inconsistent, invalid or missing."""

    position: int
    token_id: int | None
    kind: str
    candidate: float | None
    baseline: float | None
    detail: str

    def line(self) -> str:
        return f"@{self.position} token {self.token_id} [{self.kind}]: {self.detail}"


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def compare_logprobs(*, candidate: Sequence[TokenLogprobs], baseline: Sequence[TokenLogprobs],
                     tokens: Sequence[int], tol: float, tau: float, greedy: bool) -> list[LogprobMismatch]:
    """Mismatches between the candidate's logprobs for `tokens` and the baseline's for the same tokens.

    `baseline` may be shorter than `tokens` (only the shared prefix could be scored); positions
    beyond it are checked for self-consistency only.
    """
    out: list[LogprobMismatch] = []
    if len(candidate) != len(tokens):
        out.append(LogprobMismatch(position=min(len(candidate), len(tokens)), token_id=None, kind="missing",
                                   candidate=None, baseline=None,
                                   detail=(f"candidate returned {len(candidate)} logprob entries "
                                           f"for {len(tokens)} tokens")))
    for position, (token, mine) in enumerate(zip(tokens, candidate)):
        if mine.token_id != token:
            out.append(LogprobMismatch(position=position, token_id=token, kind="missing", candidate=None, baseline=None,
                                       detail=f"candidate's logprob entry is for token {mine.token_id}, not {token}"))
            continue
        out.extend(_self_check(position, mine, tol))
        if position < len(baseline):
            out.extend(_against_baseline(position, mine, baseline[position], tol=tol, tau=tau, greedy=greedy))
    return out


def _self_check(position: int, mine: TokenLogprobs, tol: float) -> list[LogprobMismatch]:
    if not math.isfinite(mine.logprob) or mine.logprob > tol:
        return [LogprobMismatch(position=position, token_id=mine.token_id, kind="invalid", candidate=mine.logprob,
                                baseline=None,
                                detail=f"candidate logprob {_fmt(mine.logprob)} is not a log-probability")]
    listed = dict(mine.top).get(mine.token_id)
    if listed is not None and abs(listed - mine.logprob) > tol:
        return [LogprobMismatch(position=position, token_id=mine.token_id, kind="self-inconsistent",
                                candidate=mine.logprob, baseline=None,
                                detail=(f"candidate gives {_fmt(mine.logprob)} for the token but "
                                        f"{_fmt(listed)} in its own top list"))]
    return []


def _against_baseline(position: int, mine: TokenLogprobs, ref: TokenLogprobs, *, tol: float, tau: float,
                      greedy: bool) -> list[LogprobMismatch]:
    out = []
    if ref.token_id == mine.token_id and abs(mine.logprob - ref.logprob) > tol:
        out.append(LogprobMismatch(position=position, token_id=mine.token_id, kind="value", candidate=mine.logprob,
                                   baseline=ref.logprob,
                                   detail=(f"candidate {_fmt(mine.logprob)} vs baseline {_fmt(ref.logprob)} "
                                           f"(|delta| {abs(mine.logprob - ref.logprob):.3g} > tol {tol:.3g})")))
    ref_top = dict(ref.top)
    worst = max(((abs(lp - ref_top[tid]), tid, lp) for tid, lp in mine.top if tid in ref_top), default=None)
    if worst is not None and worst[0] > tol:
        delta, tid, lp = worst
        out.append(LogprobMismatch(position=position, token_id=mine.token_id, kind="top-value", candidate=lp,
                                   baseline=ref_top[tid],
                                   detail=(f"top entry {tid}: candidate {_fmt(lp)} vs baseline {_fmt(ref_top[tid])} "
                                           f"(|delta| {delta:.3g} > tol {tol:.3g})")))
    if greedy and ref.top and ref.token_id == mine.token_id:
        best_id, best = max(ref.top, key=lambda p: (p[1], -p[0]))
        if best - ref.logprob > tau:
            out.append(LogprobMismatch(position=position, token_id=mine.token_id, kind="rank", candidate=mine.logprob,
                                       baseline=ref.logprob,
                                       detail=(f"at temperature 0 the candidate emitted {mine.token_id} but the "
                                               f"baseline's rank 1 is {best_id} by {best - ref.logprob:.3g} nats "
                                               f"(> tau {tau:.3g})")))
    return out


def baseline_reference(baseline, req: Request, tokens: Sequence[int], *, top_k: int) -> tuple[list[TokenLogprobs], str]:
    """The baseline's logprobs for `tokens` after req's prompt (a RouteHandle), and how they were obtained.

    Teacher forcing where the baseline supports it; else its own greedy logprobs over the
    prefix it shares with `tokens`. Raises CapabilityMissing when it has neither.
    """
    if baseline.capabilities.prompt_logprobs:
        try:
            return baseline.score(req.prompt_ids, tuple(tokens), top_k), "teacher-forced"
        except CapabilityMissing:
            pass
    if not baseline.capabilities.logprobs:
        raise CapabilityMissing("logprobs", route=baseline.name,
                                why="baseline can neither teacher-force nor return logprobs")
    own = baseline.generate(Request(prompt_ids=req.prompt_ids, max_tokens=req.max_tokens, temperature=0.0,
                                    logprobs=min(top_k, int(baseline.capabilities.logprobs)),
                                    request_id=req.request_id + "-baseline"))
    shared = first_divergence(baseline=own.token_ids, candidate=tokens)
    shared = len(tokens) if shared is None else shared
    return list(own.logprobs or ())[:shared], f"baseline's own logprobs over the first {shared} shared tokens"


def summarize(mismatches: Sequence[LogprobMismatch]) -> str:
    kinds: dict[str, int] = {}
    for m in mismatches:
        kinds[m.kind] = kinds.get(m.kind, 0) + 1
    head = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    lines = [m.line() for m in mismatches[:SHOWN]]
    more = [f"... {len(mismatches) - SHOWN} more"] if len(mismatches) > SHOWN else []
    return "\n".join([head, *lines, *more])


def all_zero_logprobs(sampled: Completion, reference: Sequence[TokenLogprobs], *,
                      min_tokens: int = ZERO_RUN) -> str | None:
    """vllm#17876 on a sampled route: every returned logprob exactly 0.0. Well-formed, and wrong unless the
    model is certain of each token; `reference` (the baseline teacher-forcing the same tokens) says
    whether it is. None when nothing is suspicious."""
    values = [t.logprob for t in sampled.logprobs or ()]
    if len(values) < min_tokens or any(v != 0.0 for v in values):
        return None
    doubtful = [(i, r.logprob) for i, r in enumerate(reference) if r.logprob < CERTAIN]
    if not doubtful:
        return None
    shown = ", ".join(f"token {i}: {v:.3f}" for i, v in doubtful[:SHOWN])
    return (f"all {len(values)} sampled tokens report logprob exactly 0.0, but the baseline teacher-forcing "
            f"the same tokens gives {shown}")


def mismatch_finding(req: Request, actual: Completion, mismatches: Sequence[LogprobMismatch], *, method: str,
                     calibration, candidate, baseline, prompt_id: str) -> Finding:
    """The finding for greedy logprobs that are not the target's: the mismatches summarized against `method`'s
    reference, the A/A calibration they were judged with, and a repro at that tolerance (never below what printed
    JSON floats can show)."""
    return Finding(
        check="logprobs", severity="bug", route=candidate.name, prompt_id=prompt_id,
        title=(f"candidate '{candidate.name}' logprobs disagree with baseline '{baseline.name}' on prompt "
               f"{prompt_id} ({len(mismatches)} mismatches)"),
        details={"diff": summarize(mismatches), "reference": method, "calibration": calibration.describe(),
                 "prompt_ids": list(req.prompt_ids), "candidate_tokens": list(actual.token_ids),
                 "mismatches": [m.__dict__ for m in mismatches[:50]],
                 "repro": logprobs_repro(req, candidate=candidate, baseline=baseline,
                                         tolerance=max(calibration.logprob_tol, LOGPROB_REPRO_FLOOR))})
