"""The xdist scheduler: the heaviest tests start first, one per worker, and every test is handed out once."""
from __future__ import annotations

from spec_route_suite.schedule import LongestFirstScheduling, cost_of

DIST = "equivalence/test_distribution.py::test_sampling_distribution"
COLLECTION = ([f"equivalence/test_greedy.py::test_greedy_matches_baseline[candidate-math-{i:02}]" for i in range(20)]
              + [f"{DIST}[reference-batched-{s}]" for s in ("T1.0", "T0.7", "T1.5", "T1.6")]
              + [f"equivalence/test_boundaries.py::test_boundary_sweep[plain-math-{i:02}]" for i in range(10)]
              + ["stressors/test_mixing.py::test_no_cross_request_mixing[reference-batched]"])


class FakeConfig:
    def getvalue(self, name):
        return ["4*popen"] if name == "tx" else None

    def getoption(self, name):
        return None


class FakeNode:
    shutting_down = False

    def __init__(self, name: str):
        self.name, self.sent = name, []
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indices):
        self.sent += indices

    def shutdown(self):
        self.shutting_down = True


def test_heaviest_tests_go_first_to_distinct_workers_and_all_run_once():
    scheduler = LongestFirstScheduling(FakeConfig())
    nodes = [FakeNode(f"gw{i}") for i in range(4)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, COLLECTION)
    scheduler.schedule()
    first = [COLLECTION[node.sent[0]] for node in nodes]
    assert all(name.startswith(DIST) for name in first), first   # four settings on four workers, at once
    second = [COLLECTION[node.sent[1]] for node in nodes]
    assert "test_no_cross_request_mixing" in second[0]
    while scheduler.pending:                                       # workers finish in turn and ask for more
        for node in nodes:
            for index in list(scheduler.node2pending[node]):
                scheduler.mark_test_complete(node, index, duration=1.0)
    sent = sorted(i for node in nodes for i in node.sent)
    assert sent == list(range(len(COLLECTION)))


def test_unknown_tests_weigh_one_and_keep_their_order():
    assert cost_of(f"{DIST}[candidate-T1.0]") > cost_of("stressors/test_mixing.py::test_no_cross_request_mixing[x]") > 1
    assert cost_of("tests/test_anything.py::test_x[1]") == cost_of("tests/test_anything.py::test_y") == 1.0
