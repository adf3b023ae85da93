"""The house rules, read off the source: layers point one way, no import loops, checks reach engines only
through the Route protocol.

Every product module is parsed (never imported) and every import in it counted, at module level or inside a
function alike, so a loop closed by an import inside a function is still a loop. Module names come from the
folder layout and pyproject.toml's one package-dir mapping (spec_route_suite.equivalence is equivalence/).
`python -m tests.test_layers` prints the rooms and the arrows between them.
Environment: none.
"""
from __future__ import annotations

import ast
import fnmatch
import sys
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lowest first: a module may import its own layer and the layers below it, never one above. The record types
# the checks emit (Finding, repro specs) rank with the checks: they are the checks' output, which the findings
# layer collects; nothing in them reaches above the checks. A module named exactly wins over a pattern.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("spec_route_suite", "spec_route_suite.paths", "spec_route_suite.progress",
                    "spec_route_suite.tokenizers", "spec_route_suite.fixtures", "spec_route_suite.embedded",
                    "spec_route_suite.embedded.chatml", "spec_route_suite.embedded.corpus",
                    "spec_route_suite.embedded.chatml_corpus", "spec_route_suite.embedded.tools")),
    ("config", ("spec_route_suite.config", "spec_route_suite.options", "spec_route_suite.routes.spec",
                "spec_route_suite.routes.config_errors", "spec_route_suite.routes.hub_tokenizer",
                "spec_route_suite.routes.kinds",
                "spec_route_suite.prompts.sources", "spec_route_suite.prompts.rows",
                "spec_route_suite.prompts.records", "spec_route_suite.presets")),
    ("routes", ("spec_route_suite.routes", "spec_route_suite.routes.*", "spec_route_suite.reference",
                "spec_route_suite.reference.*", "spec_route_suite.servers", "spec_route_suite.servers.*",
                "spec_route_suite.session", "spec_route_suite.preflight", "spec_route_suite.prompts",
                "spec_route_suite.prompts.*")),
    ("checks", ("spec_route_suite.api", "spec_route_suite.equivalence", "spec_route_suite.equivalence.*", "spec_route_suite.stressors",
                "spec_route_suite.stressors.*", "spec_route_suite.reports.findings",
                "spec_route_suite.reports.repro_spec")),
    ("findings", ("spec_route_suite.reports", "spec_route_suite.reports.collector", "spec_route_suite.reports.coverage",
                  "spec_route_suite.reports.clusters", "spec_route_suite.reports.shapes",
                  "spec_route_suite.reports.server_words", "spec_route_suite.reports.acceptance",
                  "spec_route_suite.reports.by_class", "spec_route_suite.reports.parity",
                  "spec_route_suite.reports.matrix", "spec_route_suite.reports.compare",
                  "spec_route_suite.reports.regression",
                  "spec_route_suite.reports.redact", "spec_route_suite.reports.atomic")),
    ("reports", ("spec_route_suite.reports.*",)),
    # the composition root: the pytest plugin, the CLI, the controller's phases, the pytest fixtures that hand
    # routes to the checks, and the tools that train the embedded models (outside the run's import graph)
    ("wiring", ("spec_route_suite.plugin", "spec_route_suite.cli", "spec_route_suite.__main__",
                "spec_route_suite.class_phases", "spec_route_suite.load_phases", "spec_route_suite.schedule",
                "spec_route_suite.session_graph", "spec_route_suite.route_deaths",
                "spec_route_suite.stash", "spec_route_suite.fixtures.*",
                "spec_route_suite.training", "spec_route_suite.training.*", "spec_route_suite.equivalence.conftest",
                "spec_route_suite.stressors.conftest")),
)
LAYER_NAMES = tuple(name for name, _ in LAYERS)
CHECK_PACKAGES = ("spec_route_suite.equivalence", "spec_route_suite.stressors")
# what a check may import from spec_route_suite.routes: the protocol's value types, typed errors, text-level
# helpers, the route spec (kinds, names), chat requests (messages rendered through a tokenizer), and the adapters'
# stdlib-only answer reader (answer_fields: the replay scripts carry it)
ROUTE_MODULES_CHECKS_MAY_IMPORT = {"base", "errors", "textlevel", "spec", "chat", "answer_fields"}


@dataclass(frozen=True)
class Import:
    source: str       # the importing module
    target: str       # the imported module (a module of ours)
    line: int


def package_dirs() -> dict[str, Path]:
    """import name -> folder, from pyproject.toml's mapping (the core maps to itself)."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


def product_modules() -> dict[str, Path]:
    """Every module of the installed product: import name -> file."""
    modules: dict[str, Path] = {}
    for package, folder in sorted(package_dirs().items()):
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if any(p == "__pycache__" for p in parts):
                continue
            name = ".".join([package, *parts])
            if name not in modules or package != "spec_route_suite":   # a mapped folder wins over the core's walk
                modules[name] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Our modules that `name` imports anywhere in its source (function bodies and TYPE_CHECKING blocks too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append(Import(name, target, node.lineno))
    return found


def import_graph() -> tuple[dict[str, Path], list[Import]]:
    modules = product_modules()
    known = set(modules)
    edges = {imp for name, path in modules.items() for imp in imports_of(name, path, known)}
    return modules, sorted(edges, key=lambda e: (e.source, e.line, e.target))


def layer_of(module: str) -> str:
    """A module named exactly in LAYERS has that layer; otherwise the first pattern it matches decides."""
    for layer, patterns in LAYERS:
        if module in patterns:
            return layer
    for layer, patterns in LAYERS:
        if any(fnmatch.fnmatchcase(module, p) for p in patterns):
            return layer
    raise LookupError(f"{module} belongs to no layer: add it to tests/test_layers.py LAYERS")


def upward(edges: list[Import]) -> list[str]:
    rank = {name: i for i, name in enumerate(LAYER_NAMES)}
    return [f"{e.source} ({layer_of(e.source)}) imports {e.target} ({layer_of(e.target)}) at line {e.line}"
            for e in edges if rank[layer_of(e.target)] > rank[layer_of(e.source)]]


def loops(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a loop of imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def adapter_imports(edges: list[Import]) -> list[str]:
    bad = []
    for e in edges:
        if e.source.startswith(CHECK_PACKAGES) and e.target.startswith("spec_route_suite.routes"):
            tail = e.target.split(".")[2:3]
            if not tail or tail[0] not in ROUTE_MODULES_CHECKS_MAY_IMPORT:
                bad.append(f"{e.source} imports {e.target} at line {e.line}")
        if e.source.startswith(CHECK_PACKAGES) and e.target.startswith(("spec_route_suite.reference",
                                                                        "spec_route_suite.servers")):
            bad.append(f"{e.source} imports {e.target} at line {e.line}")
    return bad


def route_probes(path: Path) -> list[str]:
    """getattr/hasattr calls whose object is a route or a route handle (their text names one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and node.args):
            subject = ast.unparse(node.args[0]).lower()
            if "route" in subject or "handle" in subject:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


# ---------------------------------------------------------------- the rules
def test_every_module_has_a_layer():
    modules, _ = import_graph()
    assert {m: layer_of(m) for m in modules}   # raises, naming the module, when one has none


def test_no_import_points_up_the_layers():
    _, edges = import_graph()
    assert upward(edges) == []


def test_no_import_loops():
    _, edges = import_graph()
    assert loops(edges) == []


def test_no_check_imports_an_adapter():
    _, edges = import_graph()
    assert adapter_imports(edges) == []

def test_the_run_never_imports_the_training_code():
    """The scripts that train the embedded models (torch-heavy, run by hand) stay outside what a run loads."""
    _, edges = import_graph()
    training = ("spec_route_suite.training", "spec_route_suite.training.")
    assert [f"{e.source} imports {e.target} at line {e.line}" for e in edges
            if e.target.startswith(training) and not e.source.startswith(training)] == []



def test_checks_never_probe_a_route_with_getattr():
    modules, _ = import_graph()
    found = [hit for name, path in modules.items() if name.startswith(CHECK_PACKAGES) for hit in route_probes(path)]
    assert found == [], "checks call only hooks the Route protocol declares (route.offers(...) for optional ones)"


# ---------------------------------------------------------------- each rule can fail
def _graph_of(tmp_path: Path, files: dict[str, str]) -> list[Import]:
    modules = {}
    for name, source in files.items():
        path = tmp_path / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        modules[name] = path
    return [imp for name, path in modules.items() for imp in imports_of(name, path, set(modules))]


def test_the_rules_see_an_upward_import_a_loop_in_a_function_and_an_adapter_import(tmp_path):
    edges = _graph_of(tmp_path, {
        "spec_route_suite.routes.synthetic": "from spec_route_suite.equivalence.stats import warp\n",
        "spec_route_suite.equivalence.stats.warp": "X = 1\n",
        "spec_route_suite.prompts.render": "from spec_route_suite.prompts.encode import f\n",
        "spec_route_suite.prompts.encode": "def f():\n    from .render import g\n",
        "spec_route_suite.stressors.mixing.detect": "def h():\n    from spec_route_suite.routes.wire.hf import HFRoute\n",
        "spec_route_suite.routes.wire.hf": "HFRoute = object\n",
    })
    assert upward(edges) == ["spec_route_suite.routes.synthetic (routes) imports "
                             "spec_route_suite.equivalence.stats.warp (checks) at line 1"]
    assert loops(edges) == [["spec_route_suite.prompts.encode", "spec_route_suite.prompts.render"]]
    assert adapter_imports(edges) == [
        "spec_route_suite.stressors.mixing.detect imports spec_route_suite.routes.wire.hf at line 2"]


def test_the_probe_scan_sees_getattr_on_a_route(tmp_path):
    check = tmp_path / "check.py"
    check.write_text("def f(handle, tokenizer):\n    a = getattr(handle.route, 'sample_n', None)\n"
                     "    b = getattr(tokenizer, 'eos_token_id', None)\n    return hasattr(route, 'x')\n")
    assert [hit.split(": ", 1)[1] for hit in route_probes(check)] == [
        "getattr(handle.route, 'sample_n', None)", "hasattr(route, 'x')"]


# ---------------------------------------------------------------- for readers and tools
def rooms() -> str:
    """The layers with their modules, and the arrows between layers (python -m tests.test_layers)."""
    modules, edges = import_graph()
    lines = []
    for layer in LAYER_NAMES:
        members = sorted(m.removeprefix("spec_route_suite.") for m in modules if layer_of(m) == layer)
        lines.append(f"{layer} ({len(members)} modules): {', '.join(members)}")
    arrows = Counter((layer_of(e.source), layer_of(e.target)) for e in edges)
    lines += [f"  {a} -> {b}: {n} imports" for (a, b), n in sorted(arrows.items(), key=lambda kv: (
        LAYER_NAMES.index(kv[0][0]), LAYER_NAMES.index(kv[0][1])))]
    return "\n".join(lines)


if __name__ == "__main__":
    print(rooms())
    if "--check" in sys.argv:
        sys.exit(pytest.main([__file__, "-q"]))
