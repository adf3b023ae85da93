"""What a stressor may charge (issue #34 item 9): a candidate mismatch the load control is too small to judge buys
more of the same load on both routes, or reads "not verified: control too small", never a bug.

Unit level, on counts and on a stand-in round (`TopUp` with a probe of known rates): the exact test's verdict for
each kind of control, the bound on what is bought (rounds and requests), the report of what was bought, and a
failed control request counted and named. Stressor level, the issue's own case: seeded sampling at concurrency 32
on a server that does not speculate at all (both routes the same engine, whose seeded samples change under load
now and then), the candidate 1 of 4 seeds changed and the baseline 0 of 4 at the first look: before, a bug; now
rounds are bought and the candidate is not charged. The same stressor with a seed-ignoring candidate under load
(a real fault) is still charged, at the same budget.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

import spec_route_suite.stressors.test_batch_invariance as invariance_tests
from spec_route_suite.routes.base import Capabilities, Completion, Request, RouteWrapper
from spec_route_suite.stressors.canary import build_workload, serial_references
from spec_route_suite.stressors.control import (EXACT_PART, FIRST_LOOK_SHARE, MAX_EXTRA_REQUESTS, MAX_ROUNDS,
                                                NO_LOAD_CONTROL, TOO_SMALL, Count, LoadComparison, LoadControl, TopUp,
                                                differing, record)
from spec_route_suite.stressors.driver import LoadRun, Outcome, budget_for
from test_greedy_routes import Sink, handle
from test_stressors_fakes import CharTokenizer, OracleRoute

ALPHA = 0.01
MAX_TOKENS = 200   # the oracle's answer, then its seeded words
BASELINE = SimpleNamespace(name="baseline", capabilities=Capabilities(concurrency=True))
CANDIDATE = SimpleNamespace(name="candidate")


def comparison(candidate: Count, baseline: Count | None, looks: int = 1, look: int = 1) -> LoadComparison:
    return LoadComparison(what="differ", candidate=candidate, baseline=baseline, where="at c=32", alpha=ALPHA,
                          looks=looks, look=look)


def rates(candidate_rate: float, baseline_rate: float, *, per_round: int = 4, seed: int = 0):
    """A stand-in round: `per_round` outputs per route, each differing at the route's rate (seeded, so exact)."""
    sent = []

    def probe(route, _references, round_: int) -> Count:
        rate = candidate_rate if route is CANDIDATE else baseline_rate
        rng = random.Random(f"{seed}/{route.name}/{round_}")
        sent.append((route.name, round_))
        return Count(sum(rng.random() < rate for _ in range(per_round)), per_round)
    return probe, sent


# ---------------------------------------------------------------- the exact test, per kind of control
def test_a_clean_control_too_small_to_tell_charges_nothing():
    """1 of 4 against 0 of 4 (the issue's seeds), and even 1 of 64 against 0 of 64: noise cannot be told apart."""
    for mine, theirs in ((Count(1, 4), Count(0, 4)), (Count(1, 64), Count(0, 64))):
        c = comparison(mine, theirs)
        assert not c.engine and not c.charged and c.too_small and not c.judged, c.sentence()
        assert f"baseline under the same load: {theirs.phrase()} differ" in c.sentence()
        assert f"not charged: {TOO_SMALL}" in c.sentence()
    clear = comparison(Count(12, 64), Count(0, 64))
    assert clear.charged and clear.judged and not clear.too_small
    assert "baseline under the same load: 0 of 64 differ" in clear.sentence() and "charged" in clear.sentence()
    none = comparison(Count(1, 64), None)
    assert none.charged and NO_LOAD_CONTROL in none.sentence(), "no control at all: judged as before"
    quiet = comparison(Count(0, 64), Count(0, 64))
    assert not quiet.charged and quiet.judged and not quiet.too_small


def test_the_first_look_spends_most_of_alpha_and_the_bought_rounds_the_rest():
    """p = 0.0048 for 8 of 64 against 0 of 64 (hypergeometric): charged at one look, and at the first of four (its
    level 0.8 alpha), not at a bought round's (the other fifth of alpha over the 3 rounds)."""
    assert comparison(Count(8, 64), Count(0, 64)).charged
    assert comparison(Count(8, 64), Count(0, 64), looks=1 + MAX_ROUNDS).charged
    for look in range(2, 2 + MAX_ROUNDS):
        bought = comparison(Count(8, 64), Count(0, 64), looks=1 + MAX_ROUNDS, look=look)
        assert not bought.charged, bought.sentence()
        assert bought.level == pytest.approx(ALPHA * (1 - FIRST_LOOK_SHARE) / MAX_ROUNDS)


def test_record_a_control_too_small_is_not_verified_and_never_a_bug():
    sink = Sink()
    judged = record(sink, comparison(Count(1, 4), Count(0, 4)), check="batch-invariance",
                    control=LoadControl(BASELINE, {}, alpha=ALPHA), candidate=CANDIDATE)
    assert judged is False
    assert [f.severity for f in sink.items] == ["info"] and TOO_SMALL in sink.items[0].title
    (cover,) = [m for kind, m in sink.measurements if kind == "coverage"]
    assert cover["part"] == EXACT_PART and cover["verified"] is False and cover["reason"].startswith(TOO_SMALL)


# ---------------------------------------------------------------- buying more, bounded
def control_compare(probe, *, mine: Count, theirs: Count, requests: int = 4) -> LoadComparison:
    control = LoadControl(BASELINE, {}, alpha=ALPHA)
    return control.compare(what="differ", candidate=mine, baseline=theirs, where="at c=32",
                           top_up=TopUp(CANDIDATE, {}, probe, requests=requests))


def test_noise_on_both_routes_buys_rounds_and_is_not_charged():
    """The same engine on both sides, 30% of outputs changed under load: the first look (1 of 4 against 0 of 4)
    cannot tell; the rounds bought show the baseline's own changes, and nothing is charged."""
    probe, sent = rates(0.3, 0.3, per_round=16)
    c = control_compare(probe, mine=Count(1, 4), theirs=Count(0, 4), requests=16)
    assert c.purchase is not None and c.purchase.rounds >= 1, c.sentence()
    assert not c.charged, c.sentence()
    assert c.baseline.k > 0 and c.engine, "the bought rounds showed the engine's own noise"
    assert sent[:2] == [("candidate", 1), ("baseline", 1)], "each round: the candidate, then the same on the baseline"
    assert "bought" in c.sentence() and c.as_details()["bought"]["requests_per_route"] == 16 * c.purchase.rounds


def test_a_real_excess_is_charged_after_buying():
    """A candidate whose outputs change at 60% under load, the baseline never: 1 of 4 against 0 of 4 at first."""
    probe, _ = rates(0.6, 0.0, per_round=16)
    c = control_compare(probe, mine=Count(1, 4), theirs=Count(0, 4), requests=16)
    assert c.charged and c.purchase.rounds >= 1 and c.purchase.stopped.startswith("the excess test rejected")
    assert c.look == 1 + c.purchase.rounds and c.p_value < c.level
    assert c.level == pytest.approx(ALPHA * (1 - FIRST_LOOK_SHARE) / MAX_ROUNDS)


def test_what_is_bought_is_bounded():
    always = lambda route, _refs, _round: Count(1 if route is CANDIDATE else 0, 4)   # noqa: E731 - one line
    c = control_compare(always, mine=Count(1, 4), theirs=Count(0, 4))
    assert c.purchase.rounds == MAX_ROUNDS and c.too_small and not c.charged
    big = MAX_EXTRA_REQUESTS // 2 + 1   # two such rounds would pass the bound
    c = control_compare(always, mine=Count(1, 4), theirs=Count(0, 4), requests=big)
    assert c.purchase.rounds == 1 and c.purchase.requests == big <= MAX_EXTRA_REQUESTS and c.looks == 2
    c = control_compare(always, mine=Count(1, 4), theirs=Count(0, 4), requests=MAX_EXTRA_REQUESTS + 1)
    assert c.purchase is None and c.looks == 1 and c.too_small, "a round past the bound is never sent"
    dead = lambda route, _refs, _round: Count(0, 0, ("r-1",))   # noqa: E731 - every request of the round failed
    c = control_compare(dead, mine=Count(1, 4), theirs=Count(0, 4))
    assert c.purchase.rounds == 1 and "no evidence" in c.purchase.stopped


def test_nothing_is_bought_when_the_first_look_decides():
    probe, sent = rates(1.0, 0.0)
    assert not control_compare(probe, mine=Count(0, 64), theirs=Count(0, 64)).purchase
    assert control_compare(probe, mine=Count(30, 64), theirs=Count(0, 64)).charged
    assert not control_compare(probe, mine=Count(5, 64), theirs=Count(9, 64)).purchase, \
        "the candidate below the baseline's rate: no excess to look for"
    assert sent == []


# ---------------------------------------------------------------- a failed control request is counted and named
def outcome(request_id: str, *, ok: bool, tokens=(1,), kind: str | None = None) -> Outcome:
    completion = Completion(token_ids=tokens, text="x", finish_reason="stop", route="b") if ok else None
    return Outcome("k", request_id, completion, None if ok else (kind or "timeout"), None if ok else "boom", 0, 1, 1)


def test_a_failed_control_request_is_counted_and_named():
    refs = {"k": Completion(token_ids=(1,), text="x", finish_reason="stop", route="b")}
    outcomes = (outcome("c-0", ok=True), outcome("c-1", ok=False), outcome("c-2", ok=False, kind="aborted"))
    assert differing(outcomes, refs) == Count(0, 1, ("c-1",)), "a planned hang-up is not a failure"
    control = LoadControl(BASELINE, refs, alpha=ALPHA)
    control.runs.append(LoadRun(outcomes=outcomes, concurrency=8, max_in_flight=3, wall_s=1.0, started_at=0.0))
    c = control.compare(what="differ", candidate=Count(0, 3), baseline=Count(0, 1), where="at c=8")
    assert c.baseline.failed == ("c-1",), "a stressor's own count gets the control's failed requests"
    assert "1 more failed: c-1" in c.control_text() and c.as_details()["baseline_failed"] == ["c-1"]
    assert control.differing() == Count(0, 1, ("c-1",))


# ---------------------------------------------------------------- the stressor: seeds at concurrency 32
class NoisySeeds(RouteWrapper):
    """The same engine on both routes (no speculation): a seeded sample that shares the engine with others is,
    at `rate` (drawn per route and request id), sampled as if its seed were another (nondeterministic kernels).
    `ignore_seed_under_load`: every seeded sample under load ignores its seed (a real fault)."""

    def __init__(self, inner, *, name: str, rate: float, ignore_seed_under_load: bool = False):
        super().__init__(inner)
        self.name, self.rate, self.faulty = name, rate, ignore_seed_under_load
        self.in_flight = 0

    async def generate(self, req: Request) -> Completion:
        self.in_flight += 1
        try:
            await asyncio.sleep(0.002)   # the burst's other requests arrive
            crowded = self.in_flight > 1
            if crowded and not req.greedy and (self.faulty or noisy(self.name, self.rate, req.request_id)):
                req = replace(req, seed=(req.seed or 0) + 7919)
            return await self.inner.generate(req)
        finally:
            self.in_flight -= 1


def noisy(name: str, rate: float, request_id: str) -> bool:
    """Does the engine of route `name` change this request's sample under load?"""
    return random.Random(f"{name}/{request_id}").random() < rate


def first_look_changes(name: str, rate: float, seeds: int) -> int:
    return sum(noisy(name, rate, f"seeded-{s}-load") for s in range(seeds))


def seeded_run(candidate_route, baseline_route, *, seeds: int):
    candidate, baseline = handle(candidate_route), handle(baseline_route)
    workload = build_workload(CharTokenizer(), size=40, seed=3, max_prompt_tokens=10_000)
    budget = replace(budget_for(batched=True, levels=(1, 32), stress_requests=None), seeds=seeds)
    refs = serial_references(candidate.generate, workload, max_tokens=MAX_TOKENS)
    control = LoadControl(baseline, serial_references(baseline.generate, workload, max_tokens=MAX_TOKENS), alpha=ALPHA)
    sink = Sink()
    failed = None
    try:
        invariance_tests.test_seeded_sampling_same_serially_and_under_load(
            candidate=candidate, baseline=baseline, stress_budget=budget, stress_workload=workload,
            stress_references=refs, stress_max_tokens=MAX_TOKENS, suite_config=SimpleNamespace(seed=0),
            stress_control=control, findings=sink)
    except pytest.fail.Exception as exc:
        failed = str(exc)
    return sink, failed


def test_seeds_changed_1_in_4_on_a_server_that_does_not_speculate_is_not_a_bug():
    rate, seeds = 0.25, 4
    # the first look, by construction: the candidate's engine changes 1 of 4 seeds, the baseline's none
    name = next(f"spec-{i}" for i in range(200) if first_look_changes(f"spec-{i}", rate, seeds) == 1)
    base = next(f"ar-{i}" for i in range(200) if first_look_changes(f"ar-{i}", rate, seeds) == 0)
    sink, failed = seeded_run(NoisySeeds(OracleRoute(name=name), name=name, rate=rate),
                              NoisySeeds(OracleRoute(name=base), name=base, rate=rate), seeds=seeds)
    assert failed is None, failed
    assert not [f for f in sink.items if f.severity == "bug"], [f.title for f in sink.items]
    details = next(f.details["load_control"] for f in sink.items if "load_control" in f.details)
    assert details["bought"] and details["bought"]["rounds"] >= 1, details
    assert not details["charged"], details


def test_a_candidate_that_ignores_seeds_under_load_is_still_charged():
    rate, seeds = 0.25, 4
    sink, failed = seeded_run(NoisySeeds(OracleRoute(name="spec"), name="spec", rate=rate,
                                         ignore_seed_under_load=True),
                              NoisySeeds(OracleRoute(name="ar"), name="ar", rate=0.0), seeds=seeds)
    assert failed is not None and "under load" in failed
    bug = next(f for f in sink.items if f.severity == "bug")
    assert "baseline under the same load: 0 of" in bug.title, bug.title
