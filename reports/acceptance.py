"""The candidate's acceptance profile, its invariants, and whether speculation really ran.

A speculative route that silently fell back to plain decoding passes every equivalence check
and proves nothing about speculation; one that drafts but accepts nothing never ran its accept path
(the part that can break the output): every answer was the target's own, so it proves no more.
Counters that break their own invariants (per-position counts that do not add up, or grow with
position) point at a bookkeeping bug in the engine.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

RAN, DID_NOT_RUN, ACCEPTED_NOTHING, UNKNOWN, MISSING = (
    "ran", "did not run", "accepted nothing", "unknown", "evidence missing")


def speculation_status(candidate: str, *, inventory: Mapping[str, Any] | None,
                       profile: Mapping[str, Any] | None) -> dict[str, Any]:
    """"ran" needs drafts counted during this run and at least one drafted token accepted; "accepted nothing" when
    it drafted and accepted none (its accept path never ran); "did not run" when the server states it does not
    speculate, or the route claims speculation (or exports counters) yet drafted nothing; "evidence missing" when
    its server died before counting a draft; "unknown" when the engine exposes no counters. What the server
    states comes from its flavour (inventory.extra)."""
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
        return {"route": candidate, "status": RAN, "mean_acceptance_length": profile.get("mean_acceptance_length"),
                "invariants_broken": broken,
                "reason": (f"{profile['drafts']} drafts, mean acceptance length {profile.get('mean_acceptance_length')}"
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
    nothing. Either way every answer was the target's own and the checks say nothing about speculation."""
    leads = []
    for s in statuses:
        if s["status"] == DID_NOT_RUN:
            leads.append(f"speculation did not run on `{s['route']}` ({s['reason']}): the checks say nothing "
                         f"about its speculative path")
        elif s["status"] == ACCEPTED_NOTHING:
            leads.append(f"speculation ran but accepted nothing on `{s['route']}` ({s['reason']}): its accept path "
                         f"never ran, so every answer was the target's own and the checks say nothing about it")
    return leads


def speculation_problems(statuses: Sequence[Mapping[str, Any]]) -> list[str]:
    """Reasons that keep a route from adoption: no speculation, no accepted draft, no evidence, or counters that
    contradict themselves (the leads first)."""
    problems = speculation_leads(statuses)
    for s in statuses:
        if s["status"] == MISSING:
            problems.append(f"no speculation evidence from `{s['route']}` ({s['reason']})")
        elif s.get("invariants_broken"):
            problems.append(f"`{s['route']}` acceptance counters break invariants: {', '.join(s['invariants_broken'])}")
    return problems
