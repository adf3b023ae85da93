"""The layout rules, checked on the source: each engine flavour is one small module overriding a handful of hooks,
registered once; fixtures/ holds data and the pytest fixtures only. (Imports, layers and the checks' route access:
tests/test_layers.py.)

Why: what differs per engine lives behind the Route protocol and in its flavour; a flavour that grows past a few
hooks is engine knowledge leaking out of its one place.
Environment: none.
"""
from __future__ import annotations

import inspect
import pkgutil
from collections import Counter
from pathlib import Path

from spec_route_suite.routes import flavours

ROOT = Path(__file__).resolve().parent.parent
FLAVOUR_MAX_LINES = 150
FLAVOUR_MAX_HOOKS = 6
HOOKS = ("detect", "facts", "acceptance", "per_response", "refusal", "capabilities")


def test_each_flavour_is_one_small_module():
    """Each module of the flavours package registers exactly one flavour, by its decorator: the names come from
    the package's modules and the registry, not from a list kept anywhere."""
    registered = flavours.registered()
    package = flavours.__name__
    modules = {f"{package}.{m.name}" for m in pkgutil.iter_modules(flavours.__path__)}
    built_in = {name: f for name, f in registered.items() if type(f).__module__.startswith(f"{package}.")}
    per_module = Counter(type(f).__module__ for f in built_in.values())
    assert set(per_module) == modules and set(per_module.values()) == {1}, per_module
    assert "generic" in built_in and list(registered)[-1] == "generic", "generic is asked last"
    for name, flavour in built_in.items():
        module = inspect.getmodule(type(flavour))
        lines = len(Path(module.__file__).read_text().splitlines())
        assert lines <= FLAVOUR_MAX_LINES, f"{name}: {lines} lines"
        overridden = [h for h in HOOKS if h in vars(type(flavour))]
        assert len(overridden) <= FLAVOUR_MAX_HOOKS, (name, overridden)
        assert set(vars(type(flavour))) - {"__module__", "__doc__", "__qualname__", "__firstlineno__",
                                            "__static_attributes__", "name", "engine", "probe_paths",
                                            "cumulative_counters", "gauge_paths", "busy_metrics", "neutral_sampling",
                                            "detect_order", "context_refusals", "prompt_refusals", "feature_refusals",
                                            *HOOKS} == set(), name


def test_fixtures_holds_data_and_the_pytest_fixtures_only():
    """Code that a run or a maintainer calls lives in the package by role (docs/architecture.md); a reader or a tool
    that takes fixtures/ for test data is right to."""
    code = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "fixtures").rglob("*.py") if "__pycache__" not in p.parts)
    assert code == ["fixtures/__init__.py", "fixtures/route_fixtures.py"], code
    assert (ROOT / "fixtures" / "__init__.py").read_text().strip() == ""
