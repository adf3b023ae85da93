"""Preflight: before any check runs, every server route answers, serves the model it names, and tokenizes as the
local tokenizer does.

Why: prompts travel as token ids from the local tokenizer, so a tokenizer that is not the server's makes every
check judge garbage (silently, when both vocabularies have the same size), and a server that is not there turns
every check into a route error. Both are the user's configuration, not the engine's behaviour: the run stops
before its first check with one line per route (exit 4), never findings, a WAIT verdict or issue files.

First, before anything heavy loads, a TCP connect to every server the run does not start itself (`unreachable`).
Then per server route, once managed servers are up: what the server states (its models list, engine and version: `inventory`), one
tiny greedy request through the route's own wire, and the token count the server gives a few plain-text
prompts (`text_prompt_tokens`) against the local tokenizer's count of the same text, with and without its
special tokens (a server may add a BOS to text). In-process routes carry their own tokenizer and are not asked.
Environment: none.
"""
from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field, replace
from typing import Sequence
from urllib.parse import urlsplit

from spec_route_suite.routes.base import Request, Route
from spec_route_suite.routes.errors import RouteDisconnected, RouteError, RouteHTTPError
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import RouteSpec

# plain text every tokenizer splits differently: words, digits, punctuation, code and its indentation
PROBE_TEXTS = (
    "The quick brown fox jumps over the lazy dog; 1234567890 apples cost $3.50 each, said Dr. O'Neil.",
    "def mean(values):\n    return sum(values) / len(values)  # the average of a list\n",
    "Speculative decoding: a drafter proposes tokens, and the target verifies them in one pass (lossless?).",
)
TINY_PROMPT_TOKENS = 16
# a server that accepts connections and answers nothing must not cost the user its routes' request timeouts
# (120 s per probe): the whole preflight of one route gets this long
DEADLINE_S = 30.0


@dataclass(frozen=True)
class RoutePreflight:
    """What the preflight saw of one route: empty `problem` when it passed."""

    name: str
    kind: str
    url: str
    model: str
    engine: str = "unknown"
    version: str = "unknown"
    problem: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return not self.problem

    def line(self) -> str:
        return f"route '{self.name}' ({self.kind} {self.url}, model {self.model}): {self.problem}"


def unreachable(specs: Sequence[RouteSpec]) -> list[RoutePreflight]:
    """Server routes nothing listens for (a TCP connect refused or timed out): checked before anything heavy is
    loaded, so a server that is not there costs the user seconds, not the run's start-up."""
    down = []
    for spec in (s for s in specs if s.http and s.base_url):
        parts = urlsplit(spec.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=spec.timeouts.connect_s).close()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            down.append(RoutePreflight(spec.name, spec.kind, spec.base_url, spec.model,
                                       problem=f"cannot connect to {parts.hostname}:{port} ({why.lower()})"))
    return down


def preflight(specs: Sequence[RouteSpec]) -> list[RoutePreflight]:
    """Every server route of the run, checked concurrently (in-process routes need no preflight)."""
    servers = [spec for spec in specs if spec.http]
    if not servers:
        return []

    async def all_routes() -> list[RoutePreflight]:
        return list(await asyncio.gather(*(check_route(spec) for spec in servers)))
    return asyncio.run(all_routes())


async def check_route(spec: RouteSpec, route: Route | None = None) -> RoutePreflight:
    route = route or build_route(spec)
    seen = RoutePreflight(spec.name, spec.kind, spec.base_url or "", spec.model)
    deadline = min(DEADLINE_S, spec.timeouts.request_s)
    try:
        return await asyncio.wait_for(_checked(route, spec, seen, deadline), deadline)
    except asyncio.TimeoutError:
        return replace(seen, problem=f"no answer within {deadline:g} s (the server accepts connections but "
                                     f"does not answer its models list, a token count and a one-token request)")
    finally:
        await route.aclose()


async def _checked(route: Route, spec: RouteSpec, seen: RoutePreflight, deadline: float) -> RoutePreflight:
    inventory = await route.inventory()   # never raises: a server that is not there states nothing
    seen = replace(seen, engine=inventory.engine, version=inventory.version)
    served = inventory.extra.get("served_models") or []
    if served and spec.model not in served:
        return replace(seen, problem=f"the server does not serve model '{spec.model}' (it lists "
                                     f"{', '.join(served[:5])})")
    counts: list[int | None] = []
    try:   # the server's own count of a text prompt: asked first, as it needs no local tokenizer loaded
        counts.append(await route.text_prompt_tokens(PROBE_TEXTS[0]))
    except RouteDisconnected as exc:
        return replace(seen, problem=f"no answer: {_short(exc)}")
    except RouteError as exc:
        seen = replace(seen, notes=(f"tokenizer not compared with the server's: a text prompt failed ({_short(exc)})",))
    tokenizer = route.tokenizer
    if not seen.notes and counts != [None]:
        # the counts first: a tokenizer of another size makes the one-token request fail on ids the server
        # does not have, and the counts say why in numbers
        seen = await _tokenizer_checked(route, spec, seen, tokenizer, counts)
        if not seen.passed:
            return seen
    tiny = Request(prompt_ids=tuple(tokenizer(PROBE_TEXTS[0])["input_ids"][:TINY_PROMPT_TOKENS]), max_tokens=1,
                   request_id="preflight", timeout_s=deadline)
    try:
        await route.generate(tiny)
    except RouteError as exc:
        hint = (" (the local tokenizer may not be the server's)" if isinstance(exc, RouteHTTPError)
                and "token" in str(exc).lower() else "")
        return replace(seen, problem=f"a one-token request failed: {_short(exc)}{hint}")
    if counts == [None]:
        return replace(seen, notes=("tokenizer not compared with the server's: its answers state no prompt token "
                                    "count",))
    return seen


async def _tokenizer_checked(route: Route, spec: RouteSpec, seen: RoutePreflight, tokenizer,
                             counts: list[int | None]) -> RoutePreflight:
    """The server's token count of each probe text against the local tokenizer's, up to a constant offset the
    special tokens explain."""
    try:
        for text in PROBE_TEXTS[len(counts):]:
            counts.append(await route.text_prompt_tokens(text))
    except RouteError as exc:
        return replace(seen, problem=f"a text prompt failed: {_short(exc)}")
    if None in counts:
        return replace(seen, notes=("tokenizer not compared with the server's: some answers state no prompt "
                                    "token count",))
    plain = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in PROBE_TEXTS]
    specials = {len(tokenizer(text)["input_ids"]) - n for text, n in zip(PROBE_TEXTS, plain)}
    if not counts_agree(counts, plain, specials):
        return replace(seen, problem=(f"the local tokenizer ({spec.tokenizer}, {len(tokenizer)} ids) is not the "
                                      f"server's: {len(PROBE_TEXTS)} text prompts count {_counts(plain)} tokens "
                                      f"locally and {_counts(counts)} on the server"))
    return replace(seen, notes=(f"tokenizer matches the server's on {len(PROBE_TEXTS)} text prompts "
                                f"({_counts(counts)} tokens on the server, {_counts(plain)} locally)",))


def counts_agree(server: Sequence[int], local: Sequence[int], specials: set[int]) -> bool:
    """The same tokenizer counts alike, up to the special tokens a server adds to text (a BOS: one more on every
    prompt, where a local tokenizer may add none); another tokenizer's counts differ by varying amounts."""
    offsets = {theirs - ours for theirs, ours in zip(server, local)}
    return len(offsets) == 1 and offsets <= {0, 1, *specials}


def _counts(values: Sequence[int]) -> str:
    return "/".join(map(str, values))


def _short(exc: Exception, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
