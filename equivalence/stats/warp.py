"""The processed next-token distribution a sampler must draw from: temperature, top-k, top-p, then min-p.

Score-based tests (goodness of fit, PIT, z-tests) compare the candidate's tokens with this
distribution computed from the baseline's raw logprobs, so it must follow the engines'
conventions exactly: transformers and vLLM scale by temperature first, keep the top-k logits
(ties at the k-th value kept), then drop the tokens whose ascending cumulative probability is
<= 1 - top_p (the token that crosses top_p is kept, and always at least one token), then drop
the tokens whose probability is below min_p times the largest (transformers' MinPLogitsWarper,
vLLM's min_p; the ratio is the same before or after renormalising).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingSetting:
    """One point of the sampling grid. top_k=0, top_p=1.0 and min_p=0.0 mean "off", as in Request."""

    name: str
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError("distribution tests need temperature > 0 (greedy has its own check)")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")


def processed_probs(logprobs: np.ndarray, setting: SamplingSetting) -> np.ndarray:
    """Probabilities over the vocabulary after temperature, top-k, top-p and min-p; rows of a 2-D array each."""
    scores = np.asarray(logprobs, dtype=np.float64) / setting.temperature
    squeeze = scores.ndim == 1
    scores = np.atleast_2d(scores).copy()
    if setting.top_k and setting.top_k < scores.shape[-1]:
        kth = np.partition(scores, -setting.top_k, axis=-1)[:, -setting.top_k][:, None]
        scores[scores < kth] = -np.inf
    probs = _softmax(scores)
    if setting.top_p < 1.0:
        order = np.argsort(probs, axis=-1, kind="stable")
        ascending = np.take_along_axis(probs, order, axis=-1)
        remove_sorted = np.cumsum(ascending, axis=-1) <= 1.0 - setting.top_p
        remove_sorted[:, -1] = False  # min_tokens_to_keep = 1
        remove = np.zeros_like(remove_sorted)
        np.put_along_axis(remove, order, remove_sorted, axis=-1)
        scores[remove] = -np.inf
        probs = _softmax(scores)
    if setting.min_p > 0.0:
        scores[probs < setting.min_p * probs.max(axis=-1, keepdims=True)] = -np.inf
        probs = _softmax(scores)
    return probs[0] if squeeze else probs


def _softmax(scores: np.ndarray) -> np.ndarray:
    top = np.max(scores, axis=-1, keepdims=True)
    weights = np.exp(scores - top)
    return weights / weights.sum(axis=-1, keepdims=True)
