"""Does speculation run for every kind of request, or only for plain ones?

Why: vLLM (to about v0.13) turned speculation off for requests with logprobs or penalties (vllm#34497), and
llama.cpp speculated only on the first chat request (llama.cpp#19231). Answers stay correct, so every parity
check passes for those features without ever exercising the speculative path: the route is "verified" where
it was never tested. Where the engine states drafting per answer (llama.cpp `timings.draft_n`, SGLang
`meta_info`, the in-process engines), each request family's answers say whether they were drafted for. A
family none of whose answers speculated while plain requests did is a finding ("speculation silently off
for X"), and the parity rows of the checks that judge that feature are "not verified on the speculative
path". A route that states nothing per answer (vLLM: server-wide /metrics counters only) cannot be judged
this way: not verified.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from spec_route_suite.routes.base import Completion, Request, ResponseFormat

MAX_TOKENS = 24   # several draft blocks: a speculating engine drafts on every one of them
PART = "on the speculative path"


@dataclass(frozen=True)
class Family:
    """A kind of request, how to make one from a plain greedy request, and the parity rows that rely on it."""

    name: str
    make: Callable[[Request], Request]
    capability: str = ""                       # the route capability it needs ("" none)
    parity: tuple[tuple[str, str], ...] = ()   # (check family, part) whose verdict assumes speculation ran


FAMILIES = (
    Family("logprobs", lambda r: replace(r, logprobs=2), "logprobs", (("logprobs", PART),)),
    Family("penalties", lambda r: replace(r, repetition_penalty=1.2), "",
           (("features", f"penalties {PART}"),)),
    Family("chat", lambda r: r, "chat", (("chat", PART),)),   # built from a chat record by the test
    Family("n", lambda r: replace(r, n=2), "n", (("features", f"n {PART}"),)),
    Family("json", lambda r: replace(r, response_format=ResponseFormat("json_object")), "",
           (("features", f"response_format {PART}"),)),
)
BY_NAME = {f.name: f for f in FAMILIES}


@dataclass(frozen=True)
class Share:
    """How many answers of one family stated their drafting, and how many of those were drafted for."""

    answers: int
    stated: int
    speculated: int

    @classmethod
    def of(cls, completions: Sequence[Completion]) -> "Share":
        stated = [c for c in completions if c.draft_tokens is not None]
        return cls(len(completions), len(stated), sum(1 for c in stated if c.draft_tokens > 0))

    @property
    def rate(self) -> float | None:
        return None if not self.stated else self.speculated / self.stated

    def phrase(self) -> str:
        if not self.stated:
            return f"{self.answers} answer(s), none stating its drafting"
        return f"{self.speculated} of {self.stated} answers speculated"


def silently_off(family: Share, plain: Share) -> bool:
    """The family never speculated while plain requests did (both stated per answer)."""
    return family.stated > 0 and family.speculated == 0 and plain.speculated > 0
