"""Statistics for "the candidate samples from the baseline's distribution" (see docs/statistics.md).

Pure numpy/scipy, no routes and no pytest: every function here is unit-tested and calibrated
by simulation in tests/test_stats_*.py, so the route suite can rely on its stated alpha and power.
"""
