"""A property of the verdict: "adopt" exactly when every part of every family ran on that candidate, passed,
and recorded evidence; every other outcome names each gap.

Hypothesis generates whole runs (several candidates, families of one or two parts, each part in one state:
verified, not applicable, skipped, vacuous, recorded nothing, could not detect, refused, deselected, failed,
errored, or its whole family absent) and builds the run report the way the plugin does, from planned tests,
outcomes and coverage records. Shrunk counterexamples found while writing it are kept as @examples.
Environment: none.
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import example, given, settings, strategies as st

from spec_route_suite.reports.collector import CheckOutcome, RunCollector, WorkerState
from spec_route_suite.reports.coverage import FAMILIES, CoverageRecord
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.run_report import build_run_report

COVERED = ("verified", "not applicable")
GAPS = ("skipped", "vacuous", "no record", "blind", "refused", "deselected", "half deselected")
BROKEN = ("failed", "errored")
STATES = COVERED + GAPS + BROKEN
COUNTERS = {"drafts": 10, "draft_tokens": 40, "accepted": 20, "accepted_per_pos": [8, 6, 4, 2]}


def part_states(candidates: int):
    """One family: absent, or one or two parts, each with a state per candidate."""
    parts = st.sampled_from([("",), ("a", "b")])
    states = st.lists(st.sampled_from(STATES), min_size=candidates, max_size=candidates)
    return st.one_of(st.just(None), parts.flatmap(lambda names: st.tuples(*(st.tuples(st.just(n), states)
                                                                             for n in names))))


runs = st.integers(1, 3).flatmap(lambda n: st.tuples(st.just(n), st.tuples(*(part_states(n) for _ in FAMILIES))))


def build(tmp: Path, candidates: list[str], families) -> RunCollector:
    run = RunCollector(run_dir=tmp / "run", run_id="run", redact=Redactor(()), is_worker=False,
                       config_public={"baseline": {"name": "baseline", "kind": "hf"},
                                      "candidates": [{"name": c, "kind": "hf"} for c in candidates]})
    planned, records = {}, []
    for family, parts in zip(FAMILIES, families):
        for part, states in parts or ():
            for candidate, state in zip(candidates, states):
                if state == "half deselected":   # two prompts of the part: one ran and verified, one removed by -k
                    removed = f"t::test_{family}[{part or 'x'}-p2-{candidate}]"
                    planned[removed] = {"check": family, "function": f"test_{family}", "qualifier": part}
                    state = "verified"
                nodeid = f"t::test_{family}[{part or 'x'}-{candidate}]"
                planned[nodeid] = {"check": family, "function": f"test_{family}", "qualifier": part}
                outcome = {"failed": "failed", "errored": "error", "skipped": "skipped"}.get(state, "passed")
                if state != "deselected":
                    run.outcomes[nodeid] = CheckOutcome(nodeid, family, outcome, 0.1,
                                                        reason="not verified: skipped on purpose"
                                                        if state == "skipped" else "")
                record = {"verified": CoverageRecord(family, candidate, True, ran={"requests": 3}),
                          "vacuous": CoverageRecord(family, candidate, True, ran={"tokens compared": 0}),
                          "blind": CoverageRecord(family, candidate, False, ran={"requests": 3},
                                                  reason="could not detect its bug class here"),
                          "refused": CoverageRecord(family, candidate, False, supported=False,
                                                    reason="the route refused the feature"),
                          "not applicable": CoverageRecord(family, candidate, False, applicable=False,
                                                           ran={"requests": 3}, reason="no such cache"),
                          "failed": CoverageRecord(family, candidate, True, ran={"requests": 3}),
                          }.get(state)
                if record is not None:
                    records.append({**record.as_measurement(), "test_id": nodeid})
    run.measurements = {"coverage": records}
    run.worker_states = [WorkerState(planned=planned, inventories={c: {"engine": "e", "speculation": {"k": 4},
                                                                       "extra": {}} for c in candidates},
                                     acceptance={c: COUNTERS for c in candidates}).__dict__]
    return run


def expected(candidate_index: int, families) -> tuple[str, list[str]]:
    """(verdict, names that must appear in its reason) for one candidate, from the generated states."""
    gaps, broken = [], False
    for family, parts in zip(FAMILIES, families):
        if parts is None:
            gaps.append(family)
            continue
        for part, states in parts:
            state = states[candidate_index]
            broken |= state in BROKEN
            if state in GAPS:
                gaps.append(f"{family}: {part}" if part else family)
    if broken:
        return "wait", []
    return ("pilot", gaps) if gaps else ("adopt", [])


@settings(max_examples=200, deadline=None)
@given(runs)
@example((1, tuple([(("", ("verified",)),)] * len(FAMILIES))))                       # everything verified: adopt
@example((1, (None,) + tuple([(("", ("verified",)),)] * (len(FAMILIES) - 1))))       # one family absent
@example((2, tuple([(("a", ("verified", "verified")), ("b", ("verified", "deselected")))]
                   + [(("", ("verified", "verified")),)] * (len(FAMILIES) - 1))))     # a part -k removed on one
@example((1, tuple([(("a", ("skipped",)), ("b", ("verified",)))]
                   + [(("", ("verified",)),)] * (len(FAMILIES) - 1))))                # a skip beside a pass
@example((1, (None,) * (len(FAMILIES) - 1) + (((("", ("vacuous",)),)),)))            # shrunk: a pass with 0 compared
@example((1, (None,) * (len(FAMILIES) - 1) + (((("", ("half deselected",)),)),)))    # shrunk: one prompt of two ran
def test_adopt_exactly_when_every_part_is_verified_with_evidence(tmp_path_factory, generated):
    count, families = generated
    candidates = [f"c{i}" for i in range(count)]
    report = build_run_report(build(tmp_path_factory.mktemp("run"), candidates, families))
    for i, name in enumerate(candidates):
        verdict, names = expected(i, families)
        got = report["route_verdicts"][name]
        assert got["verdict"] == verdict, (name, got, families)
        for gap in names:
            assert gap in got["reason"], (name, gap, got["reason"])
    order = ("adopt", "pilot", "wait", "avoid")
    assert report["verdict"] == max((v["verdict"] for v in report["route_verdicts"].values()), key=order.index)
