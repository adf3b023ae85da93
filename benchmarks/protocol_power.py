"""Power and false charges of the reported protocol's flip test, decided by the suite's own load control.

    python -m benchmarks.protocol_power [--sims 4000] [--null-sims 20000] [--seed 0]

Why: the motivating report is 7 of 100 answers flipped at concurrency 8, against 0 of 100 serially and none on the
AR server. The reported protocol (stressors/accuracy/reported_protocol.py) sends the same 100 requests at c=8 to the
candidate and to the AR server, charges the flips (answers right alone, wrong under load) beyond the AR server's by
a one-sided Fisher test, and buys up to 3 more rounds of the same requests on both routes while the test cannot
tell; the looks spend alpha unevenly (stressors/control.py `look_levels`: FIRST_LOOK_SHARE at the first look, the
rest evenly over the rounds). Each simulated run draws every round's flips from binomials (the candidate flips each
of its right-alone answers at `rate`, or at its rate and the engine's own `noise` together; the AR server at `noise`)
and asks the suite's own `LoadControl.compare` whether, and at which look, it charges. Printed (markdown):
- rate -> share charged at the first look and overall, with no flips on the AR server and with a small noise;
- the false-charge rate on a clean route (the candidate flips at the AR server's own rate), at several noises;
- the share charged at the report's 7% by how many of the 100 answers are right alone (the protocol's "weakly"
  threshold, MIN_RIGHT_ALONE).
Environment: none.
"""
from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np

from spec_route_suite.routes.base import Capabilities
from spec_route_suite.stressors.control import Count, LoadControl, TopUp, look_levels, rounds_allowed
from spec_route_suite.stressors.accuracy.reported_protocol import MIN_RIGHT_ALONE, REQUESTS

ALPHA = 0.01                     # the suite's default --alpha
RATES = (0.04, 0.07, 0.10)       # flip rates of the candidate's right-alone answers; 0.07 is the report's
NOISE = 0.01                     # a realistic small control noise: 1 answer in 100 flipped by the engine itself
NULL_NOISES = (0.0, 0.01, 0.03, 0.10)
RIGHT_ALONE = (30, 40, 50, 70, 100)
AR = SimpleNamespace(name="AR server", capabilities=Capabilities(concurrency=True))
CANDIDATE = SimpleNamespace(name="candidate")


def combined(rate: float, noise: float) -> float:
    """The candidate's flip rate when its speculation fault and the engine's own noise act independently."""
    return 1 - (1 - rate) * (1 - noise)


def one_run(rng: np.random.Generator, *, rate: float, noise: float, right: int = REQUESTS) -> int:
    """The look at which the protocol charges one simulated run (0: never)."""
    def flips(route, _references, _round: int) -> Count:
        return Count(int(rng.binomial(right, rate if route is CANDIDATE else noise)), REQUESTS)

    mine, theirs = flips(CANDIDATE, None, 0), flips(AR, None, 0)
    comparison = LoadControl(AR, {}, alpha=ALPHA).compare(
        what="answers right alone turned wrong", candidate=mine, baseline=theirs, where="at c=8",
        top_up=TopUp(CANDIDATE, {}, flips, requests=REQUESTS))
    return comparison.look if comparison.charged else 0


def shares(rng, runs: int, **setting) -> tuple[float, float]:
    """(share charged at the first look, share charged at any look) over `runs` simulated runs."""
    looks = [one_run(rng, **setting) for _ in range(runs)]
    return sum(look == 1 for look in looks) / runs, sum(look > 0 for look in looks) / runs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=4000, help="runs per power setting")
    ap.add_argument("--null-sims", type=int, default=20000, help="runs per clean-route setting")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    levels = look_levels(ALPHA, 1 + rounds_allowed(TopUp(CANDIDATE, {}, None, requests=REQUESTS)))
    print(f"{REQUESTS} requests a round at alpha {ALPHA}; alpha by look {', '.join(f'{x:.5f}' for x in levels)} "
          f"(sum {sum(levels):.5f}); {args.sims} runs per power setting, {args.null_sims} per clean setting\n")
    print(f"| flip rate | first look, AR 0% | overall, AR 0% | first look, AR noise {NOISE:.0%} | "
          f"overall, AR noise {NOISE:.0%} |")
    print("|---|---|---|---|---|")
    for rate in RATES:
        clean = shares(rng, args.sims, rate=rate, noise=0.0)
        noisy = shares(rng, args.sims, rate=combined(rate, NOISE), noise=NOISE)
        print(f"| {rate:.0%} | {clean[0]:.3f} | {clean[1]:.3f} | {noisy[0]:.3f} | {noisy[1]:.3f} |", flush=True)
    print("\n| clean route: both flip at | false charges, first look | false charges, overall |")
    print("|---|---|---|")
    for noise in NULL_NOISES:
        first, overall = shares(rng, args.null_sims, rate=noise, noise=noise)
        print(f"| {noise:.0%} | {first:.4f} | {overall:.4f} (alpha {ALPHA}) |", flush=True)
    print(f"\n| right alone of {REQUESTS} (7% of them flip, AR 0%) | first look | overall |")
    print("|---|---|---|")
    for right in RIGHT_ALONE:
        first, overall = shares(rng, args.sims, rate=0.07, noise=0.0, right=right)
        mark = " (MIN_RIGHT_ALONE)" if right == MIN_RIGHT_ALONE else ""
        print(f"| {right}{mark} | {first:.3f} | {overall:.3f} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
