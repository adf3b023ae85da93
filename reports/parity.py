"""Baseline parity: the two routes must differ in speculation only.

A candidate compared against a baseline with another model, tokenizer, dtype or context
length can diverge for reasons that have nothing to do with speculation: every finding would
then be suspect. Unknown fields (an engine that does not reveal them) are listed, not guessed.
"""
from __future__ import annotations

from pathlib import PurePath
from typing import Any, Mapping

UNKNOWN = "unknown"
FIELDS = ("model", "tokenizer_hash", "dtype", "max_model_len")


def model_identity(inventory: Mapping[str, Any]) -> str:
    """The weights' directory name where the engine reveals a path; served names differ by engine."""
    extra = inventory.get("extra") or {}
    path = extra.get("model_path") or extra.get("root") or inventory.get("model") or UNKNOWN
    return PurePath(str(path).rstrip("/")).name or str(path)


def _value(inventory: Mapping[str, Any], field: str) -> Any:
    if field == "model":
        return model_identity(inventory)
    value = inventory.get(field)
    return UNKNOWN if value in (None, "", UNKNOWN) else value


def parity(baseline: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None, *,
           candidate_name: str) -> dict[str, Any]:
    """{"route", "differences": [{field, baseline, candidate}], "unknown": [fields], "warning": str|None}."""
    if not baseline or not candidate:
        return {"route": candidate_name, "differences": [], "unknown": list(FIELDS),
                "warning": None, "note": "inventory unavailable for one of the routes"}
    differences, unknown = [], []
    for field in FIELDS:
        b, c = _value(baseline, field), _value(candidate, field)
        if UNKNOWN in (b, c):
            unknown.append(field)
        elif b != c:
            differences.append({"field": field, "baseline": b, "candidate": c})
    warning = None
    if differences:
        warning = (f"`{candidate_name}` differs from the baseline in more than speculation: "
                   + "; ".join(f"{d['field']} {d['baseline']!r} vs {d['candidate']!r}" for d in differences)
                   + " (divergences may come from that, not from speculation)")
    return {"route": candidate_name, "differences": differences, "unknown": unknown, "warning": warning}
