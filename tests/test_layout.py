"""The layout rules the design card sets, checked on the source: checks never import an adapter, and each
engine flavour is one small module overriding a handful of hooks.

Why: what differs per engine lives behind the Route protocol; a check that imports an adapter (to batch
through its internals, or to branch on its type) works only on the engine it was written against.
Environment: none.
"""
from __future__ import annotations

import ast
import inspect
import pkgutil
from collections import Counter
from pathlib import Path

from spec_route_suite.routes import flavours

ROOT = Path(__file__).resolve().parent.parent
CHECK_PACKAGES = ("equivalence", "stressors")
# what a check may import from spec_route_suite.routes: the protocol's value types, typed errors, text-level helpers,
# the route spec (kinds, names), the timing proxy, and the adapters' stdlib-only answer reader (answer_fields: the
# replay scripts carry it)
ROUTE_MODULES_CHECKS_MAY_IMPORT = {"base", "errors", "textlevel", "spec", "answer_fields"}
FLAVOUR_MAX_LINES = 150
FLAVOUR_MAX_HOOKS = 6
HOOKS = ("detect", "facts", "acceptance", "per_response", "refusal", "capabilities")


def _route_imports(path: Path) -> set[str]:
    """The spec_route_suite.routes submodules a source file imports (absolute or relative)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["spec_route_suite", "routes"] and len(parts) > 2:
                found.add(parts[2])
    return found


def test_no_check_imports_an_adapter():
    offenders = {}
    for package in CHECK_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = _route_imports(path) - ROUTE_MODULES_CHECKS_MAY_IMPORT
            if bad:
                offenders[str(path.relative_to(ROOT))] = sorted(bad)
    assert not offenders, f"checks import adapter modules: {offenders}"


def test_the_import_scan_sees_an_adapter_import(tmp_path):
    """The scan above can fail: an adapter import, absolute or from a function body, is seen."""
    source = tmp_path / "check.py"
    source.write_text("def f():\n    from spec_route_suite.routes.hf import HFRoute\n"
                      "from spec_route_suite.routes import openai\n")
    assert _route_imports(source) == {"hf", "openai"}


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
                                            "cumulative_counters", "gauge_paths", "neutral_sampling",
                                            "detect_order", "context_refusals", "prompt_refusals",
                                            *HOOKS} == set(), name
