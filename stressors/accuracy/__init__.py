"""Accuracy under load (check family "accuracy"): the canary pool's tallies, their load, and the motivating report's own protocol."""
