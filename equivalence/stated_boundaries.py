"""Where a route's own limits are: its chunked-prefill budget, its drafter's max length, its context end.

Upstream speculative bugs of 2025-26 sit exactly at such limits: greedy output wrong at a chunked-prefill
boundary (sglang#26800), a crash when the prompt exceeds the drafter's max length (vllm#24662), wrong
output at the sliding-window size (sglang#39287). A black-box sweep finds them only by aiming prompts at
-1/0/+1 around each limit the route states (its flavour: vLLM's max_num_batched_tokens and draft
max_model_len; the reference engine's prefill_chunk) or the routes file declares
(`options = { chunked_prefill_tokens = "64", draft_max_len = "256" }`), with max_tokens of two draft
blocks so the first blocks of generation straddle it. This module says what the limit is and where the
prompts go; equivalence/test_stated_boundaries.py sends them to both routes.

A stated limit of 0 means the route says it has none (no chunked prefill, a drafter as long as the
target): the part is "not applicable", as it is for a limit at or past the candidate engine's own context (no
request reaches it there). A limit inside the candidate's context that the pair's smaller context (a baseline
with less room) keeps out of reach is "not verified": the engine has it, the sweep cannot compare it. A limit
nobody states is "not verified" (declare it). The context
end is always the pair's context: prompts whose prompt + max_tokens end 1 short of it and exactly at it (a
request one token longer must be refused, so it is never sent).
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("chunked_prefill", "draft_max_len", "context_end")
KEYS = {"chunked_prefill": "chunked_prefill_tokens", "draft_max_len": "draft_max_len"}
WHAT = {"chunked_prefill": "chunked-prefill budget", "draft_max_len": "drafter's max length",
        "context_end": "context end"}
OFFSETS = (-1, 0, 1)
MULTIPLES = (1, 2)   # chunk edges: the first and the second


@dataclass(frozen=True)
class Stated:
    """One limit of a route: `tokens` None when nobody states it, 0 when the route states it has none."""

    kind: str
    tokens: int | None
    source: str

    @property
    def known(self) -> bool:
        return self.tokens is not None

    def describe(self) -> str:
        if self.tokens is None:
            return f"no {WHAT[self.kind]} stated ({self.source})"
        if self.tokens == 0:
            return f"no {WHAT[self.kind]} ({self.source})"
        return f"{WHAT[self.kind]} {self.tokens} tokens ({self.source})"


@dataclass(frozen=True)
class EdgeCase:
    """One prompt length and max_tokens around a limit; `offset` is where the prompt (or its end) sits."""

    prompt_tokens: int
    max_tokens: int
    label: str


def _count(value) -> int | None:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def stated_limit(kind: str, *, inventory, spec, context: int | None) -> Stated:
    """The route's limit of this kind: its server's statement, else the routes file's, else unknown."""
    if kind == "context_end":
        return Stated(kind, context, "the pair's context" if context else "neither route states its context")
    extra = dict(getattr(inventory, "extra", None) or {})
    stated = _count((extra.get("boundaries") or {}).get(KEYS[kind]))
    if stated is not None:
        return Stated(kind, stated, "stated by the route's server")
    declared = _count(spec.option(KEYS[kind])) if spec is not None else None
    if declared is not None:
        return Stated(kind, declared, "declared in the routes file")
    return Stated(kind, None, f"declare options.{KEYS[kind]} in the routes file")


def engine_rules_out(limit: Stated, engine_context: int | None) -> bool:
    """Does the candidate's engine itself say no request can reach this limit (the part is "not applicable")? It
    states it has none, or its own context (what it reports or stated in a refusal, not the routes file's
    max_context) ends before it."""
    return limit.tokens == 0 or (limit.kind != "context_end" and limit.tokens is not None
                                 and engine_context is not None and limit.tokens >= engine_context)


def plan(limit: Stated, *, k: int, context: int | None) -> tuple[list[EdgeCase], str]:
    """The cases around a limit that fit the pair's context, and why there are none when there are none."""
    if not limit.tokens:
        return [], limit.describe()
    if limit.kind != "context_end" and context is not None and limit.tokens >= context:
        return [], (f"{limit.describe()} is not below the pair's context ({context} tokens): no request of the "
                    f"sweep reaches it")
    span = 2 * k + 2   # two draft blocks of generation: the first ones straddle a limit the prompt sits at
    room = None if context is None else context
    cases: list[EdgeCase] = []
    if limit.kind == "context_end":
        for end in (-1, 0):   # prompt + max_tokens = context - 1, context
            cases.append(EdgeCase(limit.tokens + end - span, span, f"prompt + max_tokens = context {end:+d}"))
    elif limit.kind == "chunked_prefill":
        for multiple in MULTIPLES:
            for offset in OFFSETS:
                cases.append(EdgeCase(multiple * limit.tokens + offset, span,
                                      f"prompt = {multiple} x budget {offset:+d}"))
    else:
        for offset in OFFSETS:
            cases.append(EdgeCase(limit.tokens + offset, span, f"prompt = drafter's max length {offset:+d}"))
        cases.append(EdgeCase(limit.tokens - k // 2 - 1, span, "generation crosses the drafter's max length "
                                                                "inside the first draft block"))
    fitting = []
    for case in cases:   # near the context end a case keeps the tokens that still fit (at least one)
        tokens = case.max_tokens if room is None else min(case.max_tokens, room - case.prompt_tokens)
        if case.prompt_tokens >= 2 and tokens >= 1:
            fitting.append(EdgeCase(case.prompt_tokens, tokens, case.label))
    if not fitting:
        return [], f"{limit.describe()}: no request of the sweep fits the pair's context ({context} tokens)"
    return fitting, ""
