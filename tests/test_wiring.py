"""The run's object graph is built in one place, the pytest fixtures live in fixtures/, stressor tests stay short.

Why: the plugin's fixtures and the controller's class phases used to build routes, tokenizer and fitted
prompts each their own way, and stressor logic sat in test bodies (one of 146 lines). Checked here on the
source: only spec_route_suite/session_graph.py builds a RouteSession or loads the tokenizer for the suite's
wiring; the plugin defines no fixtures; every stressor test body is at most STRESSOR_BODY_LINES lines. And
the graph itself: a route is inventoried at its first use, a route that cannot say is noted, and the context
fit reads the recorded inventories. Environment: none.
"""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

from spec_route_suite.config import suite_config_from_options
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.session_graph import SessionGraph

ROOT = Path(__file__).resolve().parent.parent
WIRING = ("spec_route_suite/plugin.py", "spec_route_suite/class_phases.py", "fixtures/route_fixtures.py",
          "equivalence/conftest.py", "stressors/conftest.py")
STRESSOR_BODY_LINES = 30   # build, run, judge, record: the logic is in stressors/*.py modules


def calls(path: Path) -> set[str]:
    """Names called in a source file (`f(...)` and `x.f(...)`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            found.add(func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "")
    return found


def fixtures_defined(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(target, ast.Attribute) and target.attr == "fixture":
                    names.append(node.name)
    return names


def long_test_bodies(path: Path, limit: int) -> dict[str, int]:
    """Test functions whose body (first statement to last line) is longer than `limit` lines."""
    long = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            lines = node.end_lineno - node.body[0].lineno + 1
            if lines > limit:
                long[f"{path.name}::{node.name}"] = lines
    return long


def test_only_the_session_graph_builds_routes_and_the_tokenizer():
    for name in WIRING:
        made = calls(ROOT / name) & {"RouteSession", "load_tokenizer", "FittedPrompts", "ContextFit"}
        assert not made, f"{name} builds {sorted(made)} itself: ask the SessionGraph"
    assert {"RouteSession", "load_tokenizer", "FittedPrompts", "ContextFit"} <= calls(
        ROOT / "spec_route_suite" / "session_graph.py")


def test_the_plugin_defines_no_fixtures_and_loads_the_route_fixtures():
    assert fixtures_defined(ROOT / "spec_route_suite" / "plugin.py") == []
    route_fixtures = fixtures_defined(ROOT / "fixtures" / "route_fixtures.py")
    assert {"suite_config", "route_session", "baseline", "candidate", "tokenizer", "context_fit", "fitted_prompts",
            "calibration", "near_tie_policy", "findings"} <= set(route_fixtures)
    from spec_route_suite import plugin
    assert plugin.pytest_plugins == ("spec_route_suite.fixtures.route_fixtures",)


def test_stressor_test_bodies_are_short():
    long = {}
    for path in sorted((ROOT / "stressors").glob("test_*.py")):
        long.update(long_test_bodies(path, STRESSOR_BODY_LINES))
    assert not long, f"stressor test bodies over {STRESSOR_BODY_LINES} lines (move the logic to a module): {long}"


def test_the_body_check_sees_a_long_test(tmp_path):
    """The check above can fail."""
    source = tmp_path / "test_long.py"
    source.write_text("def test_long():\n" + "    x = 1\n" * (STRESSOR_BODY_LINES + 1))
    assert long_test_bodies(source, STRESSOR_BODY_LINES) == {"test_long.py::test_long": STRESSOR_BODY_LINES + 1}


class FakeHandle:
    def __init__(self, name: str, inventory):
        self.name, self._inventory = name, inventory
        self.spec = parse_route_uri(name, "reference:", base=ROOT)

    def inventory(self):
        if isinstance(self._inventory, Exception):
            raise self._inventory
        return self._inventory

    def context_limit(self, reported):
        return reported


class FakeSession:
    def __init__(self, handles: dict[str, FakeHandle]):
        self.handles = handles

    def handle(self, name: str) -> FakeHandle:
        return self.handles[name]

    def built(self):
        return dict(self.handles)

    def close(self) -> None:
        self.closed = True


def test_a_route_is_inventoried_at_first_use_and_a_silent_one_is_noted():
    suite = suite_config_from_options({}, invocation_dir=ROOT, environ={})
    inventories, notes = {}, []
    graph = SessionGraph(suite, inventories=inventories, notes=notes)
    session = FakeSession({"baseline": FakeHandle("baseline", SimpleNamespace(max_model_len=300)),
                           "candidate": FakeHandle("candidate", RouteError("no answer", route="candidate"))})
    graph.__dict__["session"] = session   # the graph's lazily built session, replaced
    baseline, candidate = graph.baseline(), graph.route("candidate")
    assert inventories == {"baseline": {"max_model_len": 300}}
    assert notes == ["candidate: inventory unavailable at first use: no answer"]
    fit = graph.context_fit(baseline, candidate)
    assert fit.limit == 300
    inventories["candidate"] = {"max_model_len": 200}   # read at every use: a later inventory counts
    assert fit.limit == 200
    graph.close()
    assert session.closed
