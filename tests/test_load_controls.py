"""Load controls (issue #20 part 2): every stressor's load runs on the baseline too; the candidate pays for its excess.

Unit level: the excess test and the sentence it writes for each kind of control (none: the baseline
serialises; clean: 0 of N; engine: both rates and p), and what `record` reports. Engine level: the
reference engine's `batch_variant` quirk picks the same requests on two engines, never changes an answer
alone, and changes some under load. Run level, both ways at the same budget (`stressors --stress-requests
100 --concurrency 1,8`): batch_variant on both routes gives baseline "engine" notes, no candidate finding,
the "exact under load" parts not verified and a run that is not "avoid"; on the candidate only it fails the
candidate, the findings saying "baseline under the same load: 0 of N". And a noisy baseline (batch_variant at
rate r) beside a candidate at a clearly larger rate R, at the same budget, charges the candidate with both rates
in the finding, while the same baseline beside a candidate at rate r charges nothing.
"""
from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest

from spec_route_suite.routes.base import Capabilities
from spec_route_suite.stressors.canary import build_workload, mean_latency, serial_references
from spec_route_suite.stressors.control import (EXACT_PART, NO_LOAD_CONTROL, Count, LoadComparison, LoadControl,
                                                differing, excess_p, record)
from spec_route_suite.stressors.driver import burst, drive_handle, plan, round_robin
from tests.mutation import run_route_suite
from tests.test_greedy_routes import Sink, handle, reference_route, tokenizer

STRESS_ARGS = ["--stress-requests", "100", "--concurrency", "1,8"]
QUIRKY = "reference:?quirk=batch_variant"


def comparison(candidate: Count, baseline: Count | None) -> LoadComparison:
    return LoadComparison(what="differ", candidate=candidate, baseline=baseline, where="at c=32", alpha=0.01)


def test_the_excess_test_charges_a_real_excess_only():
    assert excess_p(Count(9, 64), Count(7, 64)) > 0.3
    assert excess_p(Count(30, 64), Count(2, 64)) < 0.01
    same = comparison(Count(9, 64), Count(7, 64))
    assert same.engine and not same.charged
    assert same.sentence().startswith("candidate 9 of 64 differ at c=32, baseline 7 of 64 under the same load: p=0.")
    assert same.sentence().endswith("not charged")
    assert comparison(Count(30, 64), Count(2, 64)).charged


def test_a_missing_control_keeps_todays_strictness_and_a_clean_one_charges_what_the_exact_test_decides():
    """Issue #34 item 9: a clean control used to charge every candidate mismatch (1 of 64 against 0 of 64 was a
    bug); the exact test now decides, and 1 of 64 is "control too small" (tests/test_load_control_rounds.py)."""
    clean = comparison(Count(12, 64), Count(0, 64))
    assert not clean.engine and clean.charged and "baseline under the same load: 0 of 64 differ" in clean.sentence()
    assert not comparison(Count(1, 64), Count(0, 64)).charged
    none = comparison(Count(1, 64), None)
    assert not none.engine and none.charged and NO_LOAD_CONTROL in none.sentence()
    assert not comparison(Count(0, 64), Count(0, 64)).charged


def test_record_notes_the_engine_and_marks_the_part_not_verified():
    baseline = SimpleNamespace(name="baseline", capabilities=Capabilities(concurrency=True))
    candidate = SimpleNamespace(name="candidate")
    control = LoadControl(baseline, {}, alpha=0.01)
    sink = Sink()
    assert not record(sink, comparison(Count(9, 64), Count(7, 64)), check="mixing", control=control,
                      candidate=candidate, examples=["r1: 'x', alone 'y'"])
    engine, info = sink.items
    assert engine.severity == "engine" and engine.route == "baseline" and not engine.fails_route
    assert info.severity == "info" and "not charged" in info.title
    (cover,) = [m for kind, m in sink.measurements if kind == "coverage"]
    assert cover["part"] == EXACT_PART and cover["verified"] is False
    assert cover["reason"].startswith("the engine itself is not exact under load")
    sink = Sink()
    assert record(sink, comparison(Count(12, 64), Count(0, 64)), check="mixing", control=control,
                  candidate=candidate) and sink.items == []
    serial = LoadControl(SimpleNamespace(name="b", capabilities=Capabilities(concurrency=False)), None, alpha=0.01)
    assert not serial.available and serial.run([], concurrency=8, mean_latency_s=0.1) is None


# ---------------------------------------------------------------- the batch_variant quirk

@pytest.fixture(scope="module")
def quirk_engines():
    made = [reference_route("plain"), reference_route("a", quirk="batch_variant"),
            reference_route("b", quirk="batch_variant")]
    yield [handle(route) for route in made]
    for route in made:
        route.batcher.close()


def test_batch_variant_changes_answers_under_load_only_and_alike_on_two_engines(quirk_engines):
    """The measured rate at the self-tests' stress budget (100 canary requests, pool 20, c=8, rate 0.3)."""
    plain, a, b = quirk_engines
    workload = build_workload(tokenizer(), size=20, seed=0)
    refs = serial_references(plain.generate, workload, max_tokens=48)
    alone = serial_references(a.generate, workload, max_tokens=48)
    assert all(refs[k].token_ids == c.token_ids for k, c in alone.items()), "alone, a request is never perturbed"
    keys = round_robin(workload.keys, 100, rng=random.Random(0))
    subs = plan(((k, workload.get(k).request(max_tokens=48)) for k in keys), offsets=burst(len(keys)), tag="bv")
    counts = [differing(drive_handle(h, subs, concurrency=8, mean_latency_s=mean_latency(refs)).outcomes, refs)
              for h in (plain, a, b)]
    print(f"\nbatch_variant at c=8: correct engine {counts[0].phrase()}, quirk {counts[1].phrase()} and "
          f"{counts[2].phrase()} differ from the serial outputs")
    assert counts[0].k == 0, "the correct engine is batch invariant"
    assert counts[1].k >= 5 and counts[2].k >= 5, counts
    assert excess_p(counts[1], counts[2]) > 0.05 and excess_p(counts[2], counts[1]) > 0.05, counts


# ---------------------------------------------------------------- the route suite, both ways

@pytest.fixture(scope="module")
def load_runs(tmp_path_factory):
    both = run_route_suite({"bv": QUIRKY}, STRESS_ARGS, tmp_path_factory.mktemp("both"), paths=["stressors"],
                           baseline_uri=QUIRKY)
    only = run_route_suite({"bv": QUIRKY}, STRESS_ARGS, tmp_path_factory.mktemp("only"), paths=["stressors"],
                           baseline_uri="reference:")
    return both, only


def test_batch_variance_on_both_routes_is_an_engine_note_not_a_finding(load_runs):
    both, _ = load_runs
    assert both.exit_code == 0, both.describe()
    notes = [f for f in both.findings if f["severity"] == "engine"]
    assert notes and all(f["route"] == "baseline" for f in notes), both.describe()
    assert not [f for f in both.findings if f["route"] == "bv" and f["severity"] not in ("info",)], both.findings
    parts = [r for r in both.report["coverage"] if r["route"] == "bv" and r["part"] == EXACT_PART]
    assert parts and all(r["status"] == "not verified" for r in parts)
    assert {f["check"] for f in notes} == {r["check"] for r in parts}
    uncharged = [f for f in both.findings if f["severity"] == "info" and "not charged" in f["title"]]
    assert {f["check"] for f in uncharged} == {f["check"] for f in notes}
    assert both.report["verdict"] != "avoid", both.report["verdict_reason"]


def test_batch_variance_on_the_candidate_only_is_a_finding(load_runs):
    _, only = load_runs
    assert only.exit_code == 1, only.describe()
    assert not [f for f in only.findings if f["severity"] == "engine"]
    bugs = [f for f in only.findings if f["route"] == "bv" and f["severity"] == "bug"]
    assert bugs, only.describe()
    assert all("baseline under the same load: 0 of" in (f["title"] + str(f["details"])) for f in bugs), bugs


# ---------------------------------------------------------------- a noisy baseline and a larger candidate rate
NOISY_RATE, LARGER_RATE = 0.1, 0.6
NOISY = f"reference:?quirk=batch_variant&batch_variant_rate={NOISY_RATE}"


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory):
    """One run, both candidates against the same noisy baseline, on the stressors whose mismatches batch_variant
    makes (mixing's unattributed outputs, identical requests)."""
    return run_route_suite({"larger": f"reference:?quirk=batch_variant&batch_variant_rate={LARGER_RATE}",
                            "same": NOISY}, [*STRESS_ARGS, "-k", "mixing or identical"],
                           tmp_path_factory.mktemp("noisy"), paths=["stressors"], baseline_uri=NOISY)


def controls(finding: dict) -> list[dict]:
    """A finding's load-control comparisons (the mixing check has two: contamination, unattributed)."""
    control = finding["details"]["load_control"]
    return [control] if "charged" in control else list(control.values())


def test_a_noisy_baseline_and_a_larger_candidate_rate_is_charged_with_both_rates(noisy_run):
    bugs = [f for f in noisy_run.findings if f["route"] == "larger" and f["severity"] == "bug"]
    assert bugs, noisy_run.describe()
    rates = re.compile(r"candidate (\d+) of (\d+) .*baseline (\d+) of (\d+).*? under the same load: p=")
    charged = [(f, rates.search(f["title"])) for f in bugs if rates.search(f["title"])]
    assert charged, [f["title"] for f in bugs]
    for finding, found in charged:
        print(f"\ncharged ({finding['check']}): {found[0]}")
        mine, theirs = int(found[1]) / int(found[2]), int(found[3]) / int(found[4])
        assert int(found[3]) > 0 and mine > theirs, finding["title"]   # the baseline's own noise, and the excess
        assert [c for c in controls(finding) if c["sentence"] in finding["title"] and c["charged"]], finding


def test_the_same_noisy_baseline_beside_a_candidate_at_its_rate_charges_nothing(noisy_run):
    assert not [f for f in noisy_run.findings if f["route"] == "same" and f["severity"] in ("bug", "error")], \
        noisy_run.describe()
    notes = [f for f in noisy_run.findings if f["severity"] == "engine" and f["details"].get("candidate") == "same"]
    assert notes, "the baseline's own mismatches under load are engine notes"
    judged = [c for f in noisy_run.findings if f["route"] == "same" and "load_control" in f["details"]
              for c in controls(f)]
    assert judged and not [c for c in judged if c["charged"]], judged
