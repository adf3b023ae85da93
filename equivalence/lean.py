"""Lean prompt picks: a few varied prompts for checks that are costly per prompt, and for the A/A calibration.

`pick_lean(records, n)` takes n prompts: the first prompt of each class (source, category) in turn, round-robin
(spec_route_suite/prompts/prompt_set.py lean_picks). n is the caller's budget, not the number of classes: the lean checks
take 2 (equivalence/conftest.py LEAN_PROMPTS), so with more than two classes not every class gets a prompt.
"""
from __future__ import annotations

from spec_route_suite.prompts.prompt_set import lean_picks as pick_lean

__all__ = ["pick_lean"]
