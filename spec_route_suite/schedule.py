"""Longest work first across xdist workers (`-n N` with the default `--dist load`).

xdist's `load` scheduler starts each worker on a chunk of consecutive tests, and pytest keeps a
session-scoped parameter's tests together, so the four distribution settings of one candidate used to
land on one worker and run one after another at the end while the others were idle (issue #26: the
default run's last 4 x 60-104 s). This scheduler sorts the tests by expected cost, heaviest first
(COST: relative weights from the default run's measured durations; unknown tests weigh 1, and a
stable sort keeps pytest's order among equals), deals the first ones out one per worker in turn, and
then refills a worker a few tests at a time (MAX_CHUNK), so the heavy tests start at once on different
workers and the tail is made of short ones. `--maxschedchunk` still wins when given.
"""
from __future__ import annotations

import re

from xdist.scheduler import LoadScheduling

# Relative cost of a test function (the default run's durations, seconds on 2 cores, rounded).
COST = {
    "test_sampling_distribution": 100.0,
    "test_no_cross_request_mixing": 70.0,
    "test_needle_alone_equals_needle_in_mixed_batches": 35.0,
    "test_seeded_sampling_same_serially_and_under_load": 15.0,
    "test_answers_right_alone_stay_right_under_load": 15.0,
    "test_identical_greedy_requests_agree_under_load": 10.0,
    "test_route_survives_client_disconnects": 10.0,
    "test_structured_output_parses_matches_and_survives_load": 10.0,
    "test_near_tie_rate_matches_aa": 10.0,
}
MAX_CHUNK = 4
_FUNCTION = re.compile(r"::([A-Za-z_0-9]+)(\[|$)")


def cost_of(nodeid: str) -> float:
    match = _FUNCTION.search(nodeid)
    return COST.get(match.group(1), 1.0) if match else 1.0


class LongestFirstScheduling(LoadScheduling):
    """LoadScheduling with the pending tests sorted heaviest first and dealt out one per worker."""

    def schedule(self) -> None:
        if self.collection is not None or not self.collection_is_completed:
            return super().schedule()
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = next(iter(self.node2collection.values()))
        self.pending[:] = sorted(range(len(self.collection)), key=lambda i: -cost_of(self.collection[i]))
        if not self.collection:
            return
        if self.maxschedchunk is None:
            self.maxschedchunk = MAX_CHUNK
        nodes = self.nodes
        for _ in range(2):                   # two each, one at a time: the heaviest on distinct workers
            for node in nodes:
                if self.pending:
                    self._send_tests(node, 1)
        if not self.pending:
            for node in nodes:
                node.shutdown()
