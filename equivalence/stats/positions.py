"""Per-position summaries of a processed next-token distribution, shared by the PIT and the z-tests.

Many sampled sequences share prefixes, so each distinct prefix is summarised once: the rank order
of the vocabulary (for the PIT), the top-1 mass, and the mean and variance of log p under p (for
the log-likelihood z-test). A token of probability zero under the baseline's processed
distribution is a support violation (outside its top-k/top-p set): impossible for a correct route
up to numerical near-ties at the top-p boundary.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Two probabilities closer than this are the same value for the top-1 tie set (float32 logits).
TIE_TOLERANCE = 1e-7


@dataclass(frozen=True)
class PositionSummary:
    probs: np.ndarray        # processed distribution over the vocabulary
    mass_before: np.ndarray  # per token: mass of the tokens ranked strictly before it
    top_mass: float          # mass of the top-1 set (all tokens tied with the maximum)
    top_set: frozenset[int]
    mean_logp: float         # E_p[log p]
    var_logp: float          # Var_p[log p]

    def pit(self, token: int, v: float) -> float:
        """Randomised PIT: uniform on (F(x-), F(x)] with F over the ranked vocabulary."""
        return float(self.mass_before[token] + v * self.probs[token])

    def supports(self, token: int) -> bool:
        return bool(self.probs[token] > 0)


def summarize(probs: np.ndarray) -> PositionSummary:
    """Rank by descending probability, ties by token id, so the ranking never depends on the sample."""
    probs = np.asarray(probs, dtype=np.float64)
    order = np.lexsort((np.arange(len(probs)), -probs))
    mass_before = np.empty_like(probs)
    mass_before[order] = np.concatenate(([0.0], np.cumsum(probs[order])[:-1]))
    top = probs.max()
    top_ids = np.flatnonzero(probs >= top - TIE_TOLERANCE)
    support = probs > 0
    logp = np.log(probs[support])
    mean = float(np.dot(probs[support], logp))
    var = float(max(0.0, np.dot(probs[support], logp ** 2) - mean ** 2))
    return PositionSummary(probs=probs, mass_before=mass_before, top_mass=float(probs[top_ids].sum()),
                           top_set=frozenset(int(i) for i in top_ids), mean_logp=mean, var_logp=var)
