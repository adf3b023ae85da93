"""The baseline's exact next-token probabilities at any prefix, from teacher forcing, cached by prefix.

A `Scorer` returns the raw (temperature 1) log-probabilities over the whole vocabulary at every
position of a continuation. Sampled sequences share prefixes, so the oracle scores each new
sequence once (in batches where the scorer can) and answers per-prefix questions from the cache:
the processed distribution's summary, P(sequence starts with a prefix), and the raw log-likelihood.
"""
from __future__ import annotations

import math
from typing import Protocol, Sequence

import numpy as np

from .positions import PositionSummary, summarize
from .warp import SamplingSetting, processed_probs

Prefix = tuple[int, ...]


class Scorer(Protocol):
    """Raw logprob rows: for each continuation, an array (len(continuation), vocab), row t predicting token t.

    A scorer may also define `row_key(prompt, prefix)`: prefixes with equal keys have equal rows
    (the synthetic Markov chains: the last token), so their summaries are computed once.
    """

    def score_many(self, prompt: int, continuations: Sequence[Prefix]) -> list[np.ndarray]: ...


class ProbabilityOracle:
    """Per-prefix distributions of one sampling setting, for the prompts of one run."""

    def __init__(self, scorer: Scorer, setting: SamplingSetting):
        self.scorer = scorer
        self.setting = setting
        self._raw: dict[tuple[int, Prefix], np.ndarray] = {}
        self._summary: dict[object, PositionSummary] = {}
        self._row_key = getattr(scorer, "row_key", None)
        self.scored_sequences = 0

    def ensure(self, prompt: int, sequences: Sequence[Sequence[int]]) -> None:
        """Score, in one call, the sequences with a prefix (itself excluded) not yet in the cache."""
        missing: dict[Prefix, None] = {}
        for seq in sequences:
            seq = tuple(seq)
            if seq and any((prompt, seq[:t]) not in self._raw for t in range(len(seq))):
                missing[seq] = None
        if not missing:
            return
        todo = list(missing)
        for seq, rows in zip(todo, self.scorer.score_many(prompt, todo)):
            for t in range(len(seq)):
                self._raw.setdefault((prompt, seq[:t]), np.asarray(rows[t], dtype=np.float64))
        self.scored_sequences += len(todo)

    def raw_row(self, prompt: int, prefix: Sequence[int]) -> np.ndarray:
        key = (prompt, tuple(prefix))
        if key not in self._raw:
            self.ensure(prompt, [tuple(prefix) + (0,)])  # any next token: its row is the one after `prefix`
        return self._raw[key]

    def summary(self, prompt: int, prefix: Sequence[int]) -> PositionSummary:
        key = self._row_key(prompt, tuple(prefix)) if self._row_key else (prompt, tuple(prefix))
        if key not in self._summary:
            self._summary[key] = summarize(processed_probs(self.raw_row(prompt, prefix), self.setting))
        return self._summary[key]

    def next_probs(self, prompt: int, prefix: Sequence[int]) -> np.ndarray:
        """The processed next-token distribution after `prefix` (exact: whole-vocabulary rows)."""
        return self.summary(prompt, prefix).probs

    def prefix_prob(self, prompt: int, prefix: Sequence[int]) -> float:
        """P(a sample of this setting starts with `prefix`)."""
        return chained_prob(lambda head: self.next_probs(prompt, head), prefix)

    def raw_loglik(self, prompt: int, sequence: Sequence[int]) -> float:
        """Log-likelihood of the sequence under the raw target (temperature 1, no truncation)."""
        seq = tuple(sequence)
        return float(sum(self.raw_row(prompt, seq[:t])[token] for t, token in enumerate(seq))) if seq else 0.0


def chained_prob(next_probs, prefix: Sequence[int]) -> float:
    """P(a sample starts with `prefix`): the product of each token's probability after the tokens before it."""
    prefix = tuple(prefix)
    prob = 1.0
    for t, token in enumerate(prefix):
        prob *= float(next_probs(prefix[:t])[token])
        if prob == 0.0:
            break
    return prob


def rows_from_top(top: Sequence[tuple[int, float]], vocab: int) -> np.ndarray:
    """A dense raw-logprob row from (token, logprob) pairs; missing tokens get -inf."""
    row = np.full(vocab, -math.inf)
    for token, logprob in top:
        if 0 <= token < vocab:
            row[token] = logprob
    return row


def covers_vocabulary(row: np.ndarray, tolerance: float = 1e-3) -> bool:
    """True when the row's probabilities sum to 1: the scorer returned the whole distribution."""
    return abs(float(np.exp(row[np.isfinite(row)]).sum()) - 1.0) <= tolerance
