"""Exact processed probabilities from top-K logprobs, where they exist.

A server that scores through prompt_logprobs or returns top logprobs of what it generates gives the
K most likely tokens' raw logprobs only (vLLM caps K at 20 by default; llama.cpp's n_probs gives what
it is asked). The distribution a sampler draws from is then known exactly only when nothing outside
those K tokens enters it:
- top_k <= K: temperature, top-p and min-p act inside the top-k set, all of which was returned;
- temperature 1, no top-p, no min-p: each returned token's probability is its raw probability, and
  the mass outside them (1 - their sum) is one known lump, which the bins leave in "other";
- K at least the vocabulary (llama.cpp's n_probs can be asked for every token): every setting.
Anywhere else (T=1.5 untruncated, top_k 50 from K 20) the normaliser needs the whole vocabulary, so
the scoring design does not run there (equivalence/distribution_plan.py says why).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .oracle import chained_prob
from .warp import SamplingSetting, processed_probs

Prefix = tuple[int, ...]


def top_inexact_why(setting: SamplingSetting, k: int, vocab: int | None = None) -> str:
    """"" when top-K raw logprobs give `setting`'s processed distribution exactly, else why not (K >= the
    vocabulary: every setting)."""
    if vocab is not None and k >= vocab:
        return ""
    if setting.top_k and setting.top_k <= k:
        return ""
    if setting.temperature == 1.0 and setting.top_p == 1.0 and setting.min_p == 0.0 and not setting.top_k:
        return ""
    return (f"{setting.name} needs the whole distribution (temperature {setting.temperature:g}"
            + (f", top_k {setting.top_k}" if setting.top_k else "") + f") and the baseline scores its top {k} only")


class TopSource:
    """The baseline's exact processed probabilities from top-K raw rows (`rows_of(prompt, prefix)`: dense raw
    logprobs, -inf where not returned), at a setting where `top_inexact_why` is empty."""

    def __init__(self, rows_of: Callable[[int, Prefix], np.ndarray], setting: SamplingSetting, k: int,
                 vocab: int | None = None):
        why = top_inexact_why(setting, k, vocab)
        if why:
            raise ValueError(why)
        self.rows_of, self.setting, self.k = rows_of, setting, k
        self.whole = vocab is not None and k >= vocab
        self._memo: dict[tuple[int, Prefix], np.ndarray] = {}

    def next_probs(self, prompt: int, prefix: Sequence[int]) -> np.ndarray:
        key = (prompt, tuple(prefix))
        if key not in self._memo:
            row = np.asarray(self.rows_of(prompt, key[1]), dtype=np.float64)
            known = int(np.isfinite(row).sum())
            if self.whole or self.setting.top_k:
                if known < (len(row) if self.whole else min(self.setting.top_k, len(row))):
                    raise ValueError(f"a top-{self.k} row holds {known} tokens, fewer than top_k {self.setting.top_k} "
                                     f"(or the vocabulary)")
                probs = processed_probs(row, self.setting)
            else:
                probs = np.exp(row)   # raw probabilities of the returned tokens; the rest is one unknown lump
            self._memo[key] = probs
        return self._memo[key]

    def prefix_prob(self, prompt: int, prefix: Sequence[int]) -> float:
        return chained_prob(lambda head: self.next_probs(prompt, head), prefix)
