"""What a check puts on a finding so its cluster gets a repro script: `details["repro"] = <one of these>`.

Each builder records the exact request(s) as each route's server receives them (RouteHandle.repro_wire: the
adapter's own URL path and JSON body, so llama.cpp's /completion or SGLang's /generate are resent as sent) for
the candidate and for the baseline, and names the judge the script applies (reports/repro_judges.py says what
each judge compares and what its control is). The report writer merges the blocks of one cluster into one
script (reports/repro.py). Builders take RouteHandles; nothing here sends a request.
Environment: none.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from spec_route_suite.routes.base import Completion, Request

LOAD_ATTEMPTS = 100     # a failure under load is intermittent: passes of the schedule before the script gives up
PARITY_FIELDS = ("ids", "finish")
ANSWER_FIELDS = ("ids", "text", "finish", "usage")


def pair(req: Request, *, candidate, baseline, baseline_req: Request | None = None) -> dict[str, Any]:
    """The request as the candidate's and the baseline's servers receive it."""
    return {"candidate": candidate.repro_wire(req), "baseline": baseline.repro_wire(baseline_req or req)}


def recorded(answer: Completion | None) -> dict[str, Any] | None:
    """What a route answered during the run, short: quoted by the script and the issue beside the live answers."""
    if answer is None:
        return None
    return {"ids": list(answer.token_ids)[:64], "tokens": len(answer.token_ids), "text": answer.text[:300],
            "finish": answer.finish_reason, "usage": answer.usage_completion_tokens,
            **({"text_level": True} if answer.text_level else {})}


def _block(judge: str, case: dict[str, Any], *, candidate, baseline, attempts: int = 1) -> dict[str, Any]:
    """One repro block: the judge, its case, and which routes play the candidate and the control (a failure of
    the baseline itself is resent to the baseline, with the candidate as the control)."""
    return {"judge": judge, "attempts": attempts, "routes": {"candidate": candidate.name, "baseline": baseline.name},
            "case": {k: v for k, v in case.items() if v is not None}}


def parity_repro(requests: Sequence[Request], *, candidate, baseline, fields: Sequence[str] = PARITY_FIELDS,
                 expected: Sequence[Completion] = (), actual: Sequence[Completion] = (),
                 attempts: int = 1, history: Sequence[Request] = ()) -> dict[str, Any]:
    """The candidate must answer each request as the baseline does (greedy, a feature request, a boundary case).
    `history`: the requests the candidate got just before (a failure that needs the state they leave), resent
    in order to each route first."""
    return _block("parity", {"requests": [pair(r, candidate=candidate, baseline=baseline) for r in requests],
                             "history": [pair(r, candidate=candidate, baseline=baseline) for r in history] or None,
                             "fields": list(fields),
                             "recorded": {"baseline": [recorded(a) for a in expected],
                                          "candidate": [recorded(a) for a in actual],
                                          "asked": [{"max_tokens": r.max_tokens, "n": r.n} for r in requests]}},
                  candidate=candidate, baseline=baseline, attempts=attempts)


def stream_repro(req: Request, *, candidate, baseline, fields: Sequence[str] = ("ids", "text", "finish"),
                 attempts: int = 1) -> dict[str, Any]:
    """The streamed answer must be the plain answer, on each route (`req` is the plain request)."""
    plain, streamed = replace(req, stream=False), replace(req, stream=True)
    return _block("stream", {"plain": pair(plain, candidate=candidate, baseline=baseline),
                             "stream": pair(streamed, candidate=candidate, baseline=baseline),
                             "fields": list(fields)}, candidate=candidate, baseline=baseline, attempts=attempts)


def repeat_repro(req: Request, *, candidate, baseline, times: int = 2, attempts: int = 5) -> dict[str, Any]:
    """The same (seeded) request must get the same answer every time (`times` answers per attempt; a confident
    model samples alike by chance, so up to `attempts` tries)."""
    return _block("repeat", {"request": pair(req, candidate=candidate, baseline=baseline), "times": times},
                  candidate=candidate, baseline=baseline, attempts=attempts)


def logprobs_repro(req: Request, *, candidate, baseline, tolerance: float, mode: str = "target") -> dict[str, Any]:
    """mode "target": the candidate's logprobs of the shared tokens are the baseline's within `tolerance`;
    "zero": sampled logprobs are not all 0.0."""
    return _block("logprobs", {"request": pair(req, candidate=candidate, baseline=baseline),
                               "tolerance": tolerance, "mode": mode}, candidate=candidate, baseline=baseline)


def choices_repro(req: Request, *, candidate, baseline, mode: str = "copies") -> dict[str, Any]:
    """mode "copies": n sampled choices must not be copies of each other; "greedy": each of n greedy choices must
    be the baseline's answer. A baseline without n is asked for single answers instead."""
    single = replace(req, n=1) if mode == "greedy" or not baseline.capabilities.n else req
    return _block("choices", {"request": pair(req, candidate=candidate, baseline=baseline, baseline_req=single),
                              "n": req.n, "mode": mode}, candidate=candidate, baseline=baseline)


def rule_repro(requests: Sequence[Request], *, candidate, baseline, rule: str = "json",
               schema: dict | None = None) -> dict[str, Any]:
    """A rule each answer must keep: "json", a stopped structured-output answer is one JSON object (with the
    schema's keys); "n_usage", an n-choice answer bills the sum of its choices' tokens."""
    return _block("rule", {"requests": [pair(r, candidate=candidate, baseline=baseline) for r in requests],
                           "rule": rule, "schema": schema}, candidate=candidate, baseline=baseline)


def distribution_repro(req: Request, *, candidate, baseline, samples: int, tokens: int, alpha: float = 0.001,
                       n_choices: int = 1) -> dict[str, Any]:
    """Samples of the request on both routes must come from one distribution (first `tokens` tokens)."""
    return _block("distribution", {"request": pair(req, candidate=candidate, baseline=baseline), "samples": samples,
                                   "tokens": tokens, "alpha": alpha, "n_choices": n_choices if n_choices > 1 else None},
                  candidate=candidate, baseline=baseline)


def load_repro(steps: Sequence[tuple[Request, float, float | None]], *, candidate, baseline, concurrency: int,
               attempts: int = LOAD_ATTEMPTS, note: str = "") -> dict[str, Any]:
    """A schedule (request, gap before it in ms, hang-up after ms or None) whose requests must answer under load
    as they do alone; the script replays it up to `attempts` times."""
    return _block("load", {"steps": [{"request": pair(r, candidate=candidate, baseline=baseline), "gap_ms": gap,
                                      **({"abort_ms": abort} if abort is not None else {})}
                                     for r, gap, abort in steps],
                           "concurrency": concurrency, "note": note or None},
                  candidate=candidate, baseline=baseline, attempts=attempts)


def error_repro(req: Request, *, candidate, baseline) -> dict[str, Any]:
    """The request must get an answer (not an HTTP error, a broken stream or no connection)."""
    return _block("error", {"request": pair(req, candidate=candidate, baseline=baseline)},
                  candidate=candidate, baseline=baseline)


def spec_path_repro(plain: Sequence[Request], family: Sequence[Request], *, family_name: str, candidate,
                    baseline) -> dict[str, Any]:
    """The family's requests must speculate as plain requests do (per-answer draft counters: llama.cpp's timings,
    SGLang's meta_info, the in-process server's llama.cpp-style timings)."""
    return _block("spec_path", {"plain": [pair(r, candidate=candidate, baseline=baseline) for r in plain],
                                "family": [pair(r, candidate=candidate, baseline=baseline) for r in family],
                                "family_name": family_name}, candidate=candidate, baseline=baseline)


def draft_history_repro(order: Sequence[Request], pairs: Sequence[tuple[int, int]], *, candidate,
                        baseline) -> dict[str, Any]:
    """The requests in the order sent; each pair (i, j) is one greedy prompt sent at i and again at j, after other
    requests: its answers must draft alike (per-answer counters: llama.cpp's timings, the in-process server's)."""
    return _block("draft_history", {"order": [pair(r, candidate=candidate, baseline=baseline) for r in order],
                                    "pairs": [list(p) for p in pairs]}, candidate=candidate, baseline=baseline)


def turn_reuse_repro(turns: Sequence[tuple[Request, Request, Request, Request]], *, tolerance: int, candidate,
                     baseline) -> dict[str, Any]:
    """Two-turn conversations (candidate turn 1, turn 2, baseline turn 1, turn 2: each turn 2 goes on from that
    route's own answer): turn 2 must compute no more than `tolerance` prompt tokens beyond the baseline's."""
    return _block("turn_reuse", {"conversations": [
        {"turn1": pair(c1, candidate=candidate, baseline=baseline, baseline_req=b1),
         "turn2": pair(c2, candidate=candidate, baseline=baseline, baseline_req=b2)} for c1, c2, b1, b2 in turns],
        "tolerance": tolerance}, candidate=candidate, baseline=baseline)
