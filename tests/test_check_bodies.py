"""A check's test module is its table of contents: short test bodies, no judging of its own, imported by no one.

Why: a test body that judges inline (90 lines of comparisons, findings and skips) cannot be read as "collect
evidence, judge, record, fail if bug", and its judging cannot have a unit test of its own; a helper that lives in
a test module gets imported by self-tests and other checks, which loads that module under two names. So the
check modules (equivalence/test_*.py, stressors/test_*.py) hold test functions of at most MAX_BODY_LINES lines
(docstring excluded) and pytest fixtures, nothing else; the judging lives in the checks' own modules beside them.
Environment: none (the sources are parsed, never imported).
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECK_FOLDERS = ("equivalence", "stressors")
# the checkout's own code (a virtualenv or a build folder inside the checkout is not read)
SOURCES = ("spec_route_suite", "equivalence", "stressors", "reports", "fixtures", "tests", "benchmarks", "scripts")
MAX_BODY_LINES = 30


def check_modules(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in CHECK_FOLDERS for p in (root / folder).rglob("test_*.py"))


def _is_fixture(node: ast.AST) -> bool:
    for decorator in getattr(node, "decorator_list", ()):
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in ("pytest.fixture", "fixture"):
            return True
    return False


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def problems_in(path: Path, root: Path = ROOT) -> list[str]:
    """What breaks the rule in one check module: long test bodies, and anything but tests and fixtures."""
    where = path.relative_to(root)
    problems = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("test_"):
                if (lines := body_lines(node)) > MAX_BODY_LINES:
                    problems.append(f"{where}:{node.lineno} {node.name}: {lines} lines (at most {MAX_BODY_LINES})")
            elif not _is_fixture(node):
                problems.append(f"{where}:{node.lineno} {node.name}: a helper in a test module")
        elif isinstance(node, ast.ClassDef):
            problems.append(f"{where}:{node.lineno} class {node.name}: a class in a test module")
    return problems


CHECK_PACKAGES = ("equivalence", "stressors", "spec_route_suite.equivalence", "spec_route_suite.stressors")


def _is_check_module(module: str, names: set[str]) -> bool:
    package, _, stem = module.rpartition(".")
    return stem in names and package in CHECK_PACKAGES


def _check_module_alias(node: ast.AST, names: set[str]) -> dict[str, str]:
    """alias -> check test module, for `import x.test_m as alias` and `from x import test_m`."""
    aliases = {}
    if isinstance(node, ast.Import):
        aliases = {a.asname: a.name for a in node.names if a.asname and _is_check_module(a.name, names)}
    elif isinstance(node, ast.ImportFrom):
        aliases = {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                   if _is_check_module(f"{node.module}.{a.name}", names)}
    return aliases


def imports_of_test_modules(root: Path = ROOT) -> list[str]:
    """What reaches into a check's test module from elsewhere in the checkout: any import of one by a product
    module, and anything but its test functions taken from one by a self-test, a benchmark or a script (a
    self-test may drive a check's test function with its own fixtures)."""
    names = {p.stem for p in check_modules(root)}
    found = []
    paths = [root / "conftest.py", *(p for folder in SOURCES for p in (root / folder).rglob("*.py"))]
    for path in sorted(p for p in paths if p.is_file()):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts:
            continue
        product = rel.parts[0] not in ("tests", "benchmarks", "scripts") and not path.name.startswith("test_")
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            aliases.update(found_aliases := _check_module_alias(node, names))
            if isinstance(node, ast.ImportFrom) and _is_check_module(node.module or "", names):
                taken = [a.name for a in node.names if product or not a.name.startswith("test_")]
                found += [f"{rel}:{node.lineno} takes {name} from {node.module}" for name in taken]
            elif product and (found_aliases or isinstance(node, ast.Import) and any(
                    _is_check_module(a.name, names) for a in node.names)):
                found.append(f"{rel}:{node.lineno} imports a check's test module")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and not node.attr.startswith("test_")):
                found.append(f"{rel}:{node.lineno} takes {node.attr} from {aliases[node.value.id]}")
    return sorted(set(found))


def test_check_bodies_are_short_and_judge_nothing_themselves():
    problems = [p for path in check_modules() for p in problems_in(path)]
    assert not problems, "\n".join(problems)


def test_no_one_imports_a_check_test_module():
    assert not imports_of_test_modules(), "\n".join(imports_of_test_modules())


def test_the_rules_see_a_long_body_a_helper_a_class_and_an_import(tmp_path):
    (tmp_path / "equivalence").mkdir()
    (tmp_path / "stressors").mkdir()
    long_body = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY_LINES + 1))
    short_body = "\n".join(f"    x{i} = {i}" for i in range(MAX_BODY_LINES))
    (tmp_path / "equivalence" / "test_toy.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef pool():\n    return 1\n\n"
        f"def test_long():\n    '''doc'''\n{long_body}\n\ndef test_short():\n    '''doc'''\n{short_body}\n\n"
        "def judge(x):\n    return x\n\nclass Verdict:\n    pass\n")
    (tmp_path / "stressors" / "load.py").write_text("from equivalence.test_toy import test_short\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_drive.py").write_text(
        "from equivalence.test_toy import test_short, judge\nimport equivalence.test_toy as toy\n"
        "toy.test_long()\ntoy.Verdict\n")
    problems = problems_in(tmp_path / "equivalence" / "test_toy.py", tmp_path)
    assert [p.split(" ", 1)[1] for p in problems] == [
        f"test_long: {MAX_BODY_LINES + 1} lines (at most {MAX_BODY_LINES})",
        "judge: a helper in a test module", "class Verdict: a class in a test module"]
    assert imports_of_test_modules(tmp_path) == [
        "stressors/load.py:1 takes test_short from equivalence.test_toy",
        "tests/test_drive.py:1 takes judge from equivalence.test_toy",
        "tests/test_drive.py:4 takes Verdict from equivalence.test_toy"]
