"""Where the suite's own folders are, the same way in a checkout and in an installed wheel.

The design card's folders (equivalence/, stressors/, reports/, fixtures/) and the route presets (routes/*.toml)
sit at the top of a checkout and inside the package once installed; pyproject.toml maps each once
(`spec_route_suite.equivalence` is equivalence/, `spec_route_suite.presets` is routes/). These helpers ask the
import system where a mapped folder is, without importing it, so every caller finds the same folder.
Environment: none.
"""
from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path


def package_folder(name: str) -> Path:
    """The folder of package `name` (a subpackage of spec_route_suite), wherever it is installed."""
    spec = find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{name} is not installed: run `pip install -e .` in the checkout")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def suite_root() -> Path:
    """The folder holding equivalence/, stressors/ and fixtures/: the checkout, or the installed package."""
    return package_folder("spec_route_suite.equivalence").parent


def suite_test_paths() -> list[str]:
    root = suite_root()
    return [str(root / "equivalence"), str(root / "stressors")]


def presets_dir() -> Path:
    """The route presets shipped with the suite (routes/ in a checkout)."""
    return package_folder("spec_route_suite.presets")


def preset(name: str) -> Path:
    """routes/NAME.toml (NAME with or without .toml)."""
    return presets_dir() / (name if name.endswith(".toml") else f"{name}.toml")
