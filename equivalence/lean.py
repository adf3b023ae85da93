"""Lean prompt picks: a few varied prompts for checks that are costly per prompt, and for the A/A calibration.

The first prompt of each class (source, category), round-robin (fixtures/prompts/prompt_set.py lean_picks).
"""
from __future__ import annotations

from spec_route_suite.fixtures.prompts.prompt_set import lean_picks as pick_lean

__all__ = ["pick_lean"]
