"""The checkout's entry to the suite's pytest plugin (`pytest -n 8`, `pytest tests`).

The plugin lives in spec_route_suite/plugin.py so that an installed copy runs the same code
through `spec-route-suite` from any directory.
"""
pytest_plugins = ("spec_route_suite.plugin",)
