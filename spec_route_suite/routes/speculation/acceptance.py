"""An engine's acceptance counters as a profile: mean acceptance length, acceptance by draft position, and the
counters' own invariants (per-position counts that add up to the accepted total and never grow with position).
`speculation_ran` means a drafted token was accepted (the accept path ran), `drafted` only that drafts were made.

Computed where the counters are read: the managed servers' before/after difference, the in-process engines'
counters summed over workers; reports/acceptance.py judges from it whether speculation really ran.
Environment: none.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from spec_route_suite.routes.base import AcceptanceSnapshot, summed_positions


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
        # each step emits its accepted drafts plus one token, each finished request one more from its prefill: more
        # accepted than that counts drafts that were never sent (cut by max_tokens or EOS inside the block)
        "accepted_le_emitted": (snapshot.accepted + drafts <= snapshot.emitted - snapshot.finished
                                if snapshot.emitted is not None and snapshot.finished is not None else None),
    }
    return {
        "drafts": drafts,
        "draft_tokens": snapshot.draft_tokens,
        "accepted": snapshot.accepted,
        "accepted_per_pos": per_pos,
        "mean_acceptance_length": round(1 + snapshot.accepted / drafts, 4) if drafts else None,
        # the same figure from what the server emitted (each step: its accepted drafts plus one; each finished
        # request: one from its prefill), so a server that counts unsent drafts as accepted cannot inflate it; an
        # upper bound where some steps decode without a draft
        "emitted_per_draft_step": (round((snapshot.emitted - snapshot.finished) / drafts, 4)
                                   if drafts and snapshot.emitted is not None and snapshot.finished is not None
                                   else None),
        "draft_acceptance_rate": round(snapshot.accepted / snapshot.draft_tokens, 4) if snapshot.draft_tokens else None,
        "per_position_acceptance_rate": [round(a / drafts, 4) for a in per_pos] if drafts else [],
        "drafted": drafts > 0,
        # its accept path ran: a route that drafts and accepts nothing answers with the target's tokens alone
        "speculation_ran": drafts > 0 and snapshot.accepted > 0,
        "invariants": invariants,
        "invariants_hold": all(v is not False for v in invariants.values()),
        "source": source or "server /metrics, controller before/after difference",
    }


def summed_worker_profile(values: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """In-process engines live in each worker: their counters add up across workers."""
    total = AcceptanceSnapshot(
        drafts=sum(v.get("drafts", 0) for v in values),
        draft_tokens=sum(v.get("draft_tokens", 0) for v in values),
        accepted=sum(v.get("accepted", 0) for v in values),
        accepted_per_pos=summed_positions(v.get("accepted_per_pos", []) for v in values))
    profile = acceptance_profile(total, source="route counters, summed over workers") or {}
    return {**profile, "workers": len(values)}
