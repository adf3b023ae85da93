"""KV pressure: offer more concurrent work than the engine's KV pool holds, so requests are preempted mid-draft.

Why: preemption (vLLM) and retraction (SGLang) of a request in the middle of speculative decoding is where
its draft state can be lost or go stale (vllm#49620 fixing #41190, sglang#14942, sglang#18984); an engine
with room for everything never goes there. The stressor sends many short-prompt, long-output requests at
once (ignore_eos, so every answer really is long) and compares each with its serial reference. It is sized
from what the route states about its pool (vLLM's num_gpu_blocks x block_size, the reference engine's
kv_capacity): the offered load must exceed the pool, else running it proves nothing and it is skipped as
"not verified" with the numbers. Whether anything was preempted comes from the engine's own counter
(vLLM's num_preemptions_total, the reference engine's): none, or no counter, is "not verified".
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from spec_route_suite.routes.errors import RouteError

SHORT_PROMPTS = 12     # distinct prompts, each sent many times
LONG_OUTPUT = 96       # tokens per answer at least (more when the pool needs it)
OVERLOAD = 1.25        # offered KV tokens over the pool's


@dataclass(frozen=True)
class PressurePlan:
    """How hard to push: requests in flight, tokens per answer, and what that offers against the pool."""

    concurrency: int
    max_tokens: int
    requests: int
    capacity: int | None
    offered: int
    why_not: str = ""   # why this load cannot preempt anything ("" : it can, or the pool is unknown)

    def describe(self) -> str:
        pool = f"a pool of {self.capacity} tokens" if self.capacity else "a pool the engine does not state"
        return (f"{self.requests} requests of {self.max_tokens} tokens at concurrency {self.concurrency}: up to "
                f"{self.offered} KV tokens offered to {pool}")


def plan_pressure(*, capacity: int | None, concurrency: int, prompt_tokens: Sequence[int], room: int | None,
                  requests: int, slots: int | None = None) -> PressurePlan:
    """Answers long enough that the requests running together (`concurrency`, at most the engine's `slots`) need
    OVERLOAD x the pool (within the context)."""
    mean_prompt = round(sum(prompt_tokens) / max(len(prompt_tokens), 1))
    running = min(concurrency, slots or concurrency)
    longest = room if room is not None else LONG_OUTPUT
    tokens = min(LONG_OUTPUT, longest)
    if capacity:
        tokens = min(max(tokens, -(-int(OVERLOAD * capacity) // running) - mean_prompt), longest)
    offered = running * (mean_prompt + tokens)
    why = ""
    if capacity == 0:
        why = "the engine states its KV pool has no limit: nothing is ever preempted"
    elif capacity and offered <= capacity:
        why = (f"the KV pool ({capacity} tokens, as the engine states it) holds the whole offered load ({running} "
               f"requests running at once x {mean_prompt + tokens} tokens = {offered}): nothing can be preempted; "
               f"start the server with a smaller KV cache (routes/vllm-cpu-edges.toml)")
    return PressurePlan(concurrency=concurrency, max_tokens=max(tokens, 1), requests=requests, capacity=capacity,
                        offered=offered, why_not=why)


def _stated(inventory, key: str) -> int | None:
    value = (getattr(inventory, "extra", None) or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def kv_capacity(inventory, spec=None) -> int | None:
    """Tokens the route's KV pool holds, as its server states it (0: it states it has no limit), else as its routes
    file declares it (`options = { kv_capacity_tokens = "1536" }`); None: nobody says."""
    stated = _stated(inventory, "kv_capacity_tokens")
    if stated is not None:
        return stated
    declared = spec.option("kv_capacity_tokens") if spec is not None else None
    return int(declared) if declared and declared.isdigit() else None


def stated_slots(inventory) -> int | None:
    """Requests the route's server runs at once, as it states it (llama.cpp -np, vLLM max_num_seqs)."""
    return _stated(inventory, "slots") or None


class PreemptionCounter:
    """The engine's own cumulative preemption count, read before and after a load (an optional route hook)."""

    def __init__(self, handle):
        self.handle = handle
        self.before = self.now()

    def now(self) -> int | None:
        """None when the engine states no preemption counter, or cannot be read right now."""
        try:
            return self.handle.run(self.handle.route.preemptions())
        except RouteError:
            return None

    def since(self) -> int | None:
        after = self.now()
        return None if after is None or self.before is None else after - self.before
