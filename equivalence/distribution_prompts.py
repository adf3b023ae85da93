"""Which prompts the distribution check samples: those whose first tokens are uncertain under the baseline.

Scored on the baseline alone, before any candidate sample, so the choice cannot bias the tests. A
prompt's score per position j is P(likeliest path up to j) x H(next token there) under the setting
(`position_entropies`). The likeliest path is the greedy continuation at every setting (temperature,
top-k, top-p and min-p keep the argmax), so one greedy request and one teacher-forcing call per
prompt give every setting's scores; the first worker of a run to need them computes all grid settings
at once and leaves them in the run's shared folder for the others (a FileLock; they read the JSON).
That replaced one scoring call per prompt and position per test (about 10 CPU-s per test on 70 prompts).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from spec_route_suite.equivalence.stats.warp import SamplingSetting, processed_probs
from spec_route_suite.routes.base import Request

# A position whose next-token entropy is below this (nats) is fixed in ~99% of samples: no signal there.
MIN_POSITION_ENTROPY = 0.05
_MEMO: dict[str, dict[str, list[list[float]]]] = {}   # this worker's scores, by cache key


def position_entropies(rows: np.ndarray, path: Sequence[int], setting: SamplingSetting, depth: int) -> list[float]:
    """Entropy the bins can see at each position j: P(likeliest path up to j) x H(next token there).

    `rows[t]` is the raw logprob row after path[:t]. High at position 1 when the first token is uncertain;
    high at position k+1 when a likely path leads to an uncertain token there (all k drafts accepted, then
    the bonus token is sampled). A prompt whose continuation is fixed scores zero everywhere."""
    reach, out = 1.0, []
    for t in range(depth):
        if t >= len(rows) or t >= len(path):
            out.append(0.0)
            continue
        p = processed_probs(np.asarray(rows[t], dtype=np.float64), setting)
        support = p[p > 0]
        out.append(reach * float(-(support * np.log(support)).sum()))
        reach *= float(p[path[t]])
    return out


def greedy_path_rows(baseline, prompt_ids: Sequence[int], depth: int,
                     score: Callable[[Sequence[int], Sequence[int]], np.ndarray]) -> tuple[tuple[int, ...], np.ndarray]:
    """The greedy continuation of `depth` tokens and the raw rows along it (`score(prompt, path)`)."""
    answer = baseline.generate(Request(prompt_ids=tuple(prompt_ids), max_tokens=depth, temperature=0.0,
                                       request_id="dist-select"))
    path = tuple(answer.token_ids[:depth])
    return path, (score(prompt_ids, path) if path else np.zeros((0, 1)))


def prompt_scores(baseline, prompt_ids: Sequence[Sequence[int]], *, depth: int, settings: Sequence[SamplingSetting],
                  score, shared: Path | None) -> dict[str, list[list[float]]]:
    """Per setting name, each prompt's position entropies; computed once per run (see the module docstring)."""
    identity = [baseline.spec.public_dict(), [list(p) for p in prompt_ids], depth, [repr(s) for s in settings]]
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if key in _MEMO:
        return _MEMO[key]

    def compute() -> dict[str, list[list[float]]]:
        paths = [greedy_path_rows(baseline, ids, depth, score) for ids in prompt_ids]
        return {repr(s): [position_entropies(rows, path, s, depth) for path, rows in paths] for s in settings}
    if shared is None:
        _MEMO[key] = compute()
        return _MEMO[key]
    from filelock import FileLock
    path = shared / f"distribution-prompts-{key}.json"
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            scores = json.loads(path.read_text())
        else:
            scores = compute()
            path.write_text(json.dumps(scores))
    _MEMO[key] = scores
    return scores


def select_prompts(scores: Sequence[Sequence[float]] | None, count: int, *,
                   categories: Sequence[str] | None = None) -> list[int]:
    """Prompts chosen so that every sampled position is visible in some prompt, informative ones first.

    Positions are served in turn, first token and last position first, then the ones between; each
    takes the unchosen prompt with the most visible entropy there, skipping positions no prompt leaves
    uncertain. Then the rest by total visible entropy: a prompt with a fixed continuation still shows
    a candidate that emits a token the baseline never would (top-k/top-p on one side). Without scores
    (a baseline that cannot score): round-robin over the categories, in file order.
    """
    if scores is None:
        groups: dict[str, list[int]] = {}
        for i, category in enumerate(categories or ["all"] * count):
            groups.setdefault(category, []).append(i)
        order = [members[depth] for depth in range(max(map(len, groups.values()), default=0))
                 for members in groups.values() if depth < len(members)]
        return order[:count]
    count = min(count, len(scores))
    depth = len(scores[0]) if scores else 0
    turns = [0, depth - 1] + list(range(1, depth - 1)) if depth > 1 else [0]
    chosen: list[int] = []
    while len(chosen) < count:
        added = False
        for position in turns:
            options = [i for i in range(len(scores)) if i not in chosen and scores[i][position] > MIN_POSITION_ENTROPY]
            if options and len(chosen) < count:
                chosen.append(max(options, key=lambda i: scores[i][position]))
                added = True
        if not added:
            break
    rest = sorted((i for i in range(len(scores)) if i not in chosen), key=lambda i: -sum(scores[i]))
    return (chosen + rest)[:count]
