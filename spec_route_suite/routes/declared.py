"""Registrations read from source: what the core package's modules declare, found without importing them.

Why: a registration belongs in the module it registers (one engine, one place), but some of those modules are
heavy (the hf and reference adapters import torch) or must not be imported before they run (`python -m` of a
managed-server module), and parsing a routes file must load neither. So the package's own declarations are read
from each module's source: a top-level class decorated `@NAME(literal arguments)`, or a top-level
`NAME = "literal"`. Modules outside the package register when they are imported (kinds.py's decorator).
Environment: none.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

CORE = Path(__file__).resolve().parent.parent   # the spec_route_suite package folder
CORE_PACKAGE = "spec_route_suite"


@dataclass(frozen=True)
class Declared:
    """One declaration as written: the module, the class (for a decorator), and its literal arguments."""

    module: str
    name: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]


def _modules(folder: Path, package: str, marker: str) -> Iterator[tuple[str, ast.Module]]:
    """(dotted name, parsed source) of every module below `folder` whose text contains `marker`, in path order."""
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if marker not in text:
            continue
        parts = path.relative_to(folder).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        yield ".".join((package, *parts)), ast.parse(text, str(path))


def _named(node: ast.expr, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def decorated_classes(decorator: str, folder: Path = CORE, package: str = CORE_PACKAGE) -> list[Declared]:
    """Every top-level class below `folder` decorated `@decorator(...)`, with the call's literal arguments
    (ValueError naming the module when one is not a literal: a registration must be readable unrun)."""
    found = []
    for module, tree in _modules(folder, package, f"{decorator}("):
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            for call in node.decorator_list:
                if isinstance(call, ast.Call) and _named(call.func, decorator):
                    try:
                        args = tuple(ast.literal_eval(a) for a in call.args)
                        kwargs = tuple((k.arg, ast.literal_eval(k.value)) for k in call.keywords if k.arg)
                    except ValueError:
                        raise ValueError(f"{module}.{node.name}: @{decorator} takes literal arguments only") from None
                    found.append(Declared(module, node.name, args, kwargs))
    return found


def assigned_strings(name: str, folder: Path, package: str) -> dict[str, str]:
    """value -> module, for every module below `folder` with a top-level `name = "value"`."""
    found: dict[str, str] = {}
    for module, tree in _modules(folder, package, name):
        for node in tree.body:
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                found[node.value.value] = module
    return found
