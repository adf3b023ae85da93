"""Bins for the categorical tests: the most frequent prefix classes of the first few tokens, plus "other".

A cell is "sequences starting with prefix s whose next token is not one of s's peeled children".
Growing the bins repeatedly takes the most frequent cell and peels off its most frequent next
token as a cell of its own. So a flat first-token distribution gets first-token cells, and a
peaked one follows its likely path several tokens deep, down to the bonus token of the first
verify block (where `bonus_from_q`-type bugs live); a prefix whose continuation is certain costs no
cell. Each step refines the previous bins, so a shift visible at a coarse level stays visible.
Remainders too sparse for a cell pool into "other". At most MAX_CELLS cells: the top-9 + other
of docs/statistics.md, whose df = 9 per prompt the planner assumes.

Which sample builds the bins matters for validity:
- two-sample tests: both arms pooled with their labels dropped. The bins are then a function of
  the pooled multiset, which label permutations leave unchanged, so the permutation null (and its
  chi-square approximation) stays exact. Bins from the baseline arm alone would be biased: a bin
  is picked because the baseline's count in it is high, which inflates the statistic.
- goodness of fit: the baseline arm only, which is independent of the candidate's sample: fixed in
  advance as far as the tested data is concerned; or, where no baseline arm is drawn (the one-sample
  design), the baseline's exact probabilities themselves (`probability_partition`), the same growth
  with P(prefix) in place of a count: fixed before any sample exists.
"""
from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

Prefix = tuple[int, ...]
# Top-9 prefixes + "other", the binning docs/statistics.md's sample sizes are computed for.
MAX_CELLS = 10
# A cell is formed when its count in the building sample is >= this: with both arms pooled that is
# an expected count >= 5 per arm, the classic condition for the chi-square approximation.
MIN_POOLED_COUNT = 10
OTHER = -1


@dataclass(frozen=True)
class Partition:
    """Nodes (prefix, cell index or OTHER, peeled children); cell `size - 1` is "other"."""

    nodes: tuple[tuple[Prefix, int, tuple[Prefix, ...]], ...]
    cells: int                       # cells besides "other"
    other_into: int | None = None    # "other" merged into this cell when too sparse alone

    @property
    def size(self) -> int:
        return self.cells + 1

    @property
    def other(self) -> int:
        return self.cells if self.other_into is None else self.other_into

    def _index(self) -> dict[Prefix, tuple[int, frozenset]]:
        index = self.__dict__.get("_cached")
        if index is None:
            index = {prefix: (cell, frozenset(peeled)) for prefix, cell, peeled in self.nodes}
            object.__setattr__(self, "_cached", index)
        return index

    def _cell(self, cell: int) -> int:
        return self.other if cell == OTHER else cell

    def assign(self, sequence: Sequence[int]) -> int:
        """The cell of one sequence: follow peeled children from the root as far as they go."""
        index = self._index()
        seq, node = tuple(sequence), ()
        while True:
            cell, peeled = index[node]
            nxt = seq[: len(node) + 1]
            if len(seq) > len(node) and nxt in peeled:
                node = nxt
                continue
            return self._cell(cell)

    def counts(self, sequences: Iterable[Sequence[int]]) -> np.ndarray:
        counts = np.zeros(self.size, dtype=np.int64)
        for seq, count in Counter(tuple(s) for s in sequences).items():
            counts[self.assign(seq)] += count
        return counts

    def describe(self, decode: Callable[[Sequence[int]], str] | None = None) -> list[str]:
        """Cell names for findings: the prefix text, "..." when nothing was peeled, else "+ other..."."""
        show = (lambda p: repr(decode(p))) if decode else (lambda p: str(list(p)))
        names = [""] * self.size
        for prefix, cell, peeled in self.nodes:
            if cell != OTHER:
                names[cell] = show(prefix) + (" + other..." if peeled else "...")
        names[-1] = "other" if self.other_into is None else f"other (merged into {names[self.other_into]})"
        return names

    def probabilities(self, prefix_prob: Callable[[Prefix], float]) -> np.ndarray:
        """Exact cell probabilities given P(sequence starts with prefix)."""
        memo: dict[Prefix, float] = {}

        def p(prefix: Prefix) -> float:
            if prefix not in memo:
                memo[prefix] = 1.0 if not prefix else prefix_prob(prefix)
            return memo[prefix]

        probs = np.zeros(self.size)
        for prefix, cell, peeled in self.nodes:
            probs[self._cell(cell)] += max(0.0, p(prefix) - sum(p(c) for c in peeled))
        return probs


def build_partition(sequences: Iterable[Sequence[int]], *, max_depth: int, max_cells: int = MAX_CELLS,
                    min_count: int = MIN_POOLED_COUNT) -> Partition:
    """Grow prefix bins from a sample (see the module docstring for which sample)."""
    prefix_counts: Counter[Prefix] = Counter()
    for seq, count in Counter(tuple(s)[:max_depth] for s in sequences).items():
        for depth in range(len(seq) + 1):
            prefix_counts[seq[:depth]] += count
    children: dict[Prefix, list[Prefix]] = {}
    for prefix, count in prefix_counts.items():
        if prefix and count >= min_count:
            children.setdefault(prefix[:-1], []).append(prefix)
    for kids in children.values():
        kids.sort(key=lambda p: (-prefix_counts[p], p))  # most frequent first, ties by token id
    return grow_partition(lambda node: children.get(node, []), prefix_counts.__getitem__, max_depth=max_depth,
                          max_cells=max_cells, min_size=min_count)


def probability_partition(next_probs: Callable[[Prefix], np.ndarray], *, max_depth: int, min_prob: float,
                          max_cells: int = MAX_CELLS, stop_ids: Iterable[int] = ()) -> Partition:
    """Bins fixed in advance from exact probabilities, for a one-sample test (no sample builds them).

    The same growth as `build_partition` with P(a sample starts with the prefix) in place of a count:
    `next_probs(prefix)` is the processed next-token distribution after the prefix (only the expanded
    nodes are asked, about one per cell). A prefix ending in a stop id has no continuation. Being a
    function of the probabilities alone, the bins are independent of every sample: fixed in advance.
    """
    stops = frozenset(stop_ids)
    mass: dict[Prefix, float] = {(): 1.0}

    def children(node: Prefix) -> list[Prefix]:
        if node and node[-1] in stops:
            return []
        probs = np.asarray(next_probs(node), dtype=np.float64)
        order = np.lexsort((np.arange(len(probs)), -probs))   # most probable first, ties by token id
        kids = []
        for token in order:
            kid_mass = mass[node] * float(probs[token])
            if kid_mass < min_prob:
                break
            kid = node + (int(token),)
            mass[kid] = kid_mass
            kids.append(kid)
        return kids

    return grow_partition(children, mass.__getitem__, max_depth=max_depth, max_cells=max_cells, min_size=min_prob)


def grow_partition(children_of: Callable[[Prefix], list[Prefix]], size_of: Callable[[Prefix], float], *,
                   max_depth: int, max_cells: int, min_size: float) -> Partition:
    """Repeatedly peel the largest cell's largest child (children_of: largest first, each >= min_size)."""
    peeled: dict[Prefix, list[Prefix]] = {(): []}
    remaining: dict[Prefix, float] = {(): size_of(())}  # the size left in each node's own cell
    sparse: set[Prefix] = set()                          # nodes whose remainder went to "other"
    kids_of: dict[Prefix, list[Prefix]] = {}
    heap = [(-remaining[()], ())]  # largest cell first; ties by prefix, never by sample order
    cells = 1
    while heap:
        negative, node = heapq.heappop(heap)
        if -negative != remaining[node] or node in sparse:
            continue  # stale entry
        if len(node) >= max_depth:
            continue
        if node not in kids_of:
            kids_of[node] = children_of(node)
        kids = [c for c in kids_of[node] if c not in peeled[node]]
        if not kids:
            continue
        kid = kids[0]
        rest = remaining[node] - size_of(kid)
        if rest >= min_size and cells + 1 > max_cells - 1:  # one cell stays reserved for "other"
            continue
        peeled[node].append(kid)
        peeled[kid], remaining[kid] = [], size_of(kid)
        remaining[node] = rest
        if rest >= min_size:
            cells += 1
            heapq.heappush(heap, (-rest, node))
        else:
            sparse.add(node)  # nothing (or too little) left: the node's own cell goes to "other"
        heapq.heappush(heap, (-size_of(kid), kid))
    ordered = sorted((n for n in peeled if n not in sparse), key=lambda n: (-remaining[n], n))
    cell_of = {node: i for i, node in enumerate(ordered)}
    nodes = tuple((n, cell_of.get(n, OTHER), tuple(peeled[n])) for n in sorted(peeled))
    other_size = sum(remaining[n] for n in sparse)
    part = Partition(nodes=nodes, cells=len(ordered))
    if 0 < other_size < min_size and ordered:
        part = Partition(nodes=nodes, cells=len(ordered), other_into=len(ordered) - 1)  # the smallest cell
    return part
