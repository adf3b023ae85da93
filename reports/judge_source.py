"""The judge code one repro script carries: reports/repro_judges.py cut to the judge the script applies.

Why: a script is quoted whole in its issue file, so it has a size budget (reports/repro.py MAX_SCRIPT_CHARS).
Every judge verbatim took about 22,000 characters of it, and a load schedule larger than a few requests was
cut to its last steps to fit: a KV-pressure window lost the requests that filled the pool, and its replay no
longer overflowed it. The script keeps the module's imports, the judge, the helpers and constants it uses
(transitively, in source order, verbatim) and a JUDGES table of that judge alone.
Environment: none.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

JUDGE_CODE = Path(__file__).with_name("repro_judges.py")
SUITE_ONLY = "# SUITE_ONLY"   # a line of repro_judges.py a script leaves out (it imports what the script has above)
TABLE = "JUDGES"


@lru_cache(maxsize=None)
def _parsed() -> tuple[str, ast.Module]:
    source = JUDGE_CODE.read_text()
    return source, ast.parse(source)


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def _used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def without_suite_only(source: str) -> str:
    """A module's source as a script carries it: its SUITE_ONLY lines (imports of what the script has above) left out."""
    return "\n".join(line for line in source.splitlines() if not line.endswith(SUITE_ONLY)) + "\n"


def judge_functions() -> dict[str, str]:
    """Judge name -> the function's name, from the module's JUDGES table."""
    _, tree = _parsed()
    table = next(n for n in tree.body if TABLE in _defined(n))
    return {key.value: value.id for key, value in zip(table.value.keys, table.value.values)}


def judge_source(judge: str) -> str:
    """repro_judges.py for a script that applies `judge`: its imports (not the SUITE_ONLY line), the judge's
    function and every top-level name it reaches, verbatim and in order, then JUDGES = {judge: function}."""
    source, tree = _parsed()
    function = judge_functions()[judge]
    lines = source.splitlines()
    names = {name: node for node in tree.body for name in _defined(node) if name != TABLE}
    keep, todo = set(), [function]
    while todo:
        name = todo.pop()
        if name in keep or name not in names:
            continue
        keep.add(name)
        todo += _used(names[name])
    parts, after_def = [], False
    for node in tree.body:
        whole = "\n".join(lines[node.lineno - 1:node.end_lineno])
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if not whole.endswith(SUITE_ONLY):
                parts.append(whole)
        elif isinstance(node, ast.Expr) and node is tree.body[0]:
            parts.append(whole)                       # the module docstring
        elif keep.intersection(_defined(node)):
            is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            parts.append(("\n\n" if is_def or after_def else "") + whole)
            after_def = is_def
    return "\n".join(parts) + f"\n\n\n{TABLE} = {{{judge!r}: {function}}}"
