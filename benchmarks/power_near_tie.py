"""False alarms and power of the near-tie family at production settings, over seeds.

    python -m benchmarks.power_near_tie [--runs 20] [--noise 1.5]

Each run is the route suite's own near-tie test (equivalence/test_greedy.py test_near_tie_rate_matches_aa) at the
default budget: every prompt of the default set at 64 new tokens, alpha 0.01, --greedy-policy classify, tau from
the `calibration` fixture's computation. The baseline is the reference engine with `logit_noise` at its default
noise (a GPU-like baseline, seed s); against it, per run:
- the same fault at the same noise, another seed (a correct route on the same hardware): its rejections are the
  family's false alarms;
- the same fault at --noise (a verifier at another precision): its rejections are the power.
Printed: both rates with 95% intervals, the detectable excess the runs stated, and each run's counts.
Environment: none.
"""
from __future__ import annotations

import argparse
import time

from scipy import stats

from tests.test_greedy_routes import handle, reference_route
from tests.test_near_tie_power import coverage, lazy_calibration, production, rates, run_rate


def one_run(seed: int, noise: str) -> dict:
    baseline = handle(reference_route("baseline", fault="logit_noise", seed=str(seed)), "baseline")
    calibration = lazy_calibration(baseline, production())
    out = {}
    for name, options in (("same", {"fault": "logit_noise", "seed": str(seed + 1000)}),
                          ("noisier", {"fault": "logit_noise", "noise": noise, "seed": str(seed + 1000)})):
        candidate = handle(reference_route("candidate", **options), "candidate")
        outcome, _, sink = run_rate(baseline, candidate, calibration, production())
        out[name] = (outcome, rates(sink), coverage(sink)["verified"])
        candidate.route.batcher.close()
    baseline.route.batcher.close()
    return out


def interval(hits: int, runs: int) -> str:
    low, high = stats.binomtest(hits, runs).proportion_ci(0.95)
    return f"{hits}/{runs} = {hits / runs:.2f} (95% CI {low:.2f}-{high:.2f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--noise", default="1.5", help="the noisier verifier's logit noise")
    args = parser.parse_args(argv)
    alarms = caught = 0
    detectable = []
    start = time.perf_counter()
    for seed in range(1, args.runs + 1):
        run = one_run(seed, args.noise)
        alarms += run["same"][0] == "failed"
        caught += run["noisier"][0] == "failed"
        for name, (outcome, measured, verified) in run.items():
            detectable.append(measured["detectable_excess"])
            print(f"seed {seed} {name}: {outcome}, candidate {measured['candidate_near_ties']}/"
                  f"{measured['candidate_tokens']}, A/A {measured['aa_near_ties']}/{measured['aa_tokens']}, "
                  f"p={measured['p_value']:.3g}, detectable excess {1000 * measured['detectable_excess']:.1f}/1000 "
                  f"({'verified' if verified else 'not verified'})", flush=True)
    print(f"\nfalse alarms (same noise, alpha 0.01): {interval(alarms, args.runs)}")
    print(f"power (noise {args.noise}): {interval(caught, args.runs)}")
    print(f"detectable excess stated: {1000 * min(detectable):.1f}-{1000 * max(detectable):.1f} per 1000 tokens "
          f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
