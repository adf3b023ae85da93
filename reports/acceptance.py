"""The candidate's acceptance profile, its invariants, and whether speculation really ran.

A speculative route that silently fell back to plain decoding passes every equivalence check
and proves nothing about speculation; counters that break their own invariants (per-position
counts that do not add up, or grow with position) point at a bookkeeping bug in the engine.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from spec_route_suite.fixtures.routes.base import AcceptanceSnapshot

RAN, DID_NOT_RUN, UNKNOWN = "ran", "did not run", "unknown"


def acceptance_profile(snapshot: AcceptanceSnapshot | None, *, num_speculative_tokens: int | None = None,
                       source: str = "") -> dict[str, Any] | None:
    """Mean acceptance length, per-position acceptance rates and the counters' own invariants."""
    if snapshot is None:
        return None
    drafts, per_pos = snapshot.drafts, list(snapshot.accepted_per_pos)
    k = num_speculative_tokens or len(per_pos) or None
    invariants = {
        "per_position_sums_to_accepted": sum(per_pos) == snapshot.accepted if per_pos else None,
        "per_position_non_increasing": all(a >= b for a, b in zip(per_pos, per_pos[1:])) if per_pos else None,
        "accepted_le_draft_tokens": snapshot.accepted <= snapshot.draft_tokens,
        "draft_tokens_le_drafts_times_k": snapshot.draft_tokens <= drafts * k if k else None,
        "counters_non_negative": min([drafts, snapshot.draft_tokens, snapshot.accepted, *per_pos]) >= 0,
    }
    return {
        "drafts": drafts,
        "draft_tokens": snapshot.draft_tokens,
        "accepted": snapshot.accepted,
        "accepted_per_pos": per_pos,
        "mean_acceptance_length": round(1 + snapshot.accepted / drafts, 4) if drafts else None,
        "draft_acceptance_rate": round(snapshot.accepted / snapshot.draft_tokens, 4) if snapshot.draft_tokens else None,
        "per_position_acceptance_rate": [round(a / drafts, 4) for a in per_pos] if drafts else [],
        "speculation_ran": drafts > 0,
        "invariants": invariants,
        "invariants_hold": all(v is not False for v in invariants.values()),
        "source": source or "server /metrics, controller before/after difference",
    }


def summed_worker_profile(values: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """In-process engines live in each worker: their counters add up across workers."""
    width = max((len(v.get("accepted_per_pos", [])) for v in values), default=0)
    total = AcceptanceSnapshot(
        drafts=sum(v.get("drafts", 0) for v in values),
        draft_tokens=sum(v.get("draft_tokens", 0) for v in values),
        accepted=sum(v.get("accepted", 0) for v in values),
        accepted_per_pos=tuple(sum((list(v.get("accepted_per_pos", [])) + [0] * width)[i] for v in values)
                               for i in range(width)))
    profile = acceptance_profile(total, source="route counters, summed over workers") or {}
    return {**profile, "workers": len(values)}


def speculation_status(candidate: str, *, inventory: Mapping[str, Any] | None,
                       profile: Mapping[str, Any] | None) -> dict[str, Any]:
    """"ran" needs drafts counted during this run; "did not run" when the route claims speculation
    (or exports counters) yet drafted nothing; "unknown" when the engine exposes no counters."""
    claims = bool((inventory or {}).get("speculation") or (inventory or {}).get("draft"))
    if profile is None and _exports_counters_when_speculating(inventory):
        return {"route": candidate, "status": DID_NOT_RUN,
                "reason": "the server's /metrics answers but has no spec_decode series: vLLM exports them whenever "
                          "it speculates, so this is a plain autoregressive server"}
    if profile is None and claims and (inventory or {}).get("engine") == "sglang":
        return {"route": candidate, "status": DID_NOT_RUN,
                "reason": "the server is configured to speculate, but no response carried a verify step "
                          "(meta_info spec_verify_ct)"}
    if profile is None:
        reason = "the engine exposes no speculation counters" + ("" if claims else " and reports no speculative config")
        return {"route": candidate, "status": UNKNOWN, "reason": reason}
    if profile.get("drafts", 0) > 0:
        broken = [name for name, ok in (profile.get("invariants") or {}).items() if ok is False]
        return {"route": candidate, "status": RAN, "mean_acceptance_length": profile.get("mean_acceptance_length"),
                "invariants_broken": broken,
                "reason": (f"{profile['drafts']} drafts, mean acceptance length {profile.get('mean_acceptance_length')}"
                           + (f"; counter invariants broken: {', '.join(broken)}" if broken else ""))}
    return {"route": candidate, "status": DID_NOT_RUN,
            "reason": "no draft was verified during the run" + (" although the route is configured to speculate"
                                                                 if claims else "")}


def _exports_counters_when_speculating(inventory: Mapping[str, Any] | None) -> bool:
    """An engine whose /metrics always carries spec_decode_* series when it speculates (vLLM), reachable."""
    inventory = inventory or {}
    endpoints = (inventory.get("extra") or {}).get("endpoints") or {}
    return inventory.get("engine") == "vllm" and endpoints.get("metrics") == "ok"


def baseline_problems(name: str | None, profile: Mapping[str, Any] | None) -> list[str]:
    """A baseline that drafted during the run is not an autoregressive reference: nothing it agrees with
    is proven lossless."""
    if name and profile and profile.get("drafts", 0) > 0:
        return [f"the baseline `{name}` speculated ({profile['drafts']} drafts): it is not an autoregressive "
                f"reference; give an AR route as the baseline"]
    return []


def speculation_problems(statuses: Sequence[Mapping[str, Any]]) -> list[str]:
    """Reasons that keep a route from adoption: no speculation, or counters that contradict themselves."""
    problems = []
    for s in statuses:
        if s["status"] == DID_NOT_RUN:
            problems.append(f"speculation did not run on `{s['route']}` ({s['reason']}): the checks say nothing "
                            f"about its speculative path")
        elif s.get("invariants_broken"):
            problems.append(f"`{s['route']}` acceptance counters break invariants: {', '.join(s['invariants_broken'])}")
    return problems
