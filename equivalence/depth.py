"""How many tokens the candidate drafts per step (k), and whether anyone said so.

The boundary sweep puts a boundary at every position of the first verify block (max_tokens 1..k+2) and
the distribution check samples whole blocks; both need k. It comes from what the route's server states
(its flavour's draft depth, or its speculative settings), else the route's own configuration (an
in-process draft model's num_assistant_tokens, prompt lookup), else what the routes file declares
(`options = { num_speculative_tokens = "4" }`), else it is assumed: a sweep at an assumed k is a named
gap, never "verified" (a route that drafts 8 would have boundaries the sweep never reached).
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass

from spec_route_suite.routes.base import RouteInventory

DEFAULT_DEPTH = 4   # vLLM's and transformers' usual k
DEPTH_KEYS = ("num_speculative_tokens", "num_assistant_tokens", "num_draft_tokens", "prompt_lookup_num_tokens",
              "speculative_num_draft_tokens", "n_max", "k")
ASSUMED = "assumed"


@dataclass(frozen=True)
class Depth:
    k: int
    source: str   # "stated by the route's server", "the route's configuration", "declared in the routes file", ASSUMED

    @property
    def known(self) -> bool:
        return self.source != ASSUMED

    def gap(self) -> str:
        """Why a check planned at this k is not verified (empty when k is known)."""
        return "" if self.known else (f"k={self.k} assumed: the route states no draft depth (declare "
                                      f"options.num_speculative_tokens in the routes file)")


def _count(value) -> int | None:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def draft_depth(inventory: RouteInventory | None, spec=None, default: int = DEFAULT_DEPTH) -> Depth:
    """k from the route's inventory, else its spec, else its declared options, else `default` (assumed)."""
    extra = dict(inventory.extra or {}) if inventory is not None else {}
    speculation = dict(inventory.speculation) if inventory is not None else {}
    for value in (extra.get("draft_depth"), *(speculation.get(key) for key in DEPTH_KEYS)):
        if _count(value):
            return Depth(_count(value), "stated by the route's server")
    for attr in ("num_assistant_tokens", "prompt_lookup"):
        if _count(getattr(spec, attr, None)):
            return Depth(_count(getattr(spec, attr)), "the route's configuration")
    declared = _count(spec.option("num_speculative_tokens")) if spec is not None else None
    if declared:
        return Depth(declared, "declared in the routes file")
    return Depth(default, ASSUMED)
