"""The scripts that train the embedded pairs and drafters (fixtures/models/), run by hand, never by a suite run.

`python -m spec_route_suite.training.train [--pair pair2]` trains pair 1 or 2; `python -m
spec_route_suite.training.train_pair3` trains pair 3 and its drafters (fixtures/models/pair3/README.md has the
commands). tests/test_layers.py keeps the run's import graph out of this package.
"""
