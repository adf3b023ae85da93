"""Acceptance that collapses with the load: the speed gate's greedy prompts accept fewer drafts in company.

Why: greedy answers draft the same tokens at any load on a correct engine (up to the drafter's own near-ties), so
the acceptance of the same prompt alone and beside others should match. When most prompts accept fewer drafts at a
higher level, the engine's batching of the drafter is wrong somewhere (llama.cpp#27117: draft-dflash past 4
sequences; docs/llama-cpp-findings.md F4: draft-eagle3's backend sampling at 8 in flight): the answers stay right
(the verifier rejects the bad drafts), so no correctness check sees it, but the speed a user promotes the route for
is gone. Judged per level against one at a time, prompt by prompt: a one-sided paired t-test of each prompt's mean
acceptance length at the level against alone, at the run's alpha split over the levels (a sign test would need
every one of the 8 prompts lower, and one prompt whose 32 tokens drafted alike at both levels hides a collapse
from it: measured on llama.cpp's EAGLE-3, 2.06 against 3.51 with two prompts unchanged), and the pooled mean
acceptance length at least COLLAPSE_DROP below one at a time's (a near-tie flip that costs one prompt its
block is neither). A warning, not a bug: outputs are right. Only where the engine states each
answer's drafting (llama.cpp's timings); elsewhere the speed table says "not stated". Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from scipy.stats import ttest_rel

from spec_route_suite.reports.findings import Finding

COLLAPSE_DROP = 0.25   # the pooled mean acceptance length at least this fraction below one at a time's


@dataclass(frozen=True)
class Collapse:
    level: int
    alone: float        # pooled mean acceptance length one at a time
    loaded: float       # and at `level`
    lower: int          # prompts accepting fewer drafts at `level` than alone
    prompts: int        # prompts stated at both
    p_value: float      # one-sided paired t-test, prompt by prompt

    def sentence(self) -> str:
        return (f"mean acceptance length {self.loaded:.2f} at {self.level} in flight against {self.alone:.2f} one at "
                f"a time on the same greedy prompts ({self.lower} of {self.prompts} prompts lower, paired t-test "
                f"p={self.p_value:.2g})")


def _length(steps_accepted: Sequence[int]) -> float:
    """A prompt's mean acceptance length (summarize keeps only answers with drafting steps: steps > 0)."""
    steps, accepted = steps_accepted
    return 1 + accepted / steps


def _pooled(by_prompt: dict[str, Sequence[int]], keys) -> float:
    steps = sum(by_prompt[k][0] for k in keys)
    return 1 + sum(by_prompt[k][1] for k in keys) / steps if steps else 0.0


def _paired_p(after: list[float], before: list[float]) -> float:
    """One-sided: `after` below `before`, prompt by prompt; 1.0 when nothing differs (or one prompt only)."""
    differences = [b - a for a, b in zip(before, after)]
    if len(differences) < 2 or not any(differences):
        return 1.0
    if len(set(differences)) == 1:   # the same shift on every prompt: no spread, the t statistic is infinite
        return 0.0 if differences[0] < 0 else 1.0
    return float(ttest_rel(after, before, alternative="less").pvalue)


def collapses(rows: Sequence[dict[str, Any]], *, alpha: float) -> list[Collapse]:
    """The levels of one route's speed rows (the first at concurrency 1) whose acceptance collapsed."""
    alone = next((r.get("acceptance_by_prompt") or {} for r in rows if r["concurrency"] == 1), {})
    higher = [r for r in rows if r["concurrency"] > 1]
    found = []
    for row in higher:
        loaded = row.get("acceptance_by_prompt") or {}
        keys = [k for k in alone if k in loaded]
        if not keys:
            continue
        before, after = [_length(alone[k]) for k in keys], [_length(loaded[k]) for k in keys]
        lower = sum(b < a - 1e-9 for a, b in zip(before, after))
        p_value = _paired_p(after, before)
        pooled_alone, pooled_loaded = _pooled(alone, keys), _pooled(loaded, keys)
        if p_value < alpha / len(higher) and pooled_loaded <= (1 - COLLAPSE_DROP) * pooled_alone:
            found.append(Collapse(row["concurrency"], pooled_alone, pooled_loaded, lower, len(keys), p_value))
    return found


def collapse_findings(rows: Sequence[dict[str, Any]], *, route: str, alpha: float) -> list[Finding]:
    """One warning per route naming every level where its acceptance collapsed (none when it held)."""
    found = collapses(rows, alpha=alpha)
    if not found:
        return []
    return [Finding(check="speed", severity="warning", route=route,
                    title=f"acceptance collapses with the load: {found[0].sentence()}",
                    details={"levels": [c.__dict__ for c in found], "drop_threshold": COLLAPSE_DROP, "alpha": alpha,
                             "why": "greedy answers draft the same tokens at any load on a correct engine; the "
                                    "answers stay right, the speed is lost (llama.cpp#27117 class)"})]
