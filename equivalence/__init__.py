"""Baseline-vs-candidate comparison logic and the route-suite tests that use it."""
