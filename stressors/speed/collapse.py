"""Acceptance that collapses with the load: the speed gate's greedy prompts accept fewer drafts in company.

Why: greedy answers draft the same tokens at any load on a correct engine (up to the drafter's own near-ties), so
the acceptance of the same prompt alone and beside others should match. When most prompts accept fewer drafts at a
higher level, the engine's batching of the drafter is wrong somewhere (llama.cpp#27117: draft-dflash past 4
sequences; docs/llama-cpp-findings.md F4: draft-eagle3's backend sampling at 8 in flight): the answers stay right
(the verifier rejects the bad drafts), so no correctness check sees it, but the speed a user promotes the route for
is gone. Judged per level against one at a time, prompt by prompt. On a correct engine each greedy prompt drafts
alike at both levels (measured: DFlash 2, DFlash and EAGLE-3 with CPU-side draft sampling on llama.cpp, 16 of 16
prompts identical or one near-tie flip), so the prompts whose acceptance changed are the evidence: a one-sided sign
test over them (each as likely to go up as down on a correct engine; unchanged prompts carry no information and are
left out, so a collapse that spares some prompts still shows: F4 spares about half of them), at the run's alpha
split over the levels, and the pooled mean acceptance length at least COLLAPSE_DROP below one at a time's (a
near-tie flip that costs one prompt its block is neither). A paired t-test of the lengths, used before, counted the
unchanged prompts as zero differences and missed F4 twice (p = 0.022 on 8 prompts, 0.037 on 16). Power against
F4 as measured, by the number of prompts (the gate sends SPEED_PROMPTS): benchmarks/collapse_power.py; F4 reaches
only the prompts that share a draft batch, 3 to 7 of a gate's in the runs measured, so a gate it barely reaches
passes (a limit of the instrument, stated in the README). A warning, not a bug: outputs are right. Only where the
engine states each answer's drafting (llama.cpp's timings); elsewhere the speed table says "not stated".
The same test of the same prompts in two conditions (acceptance_shift) judges a run against a previous one under
--compare-to (reports/regression.py), where greedy acceptance is just as deterministic.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from scipy.stats import binomtest

from spec_route_suite.reports.findings import Finding

COLLAPSE_DROP = 0.10   # the pooled mean acceptance length at least this fraction below one at a time's


@dataclass(frozen=True)
class AcceptanceShift:
    """The same greedy prompts' acceptance in two conditions (one at a time and loaded; last night's run and
    tonight's): pooled mean acceptance lengths, and a one-sided sign test over the prompts whose acceptance changed."""

    before: float       # pooled mean acceptance length in the first condition
    after: float        # and in the second
    lower: int          # prompts accepting fewer drafts in the second
    prompts: int        # prompts stated in both
    changed: int        # prompts whose acceptance differs between the two
    p_value: float      # one-sided sign test over the prompts whose acceptance changed

    @property
    def drop(self) -> float:
        """The pooled mean acceptance length's fall as a fraction of the first's (negative: it rose)."""
        return 1 - self.after / self.before if self.before else 0.0

    def dropped(self, alpha: float) -> bool:
        """Lower by the sign test at `alpha` and by at least COLLAPSE_DROP pooled: a near-tie flip that costs one
        prompt its block is neither."""
        return self.p_value < alpha and self.after <= (1 - COLLAPSE_DROP) * self.before


def acceptance_shift(before: Mapping[str, Sequence[int]], after: Mapping[str, Sequence[int]]) -> AcceptanceShift | None:
    """Prompt by prompt ({prompt: (drafting steps, accepted tokens)}, steps > 0), over the prompts in both; None
    when no prompt is."""
    keys = [k for k in before if k in after]
    if not keys:
        return None
    first, second = [_length(before[k]) for k in keys], [_length(after[k]) for k in keys]
    return AcceptanceShift(before=_pooled(before, keys), after=_pooled(after, keys),
                           lower=sum(b < a - 1e-9 for a, b in zip(first, second)),
                           prompts=len(keys), changed=sum(abs(b - a) > 1e-9 for a, b in zip(first, second)),
                           p_value=sign_p(second, first))


@dataclass(frozen=True)
class Collapse:
    level: int
    alone: float        # pooled mean acceptance length one at a time
    loaded: float       # and at `level`
    lower: int          # prompts accepting fewer drafts at `level` than alone
    prompts: int        # prompts stated at both
    changed: int        # prompts whose acceptance differs between the levels
    p_value: float      # one-sided sign test over the prompts whose acceptance changed

    def sentence(self) -> str:
        return (f"mean acceptance length {self.loaded:.2f} at {self.level} in flight against {self.alone:.2f} one at "
                f"a time on the same greedy prompts ({self.lower} of the {self.changed} prompts whose acceptance "
                f"changed went down, {self.prompts - self.changed} of {self.prompts} drafted alike; sign test "
                f"p={self.p_value:.2g})")


def _length(steps_accepted: Sequence[int]) -> float:
    """A prompt's mean acceptance length (summarize keeps only answers with drafting steps: steps > 0)."""
    steps, accepted = steps_accepted
    return 1 + accepted / steps


def _pooled(by_prompt: Mapping[str, Sequence[int]], keys) -> float:
    steps = sum(by_prompt[k][0] for k in keys)
    return 1 + sum(by_prompt[k][1] for k in keys) / steps if steps else 0.0


def sign_p(after: Sequence[float], before: Sequence[float]) -> float:
    """One-sided: more of the changed prompts went down than a fair coin gives; 1.0 when none changed."""
    changed = [b - a for a, b in zip(before, after) if abs(b - a) > 1e-9]
    if not changed:
        return 1.0
    return float(binomtest(sum(d < 0 for d in changed), len(changed), 0.5, alternative="greater").pvalue)


def collapses(rows: Sequence[dict[str, Any]], *, alpha: float) -> list[Collapse]:
    """The levels of one route's speed rows (the first at concurrency 1) whose acceptance collapsed."""
    alone = next((r.get("acceptance_by_prompt") or {} for r in rows if r["concurrency"] == 1), {})
    higher = [r for r in rows if r["concurrency"] > 1]
    found = []
    for row in higher:
        shift = acceptance_shift(alone, row.get("acceptance_by_prompt") or {})
        if shift is not None and shift.dropped(alpha / len(higher)):
            found.append(Collapse(row["concurrency"], shift.before, shift.after, shift.lower, shift.prompts,
                                  shift.changed, shift.p_value))
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
