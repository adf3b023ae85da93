"""The candidate's acceptance profile, its invariants, and whether speculation really ran.

A speculative route that silently fell back to plain decoding passes every equivalence check
and proves nothing about speculation; one that drafts but accepts nothing never ran its accept path
(the part that can break the output): every answer was the target's own, so it proves no more.
Counters that break their own invariants (per-position counts that do not add up, or grow with
position) point at a bookkeeping bug in the engine.

"Ran" needs more than one accepted token (issue #42: 1 accepted of 30,000 drafts read "ran"): a stated floor,
judged on the whole run and on each prompt class (reports/by_class.py). Below it the route "ran but accepted
almost nothing": nearly every answer was still the target's own, so the checks barely exercised the accept path,
and the route waits like one that accepted nothing, with its own wording. The floor, both at once:
- mean acceptance length >= MIN_MEAN_ACCEPTANCE_LENGTH = 1.1: one accepted token per ten verification steps;
- accepted share of drafted tokens >= MIN_ACCEPTED_SHARE = 0.01: one accepted per hundred drafted
  (binds for long drafts: at 7 tokens a step 1.07 is already below it; the length binds for short ones).
Why there: it sits far below every real route measured over a whole run of the suite, sampled traffic up to
temperature 1.6 included, and far above a broken one. The weakest trained drafter on the engines, llama.cpp's
EAGLE-3 under its draft-sampling bug (docs/llama-cpp-findings.md F4), reads 1.79 with 11% of its drafted tokens
accepted (the other committed drafters 2.5-3.7, 22-39%); the weakest route of all, vLLM's n-gram proposer on the
full-budget run (docs/vllm-cpu-findings.md), 1.20 with 5% accepted (4 tokens a step); the weakest prompt class,
DFlash on code, 1.46. So each real route clears both limits at least twice over, and 1 accepted of 30,000 drafts
(1.00003, 0.0005%) is far under. A floor at the real drafters' level (say 1.5) would call n-gram on sampled
traffic broken: it is not, it just drafts little that a sampled target says.
Too few drafted tokens cannot tell almost nothing from a weak drafter, so the floor is judged from
FLOOR_MIN_DRAFT_TOKENS = 400 drafted tokens on: a route at the weakest real profile (5% accepted, 4 tokens a step)
falls below the floor by chance with probability 0.004 at 400 (tests/test_report_context.py computes it), and
less with more. Fewer, with one token accepted, read "ran" as before, and the reason says the floor was not judged.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

RAN, DID_NOT_RUN, ACCEPTED_NOTHING, ALMOST_NOTHING, UNKNOWN, MISSING = (
    "ran", "did not run", "accepted nothing", "ran but accepted almost nothing", "unknown", "evidence missing")
MIN_MEAN_ACCEPTANCE_LENGTH = 1.1
MIN_ACCEPTED_SHARE = 0.01
FLOOR_MIN_DRAFT_TOKENS = 400


def below_floor(*, drafts: int | None, draft_tokens: int | None, accepted: int | None) -> str:
    """Why these counts accepted almost nothing ("" when they clear the floor, accepted none, or drafted fewer than
    FLOOR_MIN_DRAFT_TOKENS tokens). `drafts` None (an engine that states no drafting steps): the share alone."""
    if not accepted or (draft_tokens or 0) < FLOOR_MIN_DRAFT_TOKENS:
        return ""
    share = accepted / draft_tokens
    length = 1 + accepted / drafts if drafts else None
    if share >= MIN_ACCEPTED_SHARE and (length is None or length >= MIN_MEAN_ACCEPTANCE_LENGTH):
        return ""
    return (f"{accepted} of {draft_tokens} drafted tokens accepted ({share:.2%})"
            + (f", mean acceptance length {round(length, 5)} over {drafts} drafts" if length is not None else "")
            + f"; the floor is {MIN_MEAN_ACCEPTANCE_LENGTH} and {MIN_ACCEPTED_SHARE:.0%} of drafted tokens")


def speculation_status(candidate: str, *, inventory: Mapping[str, Any] | None,
                       profile: Mapping[str, Any] | None) -> dict[str, Any]:
    """"ran" needs drafts counted during this run and acceptance at or above the floor (the module's docstring);
    "ran but accepted almost nothing" below it; "accepted nothing" when it drafted and accepted none (its accept
    path never ran); "did not run" when the server states it does not speculate, or the route claims speculation
    (or exports counters) yet drafted nothing; "evidence missing" when its server died before counting a draft;
    "unknown" when the engine exposes no counters. What the server states comes from its flavour
    (inventory.extra)."""
    inventory = inventory or {}
    extra = inventory.get("extra") or {}
    claims = bool(inventory.get("speculation") or inventory.get("draft"))
    if profile is None and extra.get("speculative_stated") is False:
        return {"route": candidate, "status": DID_NOT_RUN,
                "reason": f"the server states it does not speculate: {extra.get('speculative_why') or '?'}"}
    if profile is None and extra.get("per_response_evidence"):
        return {"route": candidate, "status": MISSING,
                "reason": f"its engine ({inventory.get('engine')}) states drafted tokens in every answer, but no answer "
                          f"of this run carried them" + (" although the route is configured to speculate" if claims
                                                         else "")}
    if profile is None and not inventory:
        return {"route": candidate, "status": UNKNOWN,
                "reason": "the route gave no inventory and no speculation counters (see the run's notes)"}
    if profile is None:
        reason = "the engine exposes no speculation counters" + ("" if claims else " and reports no speculative config")
        return {"route": candidate, "status": UNKNOWN, "reason": reason}
    if profile.get("drafts", 0) > 0:
        broken = [name for name, ok in (profile.get("invariants") or {}).items() if ok is False]
        if profile.get("accepted") == 0:
            return {"route": candidate, "status": ACCEPTED_NOTHING, "mean_acceptance_length": 1.0,
                    "invariants_broken": broken,
                    "reason": f"{profile['drafts']} drafts, {profile.get('draft_tokens', '?')} drafted tokens, none "
                              f"accepted"}
        little = below_floor(drafts=profile["drafts"], draft_tokens=profile.get("draft_tokens"),
                             accepted=profile.get("accepted"))
        unjudged = (profile.get("draft_tokens") or 0) < FLOOR_MIN_DRAFT_TOKENS
        return {"route": candidate, "status": ALMOST_NOTHING if little else RAN,
                "mean_acceptance_length": profile.get("mean_acceptance_length"), "invariants_broken": broken,
                "reason": (little or f"{profile['drafts']} drafts, mean acceptance length "
                                     f"{profile.get('mean_acceptance_length')}"
                           + (f" (fewer than {FLOOR_MIN_DRAFT_TOKENS} drafted tokens: the floor was not judged)"
                              if unjudged else "")
                           + (f"; counter invariants broken: {', '.join(broken)}" if broken else ""))}
    if profile.get("server_answering_at_end") is False:   # it died before its counters could say anything
        return {"route": candidate, "status": MISSING,
                "reason": "its server stopped answering before any draft was counted (the counters are read up to "
                          "its last good /metrics sample)"}
    return {"route": candidate, "status": DID_NOT_RUN,
            "reason": "no draft was verified during the run" + (" although the route is configured to speculate"
                                                                 if claims else "")}


def baseline_problems(name: str | None, profile: Mapping[str, Any] | None) -> list[str]:
    """A baseline that drafted during the run is not an autoregressive reference: nothing it agrees with
    is proven lossless."""
    if name and profile and profile.get("drafts", 0) > 0:
        return [f"the baseline `{name}` speculated ({profile['drafts']} drafts): it is not an autoregressive "
                f"reference; give an AR route as the baseline"]
    return []


def speculation_leads(statuses: Sequence[Mapping[str, Any]]) -> list[str]:
    """What a route's verdict says first, before its findings: its speculation did not run, or ran and accepted
    nothing (every answer was the target's own: the checks say nothing about speculation) or almost nothing (they
    say little)."""
    leads = []
    for s in statuses:
        if s["status"] == DID_NOT_RUN:
            leads.append(f"speculation did not run on `{s['route']}` ({s['reason']}): the checks say nothing "
                         f"about its speculative path")
        elif s["status"] == ACCEPTED_NOTHING:
            leads.append(f"speculation ran but accepted nothing on `{s['route']}` ({s['reason']}): its accept path "
                         f"never ran, so every answer was the target's own and the checks say nothing about it")
        elif s["status"] == ALMOST_NOTHING:
            leads.append(f"speculation ran but accepted almost nothing on `{s['route']}` ({s['reason']}): its accept "
                         f"path barely ran, so nearly every answer was the target's own and the checks say little "
                         f"about it")
    return leads


def speculation_problems(statuses: Sequence[Mapping[str, Any]]) -> list[str]:
    """Reasons that keep a route from adoption: no speculation, no or almost no accepted draft, no evidence, or
    counters that contradict themselves (the leads first)."""
    problems = speculation_leads(statuses)
    for s in statuses:
        if s["status"] == MISSING:
            problems.append(f"no speculation evidence from `{s['route']}` ({s['reason']})")
        elif s.get("invariants_broken"):
            problems.append(f"`{s['route']}` acceptance counters break invariants: {', '.join(s['invariants_broken'])}")
    return problems
