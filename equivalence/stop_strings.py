"""Stop strings for every greedy prompt, taken from the prompt's own baseline answer.

Why: a server that drops the stop strings of a share of requests (a per-request path that forgets them,
a speculative block that runs past them) is caught only when a request with a stop string is hit. The
boundary sweep sends stop strings on a few lean prompts, about a dozen requests per candidate: a fault that
hits 20% of requests is missed in 0.8^12 = 7% of runs by chance alone. Here EVERY greedy prompt is sent
twice more, with a one-token and with a multi-token stop string cut from its own baseline answer so that the
string first completes at output token j, 1 <= j <= k: inside the first draft block, where a verifier
accepts several tokens at once and must still stop mid-block. With the default prompt set that is about
140 stop requests per candidate (0.8^140: never missed). The plain request the strings are cut from is
judged too, which puts the usage and finish_reason rules (usage.completion_tokens equal to the tokens
returned, 'length' exactly at max_tokens) on every prompt.
Environment: none.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from spec_route_suite.equivalence.boundaries import Case, first_completion
from spec_route_suite.routes.base import Completion, Request, TokenIds

Decode = Callable[[Sequence[int]], str]


def _first_at(tokens: Sequence[int], piece: str, j: int, decode: Decode) -> bool:
    return bool(piece) and piece.isprintable() and first_completion(tokens, predicate=lambda t: piece in decode(t)) == j


def pick_single(tokens: Sequence[int], *, decode: Decode, positions: Sequence[int],
                avoid: set[int]) -> tuple[str, int] | None:
    """A one-token stop string (one token's own text, trimmed) whose first completion is at one of `positions`."""
    for j in positions:
        if 0 < j < len(tokens) and tokens[j] not in avoid:
            piece = decode([tokens[j]]).strip()
            if _first_at(tokens, piece, j, decode):
                return piece, j
    return None


def pick_multi(tokens: Sequence[int], *, decode: Decode, positions: Sequence[int],
               avoid: set[int]) -> tuple[str, int] | None:
    """A stop string spanning tokens j-1 and j (neither token's text holds it alone), first completed at j."""
    for j in positions:
        if 1 < j < len(tokens) and not {tokens[j - 1], tokens[j]} & avoid:
            piece = decode(list(tokens[j - 1:j + 1])).strip()
            alone = (decode([tokens[j - 1]]), decode([tokens[j]]))
            if _first_at(tokens, piece, j, decode) and not any(piece in text for text in alone):
                return piece, j
    return None


def plain_request(prompt_ids: TokenIds, *, depth: int, request_id: str) -> Request:
    """The prompt's short greedy request: k + 3 tokens cover the first draft block and the step after it."""
    return Request(prompt_ids=tuple(prompt_ids), max_tokens=depth + 3, temperature=0.0, request_id=request_id)


def stop_cases(plain: Request, reference: Completion, *, depth: int, decode: Decode, eos_token_id: int | None,
               special: set[int], with_strings: bool = True) -> tuple[list[Case], str]:
    """The plain case and its one- and multi-token stop-string cases; the note says where each string completes."""
    eos = frozenset() if eos_token_id is None else frozenset({eos_token_id})
    cases = [Case("stop_strings", plain, eos)]
    if not with_strings:
        return cases, "the routes take no stop strings: usage and finish_reason only"
    tokens, avoid = list(reference.token_ids), set(special) | set(eos)
    notes = []
    picks = (("one-token", pick_single(tokens, decode=decode, positions=[1, 2, depth // 2 + 1, 3, depth], avoid=avoid)),
             ("multi-token", pick_multi(tokens, decode=decode, positions=[2, 3, depth, depth // 2 + 1], avoid=avoid)))
    for what, picked in picks:
        if picked is None:
            notes.append(f"no {what} stop string completes first inside the first block")
            continue
        stop, j = picked
        cases.append(Case("stop_strings", replace(plain, stop=(stop,), request_id=f"{plain.request_id}-{what}"), eos))
        notes.append(f"{what} stop {stop!r} first completed at output token {j}")
    return cases, "; ".join(notes)
