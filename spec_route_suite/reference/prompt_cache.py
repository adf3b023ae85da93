"""The reference engine's prompt cache (opt-in, `prefix_cache=on`): the last finished request's target KV, reused by
the next request that starts with it.

Why: turn 2 of a conversation sends turn 1's prompt and answer again; a serving engine with a prompt cache computes
only the new part (llama.cpp's slot cache, vLLM's and SGLang's prefix caches) and states how many prompt tokens it
took from the cache (usage.prompt_tokens_details.cached_tokens, llama.cpp's timings.cache_n). The turn-reuse check
(equivalence/turn_reuse.py) compares that count on the candidate with the AR server's; this cache lets the reference
engine show it, and its fault break it.

One entry, like one llama.cpp slot: the tokens whose KV it holds and a checkpoint at the end of their prompt. Like
the cache of a hybrid (recurrent) model, the entry serves a new context that starts with all of it, or else from its
checkpoint, never from a point in between (but the last prompt token, always computed again). It holds the prompt
and the tokens returned; the fault `cache_keeps_drafts_past_end` keeps the drafts accepted past the answer's end too
(llama.cpp#28049), so a next turn, which goes on from the returned answer, no longer starts with the whole entry and
is served from the checkpoint only: every next turn computes the previous answer again.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .kv import RowKV


@dataclass(frozen=True)
class CacheEntry:
    kv: RowKV          # one row: the cached tokens' KV (kv.tokens[0] are the tokens)
    checkpoint: int    # tokens of the entry's own prompt


class PromptCache:
    def __init__(self, *, keep_past_end: bool = False):
        self.keep_past_end = keep_past_end   # the fault cache_keeps_drafts_past_end
        self.entry: CacheEntry | None = None

    def store(self, kv: RowKV, row: int, *, prompt: int, returned: int) -> None:
        """Keep `row`'s KV: its prompt and the tokens returned (with the fault, every token it holds KV for)."""
        held = kv.known(row)
        keep = held if self.keep_past_end else min(held, prompt + returned)
        self.entry = CacheEntry(kv.row_copy(row, keep), min(prompt, keep))

    def reusable(self, context: Sequence[int]) -> int:
        """Tokens of `context` the entry serves: the whole entry when the context starts with it, else its
        checkpoint, else none; at most all but the context's last token (fed with the first step)."""
        if self.entry is None:
            return 0
        tokens, limit = self.entry.kv.tokens[0], len(context) - 1
        for n in (len(tokens), self.entry.checkpoint):
            n = min(n, limit)
            if n > 0 and list(context[:n]) == tokens[:n]:
                return n
        return 0

    def prefill(self, context: Sequence[int], reused: int, *, chunk: int | None) -> RowKV:
        """A one-row KV for all but the context's last token: the entry's first `reused` tokens, then the rest
        computed (in chunks of `chunk` tokens when the engine prefills in chunks)."""
        kv = self.entry.kv.row_copy(0, reused)
        rest = list(context[reused:-1])
        step = chunk or max(len(rest), 1)
        for start in range(0, len(rest), step):
            kv.forward([rest[start:start + step]])
        return kv
