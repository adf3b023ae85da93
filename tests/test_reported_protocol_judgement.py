"""What the reported protocol charges (issue #42), on model-free stand-ins whose wrong answers are chosen.

The oracle (tests/test_stressors_fakes.py) answers every canary conversation right; `KnownAnswers` makes chosen
ones wrong, alone and under load or under load only, and states a gauge of requests served together so the load
is proven. Each of the audit's proofs, at the protocol's own budget (100 chats at concurrency 8):
- the report's own evidence, 7 of 100 answers flipped at c=8, 0 of 100 wrong serially and none on the AR server, is
  charged at the first look, from the first 100 requests (before: each look at alpha / 4, and p = 0.0070 bought a
  round first);
- a candidate wrong on 45 of 100 at every load against the AR server's 30 is a bug, static errors (before: an info
  line, the part verified); wrong on the AR server's own 30 it is charged nothing;
- with fewer than MIN_RIGHT_ALONE answers right alone the part reads "not verified: weakly" (before: verified
  whenever the load batched, even with 0 of 100 right serially); 60 right alone verify it;
- the sentence reports flips and static errors apart.
And the look design: alpha spent unevenly over the looks, their levels summing to alpha, and the exact false-charge
bound of the four looks within alpha on a clean route at several noise rates (benchmarks/protocol_power.py
simulates the whole procedure and prints its power).
"""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, hypergeom

from spec_route_suite.routes.base import Completion, Request, RouteWrapper
from spec_route_suite.stressors.canary import build_workload, serial_references
from spec_route_suite.stressors.control import MAX_ROUNDS, Count, LoadComparison, LoadControl
from spec_route_suite.stressors.pair import LoadPair
from spec_route_suite.stressors.accuracy.reported_protocol import CONCURRENCY, PART, REQUESTS, ReportedProtocol
from test_greedy_routes import Sink, handle
from test_stressors_fakes import EOS_ID, CharTokenizer, OracleRoute

ROOT = Path(__file__).resolve().parent.parent
ALPHA = 0.01
MAX_TOKENS = 64
WRONG = "I do not know."


class KnownAnswers(RouteWrapper):
    """The oracle with chosen wrong answers: to the prompts `wrong_alone` always, to `wrong_under_load` in every
    request but their serial reference (request id "ref-..."); its gauge is the most requests in it at once."""

    def __init__(self, inner, *, wrong_alone=(), wrong_under_load=()):
        super().__init__(inner)
        self.wrong_alone, self.wrong_under_load = set(wrong_alone), set(wrong_under_load)
        self.in_flight = self.peak = 0

    async def generate(self, req: Request) -> Completion:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            answer = await self.inner.generate(req)
        finally:
            self.in_flight -= 1
        prompt = tuple(req.prompt_ids)
        if prompt in self.wrong_alone or (prompt in self.wrong_under_load and not req.request_id.startswith("ref-")):
            ids = (*CharTokenizer()(WRONG)["input_ids"], EOS_ID)
            return replace(answer, text=WRONG, token_ids=ids, usage_completion_tokens=len(ids))
        return answer

    async def engine_batch_peak(self, reset: bool = False) -> int | None:
        peak = self.peak
        if reset:
            self.peak = 0
        return peak


@pytest.fixture(scope="module")
def prompts():
    """The protocol's workload (100 chats) and its prompts in a fixed order, to choose wrong answers from."""
    workload = build_workload(CharTokenizer(), size=REQUESTS, seed=0, task_share=0.0, chat_share=1.0,
                              max_prompt_tokens=10_000)
    assert len(workload.items) == REQUESTS and all(item.checkable for item in workload.items)
    return workload, [tuple(item.prompt_ids) for item in workload.items]


def run_protocol(workload, candidate_route, baseline_route):
    """The route suite's protocol once: (protocol, sink, comparison, failure text or None)."""
    candidate, baseline = handle(candidate_route, "candidate"), handle(baseline_route, "baseline")
    control = LoadControl(baseline, serial_references(baseline.generate, workload, max_tokens=MAX_TOKENS), alpha=ALPHA)
    protocol = ReportedProtocol(LoadPair(candidate, baseline, CharTokenizer(), policy=None, max_tokens=MAX_TOKENS),
                                workload, serial_references(candidate.generate, workload, max_tokens=MAX_TOKENS),
                                control)
    sink = Sink()
    protocol.run(sink, seed=0)
    comparison = protocol.comparison((CONCURRENCY,))
    text, details = protocol.summary_line(sink, comparison)
    return protocol, sink, comparison, protocol.judge(sink, comparison, text, details)


def part_row(sink) -> dict:
    (row,) = [m for kind, m in sink.measurements if kind == "coverage" and m.get("part") == PART]
    return row


def summary(sink) -> str:
    return next(f.title for f in sink.items if f.severity == "info" and f.title.startswith(PART))


def test_the_reports_own_evidence_is_charged_at_the_first_look(prompts):
    """7 of 100 flipped at c=8, 0 of 100 wrong serially, 0 on the AR server under the same load: a bug from the
    first 100 requests, nothing bought (one-sided Fisher p = 0.0070 against 0.8 x alpha at the first look)."""
    workload, ids = prompts
    protocol, sink, comparison, failure = run_protocol(
        workload, KnownAnswers(OracleRoute(name="candidate"), wrong_under_load=ids[:7]), OracleRoute(name="ar"))
    assert (protocol.loaded[0].wrong, protocol.serial.wrong, protocol.baseline_under_load().wrong) == (7, 0, 0)
    assert comparison.candidate == Count(7, REQUESTS) and comparison.baseline == Count(0, REQUESTS)
    assert comparison.p_value == pytest.approx(0.0070, abs=1e-4)
    assert comparison.charged and comparison.purchase is None, comparison.sentence()
    assert failure and "7 answers right when sent alone turned wrong under load" in failure
    assert [f.severity for f in sink.items if f.severity == "bug"] == ["bug"]
    assert part_row(sink)["verified"], part_row(sink)


def test_the_reports_numbers_charge_at_the_first_of_four_looks():
    """The comparison alone, at the protocol's own number of looks (its 100 requests, then up to 3 rounds)."""
    first = LoadComparison(what="answers right alone turned wrong", candidate=Count(7, 100), baseline=Count(0, 100),
                           where="at c=8", alpha=ALPHA, looks=1 + MAX_ROUNDS)
    assert first.charged and first.level >= 0.0070, first.sentence()
    assert not replace(first, candidate=Count(6, 100)).charged, "6 of 100 against 0 of 100 (p = 0.014) is not enough"


def test_a_route_wrong_at_every_load_is_charged_static_errors(prompts):
    """The audit's proof: the candidate wrong on 45 of 100 at every load (the AR server's 30 and 15 more), the AR
    server on 30. Nothing flips, so before it was an info line and a verified part; the paired exact test over the
    same requests charges it (15 wrong only on the candidate, 0 the other way: p = 3e-5; Fisher on the two counts
    alone, p = 0.020, would not at alpha 0.01). The same candidate wrong on the AR server's own 30 is charged nothing."""
    workload, ids = prompts
    protocol, sink, _, failure = run_protocol(
        workload, KnownAnswers(OracleRoute(name="candidate"), wrong_alone=ids[:45]),
        KnownAnswers(OracleRoute(name="ar"), wrong_alone=ids[:30]))
    assert (protocol.serial.wrong, protocol.loaded[0].wrong, protocol.on_baseline.wrong, len(protocol.flipped)) == \
        (45, 45, 30, 0)
    assert failure and "static errors" in failure and "15 wrong only on the candidate, 0 only on the AR server" \
        in failure, failure
    (bug,) = [f for f in sink.items if f.severity == "bug"]
    assert bug.prompt_id == workload.items[30].key and bug.details["repro"]["judge"] == "parity"

    protocol, sink, _, failure = run_protocol(
        workload, KnownAnswers(OracleRoute(name="candidate"), wrong_alone=ids[:30]),
        KnownAnswers(OracleRoute(name="ar"), wrong_alone=ids[:30]))
    assert failure is None and not [f for f in sink.items if f.severity == "bug"], failure
    assert part_row(sink)["verified"]


@pytest.mark.parametrize("right_alone", [0, 40])
def test_too_few_answers_right_alone_read_not_verified_weakly(prompts, right_alone):
    """Flips come only from answers right alone: with 0 or 40 of 100 (both routes wrong on the same others, so no
    static error either) the batched load proves little, and the part says so; 60 right alone verify it."""
    workload, ids = prompts
    wrong = ids[right_alone:]
    _, sink, _, failure = run_protocol(workload, KnownAnswers(OracleRoute(name="candidate"), wrong_alone=wrong),
                                       KnownAnswers(OracleRoute(name="ar"), wrong_alone=wrong))
    row = part_row(sink)
    assert failure is None and not row["verified"], row
    assert row["reason"].startswith(f"weakly: only {right_alone} of {REQUESTS} answers right alone"), row["reason"]
    _, sink, _, _ = run_protocol(workload, KnownAnswers(OracleRoute(name="candidate"), wrong_alone=ids[60:]),
                                 KnownAnswers(OracleRoute(name="ar"), wrong_alone=ids[60:]))
    assert part_row(sink)["verified"], part_row(sink)
    from spec_route_suite.stressors.accuracy.reported_protocol import MIN_RIGHT_ALONE
    assert right_alone < MIN_RIGHT_ALONE <= 60


def test_the_sentence_reports_flips_and_static_errors_apart(prompts):
    """3 flips and 5 static errors (the AR server wrong on 2 others alone): each counted in its own clause."""
    workload, ids = prompts
    _, sink, _, _ = run_protocol(
        workload, KnownAnswers(OracleRoute(name="candidate"), wrong_alone=ids[:5], wrong_under_load=ids[10:13]),
        KnownAnswers(OracleRoute(name="ar"), wrong_alone=ids[20:22]))
    line = summary(sink)
    assert f"8 wrong of {REQUESTS} at concurrency {CONCURRENCY}, 5 wrong of {REQUESTS} serially" in line, line
    assert f"flips (right alone, wrong at c={CONCURRENCY}): 3 of 95 right alone" in line, line
    assert (f"static errors (wrong alone): 5 of {REQUESTS}, the AR server 2 of {REQUESTS} alone; 5 wrong only on "
            f"the candidate, 2 only on the AR server") in line, line


# ---------------------------------------------------------------- the look design
def test_alpha_is_spent_mostly_at_the_first_look_and_sums_to_alpha():
    from spec_route_suite.stressors.control import FIRST_LOOK_SHARE, look_levels
    assert look_levels(ALPHA, 1) == (ALPHA,)
    for looks in range(2, 2 + MAX_ROUNDS):
        levels = look_levels(ALPHA, looks)
        assert len(levels) == looks and sum(levels) == pytest.approx(ALPHA)
        assert levels[0] == ALPHA * FIRST_LOOK_SHARE and len(set(levels[1:])) == 1
    bought = LoadComparison(what="differ", candidate=Count(7, 100), baseline=Count(0, 100), where="at c=8",
                            alpha=ALPHA, looks=4, look=2)
    assert bought.level == pytest.approx(ALPHA * (1 - FIRST_LOOK_SHARE) / 3) and not bought.charged
    assert "alpha 0.008 at look 1 of 4" in replace(bought, look=1).sentence()


def fisher_false_charge(n: int, rate: float, level: float) -> float:
    """P(one-sided Fisher p < level) when both routes flip each of their n answers at `rate`: exact, summed over
    both counts (counts 12 standard deviations and more from the mean are left out: their mass is below 1e-12)."""
    spread = int(12 * np.sqrt(n * rate * (1 - rate))) + 12
    ks = np.arange(max(0, int(n * rate) - spread), min(n, int(n * rate) + spread) + 1)
    mine, theirs = np.meshgrid(ks, ks, indexing="ij")
    p = hypergeom.sf(mine - 1, 2 * n, mine + theirs, n)   # P(X >= mine) of the one-sided Fisher test
    weight = np.outer(binom.pmf(ks, n, rate), binom.pmf(ks, n, rate))
    assert weight.sum() > 1 - 1e-12
    return float(weight[p < level].sum())


@pytest.mark.parametrize("rate", [0.01, 0.03, 0.10, 0.30])
def test_the_looks_together_keep_false_charges_within_alpha(rate):
    """A clean route (both routes flip at the same rate): each look's own false-charge probability at its level,
    computed exactly at its cumulative counts (100, 200, 300, 400 answers a route); their sum bounds the protocol's
    false-charge rate (a charge at any look is a charge at that look) and stays within alpha."""
    from spec_route_suite.stressors.control import look_levels
    levels = look_levels(ALPHA, 1 + MAX_ROUNDS)
    per_look = [fisher_false_charge(REQUESTS * look, rate, level) for look, level in enumerate(levels, 1)]
    assert all(p <= level for p, level in zip(per_look, levels)), per_look
    assert sum(per_look) <= ALPHA, per_look


def test_the_power_benchmark_runs_on_the_suites_own_control():
    """benchmarks/protocol_power.py end to end, few runs (its numbers are read from its table, not asserted here)."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.protocol_power", "--sims", "20", "--null-sims", "20"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "alpha by look 0.00800, 0.00067, 0.00067, 0.00067 (sum 0.01000)" in done.stdout, done.stdout
    assert "| 7% |" in done.stdout and "| 10% |" in done.stdout and "(MIN_RIGHT_ALONE)" in done.stdout, done.stdout
