"""Lean prompt picks: a few varied prompts for checks that are costly per prompt, and for the A/A calibration."""
from __future__ import annotations

from spec_route_suite.fixtures.prompts.records import PromptRecord


def pick_lean(prompts: list[PromptRecord], n: int) -> list[PromptRecord]:
    """The first prompt of each category, round-robin, up to n: varied content at a fixed cost."""
    by_category: dict[str, list[PromptRecord]] = {}
    for prompt in prompts:
        by_category.setdefault(prompt.category, []).append(prompt)
    picked: list[PromptRecord] = []
    depth = 0
    while len(picked) < n and any(depth < len(v) for v in by_category.values()):
        picked.extend(v[depth] for v in by_category.values() if depth < len(v))
        depth += 1
    return picked[:n]
