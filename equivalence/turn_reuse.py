"""Cache reuse across turns under speculation: turn 2 of a conversation takes turn 1 from the prompt cache as the AR
server does.

Why: a speculative engine that leaves the drafts it accepted past the end of an answer in the slot's cache makes the
cache miss the next turn, which goes on from the answer as returned (llama.cpp#28049: every follow-up request
computes the whole previous answer again, answer length + 4 tokens). Answers stay right; time to first token grows
with every turn, and no output comparison sees it.

CONVERSATIONS two-turn conversations as plain continued prompts in token ids: turn 1 a greedy prompt of the run's set
answered with TURN_ONE_TOKENS tokens (ignore_eos, so both routes answer at that length), turn 2 = turn 1's prompt +
its answer + FOLLOW_UP (a new user line), sent right after it. On turn 2 the server computes its prompt tokens minus
those it states it took from its cache (usage.prompt_tokens_details.cached_tokens, llama.cpp's timings.cache_n,
SGLang's meta_info; the reference engine with prefix_cache=on). The candidate's count against the AR baseline's on
the same conversation: more than TOLERANCE tokens beyond it is a warning naming the conversation. TOLERANCE is one KV
block of vLLM's (16 tokens: a block cache reuses whole blocks only), more than the last verified block (k + 1) a
correct speculative engine can leave uncached; llama.cpp#28049 costs the whole answer (here TURN_ONE_TOKENS).
An engine that states it has no prefix cache: not applicable. A route that states no cached tokens, a baseline
without them or one that reused nothing on turn 2: not verified (nothing to compare).
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from spec_route_suite.reports.findings import Finding
from spec_route_suite.routes.base import Completion, Request, TokenIds

CHECK = "turn-reuse"
CONVERSATIONS = 3
TURN_ONE_TOKENS = 48
TURN_TWO_TOKENS = 4
TOLERANCE = 16
FOLLOW_UP = "\nUser: Say it again in other words.\nAssistant:"
COULD_DETECT = (f"turn 2 of a conversation computing more than {TOLERANCE} prompt tokens beyond the AR server's on "
                f"the same conversation (llama.cpp#28049's class: the previous answer computed again every turn)")


def first_turn(prompt_ids: TokenIds, n: int) -> Request:
    return Request(prompt_ids=tuple(prompt_ids), max_tokens=TURN_ONE_TOKENS, ignore_eos=True,
                   request_id=f"turn-reuse-{n}-turn1")


def second_turn(first: Request, answer: Completion, follow_up: TokenIds) -> Request:
    """Turn 1's prompt, the answer as returned, the new user line."""
    return Request(prompt_ids=first.prompt_ids + tuple(answer.token_ids) + tuple(follow_up),
                   max_tokens=TURN_TWO_TOKENS, request_id=first.request_id.replace("-turn1", "-turn2"))


@dataclass(frozen=True)
class Conversation:
    """One route's two turns."""

    first: Request
    answer: Completion
    second: Request
    reply: Completion

    @property
    def prompt(self) -> int:
        """Turn 2's prompt tokens as the server counted them (as sent, where it does not say)."""
        return self.reply.prompt_tokens or len(self.second.prompt_ids)

    @property
    def cached(self) -> int | None:
        return self.reply.cached_tokens

    @property
    def computed(self) -> int | None:
        """Turn 2's prompt tokens the server did not take from its cache (None: it states no cached tokens)."""
        return None if self.cached is None else self.prompt - self.cached

    def text(self) -> str:
        return f"computed {self.computed} of {self.prompt} prompt tokens on turn 2 ({self.cached} cached)"


def converse(route: Any, prompts: Sequence[TokenIds], follow_up: TokenIds) -> list[Conversation]:
    """Each conversation's two turns, one after the other, on `route` (a RouteHandle)."""
    done = []
    for n, ids in enumerate(prompts):
        first = first_turn(ids, n)
        answer = route.generate(first)
        second = second_turn(first, answer, follow_up)
        done.append(Conversation(first, answer, second, route.generate(second)))
    return done


def not_applicable(inventory: Any) -> str:
    """Why the bug class cannot occur on this route ("" when it can): its engine states it has no prefix cache."""
    if (getattr(inventory, "extra", None) or {}).get("prefix_cache") is False:
        return "the engine has no prefix cache (its inventory says so): nothing is reused across turns"
    return ""


@dataclass(frozen=True)
class ReuseVerdict:
    """The candidate's conversations beside the baseline's, turn 2's computed prompt tokens compared."""

    route: str
    baseline: str
    ours: tuple[Conversation, ...]
    theirs: tuple[Conversation, ...]
    tolerance: int = TOLERANCE

    def excess(self, ours: Conversation, theirs: Conversation) -> int | None:
        if ours.computed is None or theirs.computed is None:
            return None
        return ours.computed - theirs.computed

    @property
    def over(self) -> list[tuple[Conversation, Conversation, int]]:
        """The conversations whose turn 2 computed more than the tolerance beyond the baseline's."""
        pairs = [(o, t, self.excess(o, t)) for o, t in zip(self.ours, self.theirs)]
        return [(o, t, e) for o, t, e in pairs if e is not None and e > self.tolerance]

    def reason(self) -> str:
        """Why the comparison could not judge ("" when it could)."""
        if any(c.answer.text_level for c in self.ours):
            return ("the candidate returns no token ids, so turn 2 cannot go on from the tokens it answered and "
                    "its cache is not asked what it holds")
        if any(c.cached is None for c in self.ours):
            return (f"'{self.route}' states no cached prompt tokens (usage.prompt_tokens_details.cached_tokens, "
                    f"llama.cpp timings.cache_n), so turn 2's reuse cannot be seen")
        if any(c.cached is None for c in self.theirs):
            return (f"the baseline '{self.baseline}' states no cached prompt tokens, so there is no AR reuse to "
                    f"compare turn 2 with")
        if not any(c.cached for c in self.theirs):
            return (f"the baseline '{self.baseline}' took no cached prompt tokens on turn 2, so there is no AR reuse "
                    f"to fall short of")
        return ""

    def coverage(self) -> dict[str, Any]:
        reason = self.reason()
        return {"verified": not reason, "reason": reason, "could_detect": COULD_DETECT,
                "ran": {"conversations compared": 0 if reason else len(self.ours),
                        "requests": 2 * len(self.ours)}}

    def measurement(self) -> dict[str, Any]:
        return {"route": self.route, "baseline": self.baseline, "tolerance": self.tolerance,
                "conversations": [{"turn1": o.first.request_id, "turn2": o.second.request_id, "prompt": o.prompt,
                                   "cached": o.cached, "computed": o.computed, "baseline_prompt": t.prompt,
                                   "baseline_cached": t.cached, "baseline_computed": t.computed,
                                   "excess": self.excess(o, t)} for o, t in zip(self.ours, self.theirs)]}

    def finding(self, repro: dict | None = None) -> Finding | None:
        """The warning, naming the conversation that computed the most beyond the baseline, with `repro` (None: none
        did)."""
        over = self.over
        if self.reason() or not over:
            return None
        ours, theirs, excess = max(over, key=lambda item: item[2])
        title = (f"turn 2 computes the previous answer again: {len(over)} of {len(self.ours)} conversations compute "
                 f"more than {self.tolerance} prompt tokens beyond the AR server on the same conversation, e.g. "
                 f"{ours.second.request_id}: the candidate {ours.text()}, the baseline {theirs.text()} "
                 f"({excess} more; turn 1 answered {len(ours.answer.token_ids)} tokens)")
        return Finding(check=CHECK, severity="warning", route=self.route, title=title,
                       details={"conversation": [ours.first.request_id, ours.second.request_id], "excess": excess,
                                "tolerance": self.tolerance, "conversations": self.measurement()["conversations"],
                                "repro": repro})
