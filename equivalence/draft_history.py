"""Drafting that depends on what came before: the same greedy request drafts alike fresh and after other requests.

Why: a drafter that carries one request's state into the next on the same slot drafts worse after other traffic
while every answer stays right (llama.cpp#27852: the ngram-cache drafter's per-slot cache is never reset,
acceptance 86% -> 11%), so no output comparison sees it. A drafter that keeps no state across requests (a draft
model, EAGLE-3, DFlash, MTP: its drafts are a function of the request's own context) drafts one greedy request
alike whatever came before it: the same drafted and accepted tokens in the same steps.

Where answers state their drafting (llama.cpp `timings`, SGLang `meta_info`, the in-process engines), PROMPTS greedy
prompts are sent one at a time, then `history_size` other requests (as many as the server has slots, within
HISTORY, so each slot has served another request since), then the prompts again in reverse order: each prompt's
second answer follows other requests than its first. For a drafter without state, a prompt whose accepted share of
drafted tokens falls by more than TOLERANCE between its two answers, with the accepted share pooled over the compared
prompts falling by more than TOLERANCE too, is a warning naming both requests. One-sided and pooled: the class drafts
worse after other traffic on every prompt (llama.cpp#27852 moved the share by 0.75), while other xdist workers'
requests batched beside a prompt on a shared server move its drafting either way (every committed llama.cpp run
moved one prompt of three by 0.19 to 0.54 while the pooled share moved by 0.1 or less; on the in-process engines it
does not move at all). An n-gram drafter (llama.cpp's ngram-* types,
vLLM's ngram and suffix, the reference engine's `drafter=ngram`) may keep state by design: its acceptance after
other traffic is measured beside the first one, not judged; so is a drafter whose route states no method. Two
answers to the same greedy request that differ are an output that depends on what came before: judged by the
near-tie policy, and their drafting is not compared.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from spec_route_suite.reports.findings import Finding
from spec_route_suite.routes.base import Completion, Request

CHECK = "draft-history"
PROMPTS = 3
MAX_TOKENS = 32
TOLERANCE = 0.1          # accepted share of a prompt's drafted tokens its second answer may differ by
HISTORY = (3, 8)          # other requests between a prompt's two answers: the server's slots, within these bounds
STATEFUL = ("ngram", "n-gram", "suffix", "lookup", "lookahead")   # drafters that may keep state across requests
STATELESS = ("draft", "eagle", "mtp", "dflash", "medusa", "nextn", "standalone", "assisted")
METHOD_KEYS = ("method", "types", "speculative_algorithm")
COULD_DETECT = ("a drafter without cross-request state drafting the same greedy request differently after other "
                "requests (llama.cpp#27852's class: state carried from one request into the next; answers unchanged)")


@dataclass(frozen=True)
class DrafterKind:
    """Whether the route's drafter may keep state across requests (None: its route states no method to tell)."""

    keeps_state: bool | None
    method: str = ""


def drafter_kind(inventory: Any, spec: Any = None) -> DrafterKind:
    """From the method the route's server states (inventory.speculation), else the one the routes file declares
    (options.method). A chain holding an n-gram drafter may keep state (llama.cpp's `draft-mtp,ngram-mod`)."""
    speculation = dict(getattr(inventory, "speculation", None) or {})
    stated = [str(speculation[k]) for k in METHOD_KEYS if speculation.get(k)]
    declared = spec.option("method") if spec is not None else None
    method = ",".join(stated) or (declared or "")
    words = method.lower()
    if any(w in words for w in STATEFUL):
        return DrafterKind(True, method)
    if any(w in words for w in STATELESS):
        return DrafterKind(False, method)
    return DrafterKind(None, method)


def history_size(slots: Any) -> int:
    """Other requests between a prompt's two answers: the server's stated slots (so that each slot serves another
    request in between), within HISTORY."""
    low, high = HISTORY
    return min(max(slots if isinstance(slots, int) else 0, low), high)


@dataclass(frozen=True)
class HistoryPlan:
    """The prompts sent twice and the requests sent between their two answers."""

    prompts: tuple[Request, ...]
    history: tuple[Request, ...]

    @classmethod
    def of(cls, records: Sequence[Any], ids, *, history: int) -> "HistoryPlan":
        """`records` (varied prompts, at least one), `ids(record)` their token ids for MAX_TOKENS new tokens."""
        def request(record, tag: str) -> Request:
            return Request(prompt_ids=ids(record), max_tokens=MAX_TOKENS, request_id=f"draft-history-{tag}-{record.id}")
        prompts = records[:PROMPTS]
        others = [records[(len(prompts) + j) % len(records)] for j in range(history)]
        return cls(prompts=tuple(request(r, "first") for r in prompts),
                   history=tuple(request(r, f"other{j}") for j, r in enumerate(others)))

    def again(self, first: Request) -> Request:
        return Request(prompt_ids=first.prompt_ids, max_tokens=first.max_tokens,
                       request_id=first.request_id.replace("-first-", "-again-", 1))

    def order(self) -> list[Request]:
        """Every request in the order sent: the prompts, the others, the prompts again in reverse order."""
        return [*self.prompts, *self.history, *(self.again(p) for p in reversed(self.prompts))]

    def positions(self) -> list[tuple[int, int]]:
        """Each prompt's place in `order()`, first and again."""
        ids = [r.request_id for r in self.order()]
        return [(ids.index(p.request_id), ids.index(self.again(p).request_id)) for p in self.prompts]


@dataclass(frozen=True)
class Drafting:
    drafted: int
    accepted: int
    steps: int | None

    @classmethod
    def of(cls, answer: Completion) -> "Drafting | None":
        if answer.draft_tokens is None:
            return None
        return cls(answer.draft_tokens, answer.accepted_tokens or 0, answer.draft_steps)

    @property
    def share(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def text(self) -> str:
        return (f"{self.accepted} of {self.drafted} drafted tokens accepted"
                + (f" in {self.steps} steps" if self.steps is not None else ""))


@dataclass(frozen=True)
class PromptPair:
    """One prompt's two answers: first, and again after other requests."""

    prompt_ids: tuple[int, ...]
    first_id: str
    again_id: str
    first: Completion
    again: Completion

    @property
    def same_answer(self) -> bool:
        return self.first.token_ids == self.again.token_ids and self.first.text == self.again.text

    @property
    def drafting(self) -> tuple[Drafting | None, Drafting | None]:
        return Drafting.of(self.first), Drafting.of(self.again)

    @property
    def stated(self) -> bool:
        return None not in self.drafting

    @property
    def comparable(self) -> bool:
        """Both answers state their drafting, are the same answer, and something was drafted."""
        first, again = self.drafting
        return self.stated and self.same_answer and bool(first.drafted or again.drafted)

    @property
    def drafted_worse(self) -> bool:
        """Its accepted share fell by more than TOLERANCE from the first answer to the second."""
        return self.comparable and self.drafting[0].share - self.drafting[1].share > TOLERANCE

    def sentence(self) -> str:
        first, again = self.drafting
        return (f"request {self.first_id}: {first.text() if first else 'no drafting stated'}; request "
                f"{self.again_id}, the same greedy prompt after other requests: "
                f"{again.text() if again else 'no drafting stated'}")


def pairs_of(plan: HistoryPlan, answers: Mapping[str, Completion]) -> list[PromptPair]:
    return [PromptPair(p.prompt_ids, p.request_id, plan.again(p).request_id, answers[p.request_id],
                       answers[plan.again(p).request_id]) for p in plan.prompts]


def acceptance(pairs: Sequence[PromptPair], which: int) -> float | None:
    """Accepted / drafted tokens over the pairs' first (0) or second (1) answers that state their drafting."""
    stated = [p.drafting[which] for p in pairs if p.drafting[which] is not None]
    drafted = sum(d.drafted for d in stated)
    return round(sum(d.accepted for d in stated) / drafted, 3) if drafted else None


@dataclass(frozen=True)
class HistoryVerdict:
    """The pairs of one route, judged by its drafter's kind."""

    route: str
    kind: DrafterKind
    pairs: tuple[PromptPair, ...]
    requests: int

    @property
    def pooled_drop(self) -> float | None:
        """How far the accepted share, pooled over the prompts compared, fell after other requests."""
        compared = [p for p in self.pairs if p.comparable]
        first, after = acceptance(compared, 0), acceptance(compared, 1)
        return None if first is None or after is None else round(first - after, 3)

    @property
    def differing(self) -> list[PromptPair]:
        """The prompts that drafted worse after other requests, when the drafter keeps no state and the pooled
        share fell too: what the warning names."""
        drop = self.pooled_drop
        if self.kind.keeps_state is not False or drop is None or drop <= TOLERANCE:
            return []
        return [p for p in self.pairs if p.drafted_worse]

    @property
    def answers_differ(self) -> list[PromptPair]:
        return [p for p in self.pairs if not p.same_answer]

    def reason(self) -> str:
        """Why the drafting comparison could not judge this route ("" when it could)."""
        after = f"acceptance {acceptance(self.pairs, 0)} first, {acceptance(self.pairs, 1)} after other requests"
        if not any(p.stated for p in self.pairs):
            return (f"'{self.route}' states no drafting per answer, so whether its drafting depends on earlier "
                    f"requests cannot be seen")
        if self.kind.keeps_state:
            return (f"its drafter ({self.kind.method}) may keep n-gram state across requests by design: its "
                    f"drafting after other traffic is measured ({after}), not judged")
        if self.kind.keeps_state is None:
            return (f"the route states no drafting method (declare options.method), so whether its drafter may keep "
                    f"state across requests is unknown: its drafting after other traffic is measured ({after}), "
                    f"not judged")
        if not any(p.comparable for p in self.pairs):
            return ("no prompt was drafted for with the same answer twice (speculation did not run for them, or "
                    "their answers differ), so no drafting was compared")
        return ""

    def coverage(self) -> dict[str, Any]:
        reason = self.reason()
        compared = [p for p in self.pairs if p.comparable] if not reason else []
        return {"verified": not reason, "reason": reason, "could_detect": COULD_DETECT,
                "ran": {"prompts compared": len(compared), "requests": self.requests}}

    def measurement(self) -> dict[str, Any]:
        return {"route": self.route, "method": self.kind.method, "keeps_state": self.kind.keeps_state,
                "acceptance_first": acceptance(self.pairs, 0), "acceptance_after": acceptance(self.pairs, 1),
                "prompts": [{"first": p.first_id, "again": p.again_id, "same_answer": p.same_answer,
                             **{k: None if d is None else vars(d) for k, d in zip(("first_drafting", "again_drafting"),
                                                                                   p.drafting)}}
                            for p in self.pairs]}

    def warning(self) -> str:
        """The warning's title ("" when no prompt drafted differently)."""
        differing = self.differing
        if not differing:
            return ""
        return (f"drafting depends on earlier requests: {len(differing)} of {len(self.pairs)} greedy prompts drafted "
                f"worse after other requests, acceptance {acceptance(self.pairs, 0)} first and "
                f"{acceptance(self.pairs, 1)} after (answers unchanged; {self.kind.method} keeps no state by design): "
                f"e.g. {differing[0].sentence()}")


def findings_of(verdict: HistoryVerdict, plan: HistoryPlan, judge, repro: dict | None = None) -> list[Finding]:
    """The warning (drafting that differs, with `repro`: the requests in order) and, for each prompt answered
    differently the second time, a finding of the severity `judge(pair)` gives it ((severity, why): the run's
    near-tie policy)."""
    found = []
    if verdict.warning():
        found.append(Finding(check=CHECK, severity="warning", route=verdict.route, title=verdict.warning(),
                             details={"order": [r.request_id for r in plan.order()], "method": verdict.kind.method,
                                      "prompts": [p.sentence() for p in verdict.differing], "repro": repro}))
    for pair in verdict.answers_differ:
        severity, why = judge(pair)
        found.append(Finding(check=CHECK, severity=severity, route=verdict.route,
                             title=f"the same greedy request answered differently after other requests: request "
                                   f"{pair.first_id} {pair.first.text[:80]!r}, request {pair.again_id} "
                                   f"{pair.again.text[:80]!r} ({why})",
                             details={"order": [r.request_id for r in plan.order()], "why": why}))
    return found
