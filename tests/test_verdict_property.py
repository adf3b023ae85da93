"""A property of the verdict, checked against its definitions (docs/checks.md, "Verdicts") on generated runs.

docs/checks.md: **adopt**: every check family ran, passed and could have detected its bug class on this run;
**pilot**: passed, with gaps; **wait**: failed checks, route errors, speculation that never ran or accepted nothing
or almost nothing (below the floor), a baseline that speculated, counters that contradict themselves; **avoid**: a
correctness finding against a candidate. "n/a" only where the engine itself says the bug class cannot exist; a part
is verified only when every instance planned for it ran with evidence, and the coverage says "k of n instances".

Hypothesis generates whole runs: several candidates; per family, nothing collected, one or two parts named by a
test parameter, or one part whose name two detectors (two test functions) share; each part several instances
(prompts) per candidate, each in one state: passed with evidence, passed comparing nothing, passed recording
nothing, passed blind, not applicable (passed or skipped), refused, skipped, failed, errored at setup, planned but
deselected, or run without being planned; per candidate its acceptance counters (accepting, drafting and accepting
nothing or almost nothing, idle, contradictory) and a finding (none, a bug, a route error); sometimes a baseline
that speculated. The run goes through the plugin's own path: items collected by the collector, records written by
the checks' FindingSink.cover, findings by FindingSink.add, reports fed to the collector's logreport hook. The
oracle below reads only the generated states and the definitions above; it shares no code with reports/ (the
implementation folds rows of instances; the oracle judges the candidate's instances directly).
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from hypothesis import example, given, settings, strategies as st

from spec_route_suite.fixtures.route_fixtures import FindingSink
from spec_route_suite.reports.collector import CHECK_PROPERTY, RunCollector
from spec_route_suite.reports.coverage import FAMILIES
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.run_report import build_run_report

EVIDENCE = ("verified", "unplanned verified")
NOT_APPLICABLE = ("n/a", "n/a skipped")
GAPS = ("vacuous", "no record", "blind", "refused", "skipped", "deselected", "unplanned skipped")
BROKEN = ("failed", "errored")
STATES = EVIDENCE + NOT_APPLICABLE + GAPS + BROKEN
SHAPES = ("absent", "one part", "two parts", "shared part")
COUNTERS = {"accepting": {"drafts": 10, "draft_tokens": 40, "accepted": 20, "accepted_per_pos": [8, 6, 4, 2]},
            "accepting nothing": {"drafts": 10, "draft_tokens": 40, "accepted": 0, "accepted_per_pos": [0, 0, 0, 0]},
            "accepting almost nothing": {"drafts": 30_000, "draft_tokens": 120_000, "accepted": 1,
                                         "accepted_per_pos": [1, 0, 0, 0]},
            "idle": {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": []},
            "contradictory": {"drafts": 10, "draft_tokens": 40, "accepted": 12, "accepted_per_pos": [2, 4, 6, 0]}}
LEADS = {"accepting nothing": "speculation ran but accepted nothing",
         "accepting almost nothing": "speculation ran but accepted almost nothing", "idle": "speculation did not run"}


@dataclass(frozen=True)
class Instance:
    """One test of a part on one candidate: which detector (function) it is, its prompt and its state."""

    family: str
    part: str          # the part's name as a maintainer reads it ("" for the family itself)
    shared: bool       # the part is named by its records (two detectors share it), not by a test parameter
    function: str
    prompt: int
    candidate: str
    state: str

    @property
    def nodeid(self) -> str:
        params = "-".join(p for p in ("" if self.shared else self.part, f"p{self.prompt}", self.candidate) if p)
        return f"t::{self.function}[{params}]"

    @property
    def recorded(self) -> bool:
        """Whether the test wrote a coverage record (a shared part's detectors record their part before anything)."""
        if self.state in ("errored", "deselected"):
            return False
        return self.shared or self.state not in ("no record", "skipped", "unplanned skipped")


@dataclass
class Run:
    candidates: list[str]
    instances: list[Instance] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    counters: dict[str, str] = field(default_factory=dict)
    finding: dict[str, str | None] = field(default_factory=dict)
    baseline_speculated: bool = False


# ---------------------------------------------------------------- generation

@st.composite
def runs(draw) -> Run:
    """A run of every family, each instance verified unless a perturbation says otherwise."""
    count = draw(st.integers(1, 3))
    run = Run(candidates=[f"c{i}" for i in range(count)])
    for family in FAMILIES:
        shape = draw(st.sampled_from(SHAPES[1:] * 6 + SHAPES[:1]))
        if shape == "absent":
            run.absent.append(family)
            continue
        parts = {"one part": [""], "two parts": ["a", "b"], "shared part": ["shared"]}[shape]
        for part in parts:
            for candidate in run.candidates:
                # a parameter's part: 1-3 prompts; a shared part: both detectors, on 1-2 prompts each
                for prompt in range(draw(st.integers(1, 3) if shape != "shared part" else st.integers(2, 4))):
                    function = (f"test_{family}_{('one', 'two')[prompt % 2]}" if shape == "shared part"
                                else f"test_{family}")
                    run.instances.append(Instance(family, part, shape == "shared part", function,
                                                  prompt // 2 if shape == "shared part" else prompt, candidate,
                                                  "verified"))
    for index, state in draw(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(STATES)), max_size=6)):
        if run.instances:
            i = index % len(run.instances)
            old = run.instances[i]
            run.instances[i] = Instance(**{**old.__dict__, "state": state})
    weighted = ["accepting"] * 6 + list(COUNTERS)
    run.counters = {c: draw(st.sampled_from(weighted)) for c in run.candidates}
    run.finding = {c: draw(st.sampled_from([None] * 6 + ["bug", "error"])) for c in run.candidates}
    run.baseline_speculated = draw(st.sampled_from([False] * 9 + [True]))
    return run


# ---------------------------------------------------------------- the run, through the plugin's own path

def _item(instance: Instance) -> SimpleNamespace:
    params = {"prompt": f"p{instance.prompt}", "candidate": instance.candidate}
    if not instance.shared and instance.part:
        params["variant"] = instance.part
    callspec_id = instance.nodeid.partition("[")[2].rstrip("]")
    return SimpleNamespace(nodeid=instance.nodeid, user_properties=[], name=instance.nodeid.partition("::")[2],
                           originalname=instance.function, fixturenames=("candidate",),
                           callspec=SimpleNamespace(id=callspec_id, params=params),
                           get_closest_marker=lambda name, family=instance.family: SimpleNamespace(args=(family,)))


def _write_records(sink: FindingSink, i: Instance) -> None:
    """What the check writes, with the checks' own constructor (FindingSink.cover)."""
    part = i.part if i.shared else ""
    if i.shared:   # a shared part's detectors state it first, evidence to follow (equivalence/test_features.py)
        sink.cover(i.family, i.candidate, verified=True, part=part, could_detect="the shared part's bug class")
    record = {"verified": dict(verified=True, ran={"requests": 3}),
              "unplanned verified": dict(verified=True, ran={"requests": 3}),
              "failed": dict(verified=True, ran={"requests": 3}),
              "vacuous": dict(verified=True, ran={"tokens compared": 0}),
              "blind": dict(verified=False, ran={"requests": 3}, reason="could not detect its bug class here"),
              "n/a": dict(verified=False, applicable=False, ran={"requests": 3}, reason="the engine has no such cache"),
              "n/a skipped": dict(verified=False, applicable=False, reason="the engine has no such cache"),
              "refused": dict(verified=False, supported=False, reason="the route refused the feature (HTTP 400)"),
              }.get(i.state)
    if record is not None:
        sink.cover(i.family, i.candidate, part=part, could_detect="its bug class", **record)


def _report(item, when: str, outcome: str, longrepr=None) -> SimpleNamespace:
    return SimpleNamespace(nodeid=item.nodeid, when=when, outcome=outcome, failed=outcome == "failed",
                           passed=outcome == "passed", skipped=outcome == "skipped", duration=0.1, longrepr=longrepr,
                           user_properties=item.user_properties)


def build(tmp: Path, run: Run) -> RunCollector:
    collector = RunCollector(run_dir=tmp / "run", run_id="run", redact=Redactor(()), is_worker=False,
                             config_public={"baseline": {"name": "baseline", "kind": "hf"},
                                            "candidates": [{"name": c, "kind": "hf"} for c in run.candidates]})
    items = {i: _item(i) for i in run.instances}
    collector.pytest_collection_modifyitems([items[i] for i in run.instances if not i.state.startswith("unplanned")])
    for i in run.instances:
        if i.state.startswith("unplanned"):   # ran without a collection record (no planned part): still tagged
            items[i].user_properties.append((CHECK_PROPERTY, i.family))
    findings_item = SimpleNamespace(nodeid="t::findings", user_properties=[])
    for candidate, kind in run.finding.items():
        if kind:
            FindingSink(collector, findings_item).add(Finding(check="greedy", severity=kind, route=candidate,
                                                              title=f"a planted {kind}"))
    collector.pytest_runtest_logreport(_report(findings_item, "teardown", "passed"))
    for i in run.instances:
        item, sink = items[i], FindingSink(collector, items[i])
        if i.state == "deselected":
            continue
        if i.state == "errored":
            collector.pytest_runtest_logreport(_report(item, "setup", "failed", "fixture exploded"))
            continue
        _write_records(sink, i)
        if i.state in ("skipped", "refused", "n/a skipped", "unplanned skipped"):
            collector.pytest_runtest_logreport(_report(item, "call", "skipped",
                                                       ("t.py", 1, "Skipped: not verified: skipped on purpose")))
        elif i.state == "failed":
            crash = SimpleNamespace(reprcrash=SimpleNamespace(message="AssertionError: planted"))
            collector.pytest_runtest_logreport(_report(item, "call", "failed", crash))
        else:
            collector.pytest_runtest_logreport(_report(item, "call", "passed"))
        collector.pytest_runtest_logreport(_report(item, "teardown", "passed"))
    collector.worker_state.inventories = {c: {"engine": "e", "speculation": {"k": 4}, "extra": {}}
                                          for c in run.candidates}
    collector.worker_state.acceptance = {c: COUNTERS[run.counters[c]] for c in run.candidates}
    if run.baseline_speculated:
        collector.worker_state.acceptance["baseline"] = COUNTERS["accepting"]
    return collector


# ---------------------------------------------------------------- the oracle: the README's definitions

def expected(run: Run, candidate: str) -> tuple[str, list[str]]:
    """(verdict, names its reason must contain) for one candidate, from the generated states alone."""
    mine = [i for i in run.instances if i.candidate == candidate]
    avoid = run.finding[candidate] == "bug"
    wait = (any(i.state in BROKEN for i in mine) or run.finding[candidate] == "error"
            or run.counters[candidate] != "accepting" or run.baseline_speculated)
    # a gap: a family that did not run, an instance that did not run with evidence and is not ruled out by the engine
    gaps = list(run.absent) + [_gap_name(i) for i in mine if i.state in GAPS]
    if avoid:
        return "avoid", []
    if wait:
        return "wait", []
    return ("pilot", gaps) if gaps else ("adopt", [])


def _gap_name(i: Instance) -> str:
    """The name a maintainer reads for the gap: the family and the part, where the test named its part."""
    named = i.recorded if i.shared else not i.state.startswith("unplanned")
    return f"{i.family}: {i.part}" if named and i.part else i.family


def expected_instances(run: Run, candidate: str) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(family, part) -> (instances, verified, not applicable) where every instance of the part is in its row: a
    shared part's recorded instances; a parameter's planned ones, and the unplanned ones of a one-part family."""
    rows: dict[tuple[str, str], list[Instance]] = {}
    for i in run.instances:
        if i.candidate != candidate:
            continue
        if i.shared and i.recorded or not i.shared and (not i.state.startswith("unplanned") or not i.part):
            rows.setdefault((i.family, i.part), []).append(i)
        elif not i.shared:
            rows.setdefault((i.family, ""), []).append(i)
    return {key: (len(items), sum(i.state in EVIDENCE for i in items), sum(i.state in NOT_APPLICABLE for i in items))
            for key, items in rows.items()}


# ---------------------------------------------------------------- the property

ALL_VERIFIED = Run(candidates=["c0"], instances=[
    Instance(f, "", False, f"test_{f}", p, "c0", "verified") for f in FAMILIES for p in range(2)],
    counters={"c0": "accepting"}, finding={"c0": None})


def _with(run: Run, changes: dict[tuple[str, int], str], **fields) -> Run:
    """`run` with the states of some (family, prompt) instances changed."""
    instances = [Instance(**{**i.__dict__, "state": changes.get((i.family, i.prompt), i.state)}) for i in run.instances]
    return Run(**{**run.__dict__, "instances": instances, **fields})


@settings(max_examples=150, deadline=None)
@given(runs())
@example(ALL_VERIFIED)                                                              # every instance verified: adopt
@example(_with(ALL_VERIFIED, {("chat", 1): "skipped"}))                             # 1 of 2 prompts skipped: pilot
@example(_with(ALL_VERIFIED, {("prefix-cache", 0): "n/a", ("prefix-cache", 1): "n/a"}))   # n/a everywhere: adopt
@example(_with(ALL_VERIFIED, {("prefix-cache", 0): "n/a", ("prefix-cache", 1): "blind"}))  # n/a beside blind
@example(_with(ALL_VERIFIED, {("greedy", 1): "deselected"}))                        # one prompt removed by -k
@example(_with(ALL_VERIFIED, {}, counters={"c0": "accepting nothing"}))             # drafts, none accepted: wait
@example(_with(ALL_VERIFIED, {}, counters={"c0": "accepting almost nothing"}))      # 1 of 120,000 accepted: wait
@example(_with(ALL_VERIFIED, {}, counters={"c0": "idle"}, finding={"c0": "bug"}))   # did not run, and a finding
@example(Run(candidates=["c0"], instances=[                                          # two detectors share "n"
    Instance("features", "n", True, "test_features_one", 0, "c0", "verified"),
    Instance("features", "n", True, "test_features_two", 0, "c0", "skipped")]
    + [i for i in ALL_VERIFIED.instances if i.family != "features"], counters={"c0": "accepting"}, finding={"c0": None}))
def test_the_verdict_follows_the_readme_on_generated_runs(tmp_path_factory, run):
    report = build_run_report(build(tmp_path_factory.mktemp("run"), run))
    for name in run.candidates:
        verdict, names = expected(run, name)
        got = report["route_verdicts"][name]
        assert got["verdict"] == verdict, (name, got, run)
        for gap in names:
            assert gap in got["reason"], (name, gap, got["reason"])
        if run.counters[name] in LEADS:   # item 12: the route that did not speculate says so first
            assert got["reason"].startswith(LEADS[run.counters[name]]), got["reason"]
        rows = {(r["check"], r["part"]): r for r in report["coverage"] if r["route"] == name}
        for key, (total, verified, na) in expected_instances(run, name).items():
            row = rows[key]
            assert (row["instances"], row["verified_instances"], row["na_instances"]) == (total, verified, na), (key, row)
            if na < total and row["status"] in ("verified", "not verified"):
                assert f"{verified} of {total - na} instances verified" in row["why"], (key, row)
    order = ("adopt", "pilot", "wait", "avoid")
    assert report["verdict"] == max((v["verdict"] for v in report["route_verdicts"].values()), key=order.index)
