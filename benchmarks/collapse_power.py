"""Power and false alarms of the speed gate's acceptance-collapse warning, by the number of prompts it sends.

    python -m benchmarks.collapse_power [--draws 2000] [--sizes 8,12,16,24]

Why: the warning (stressors/acceptance_collapse.py) judges the speed gate's greedy prompts alone against at 8 in
flight, prompt by prompt. llama.cpp's EAGLE-3 collapse (docs/llama-cpp-findings.md F4) spares some prompts and
varies from run to run: the CI run of 2026-12-05 measured 2.61 alone and 1.75 at 8 on its 8 prompts (6 lower, 2
alike), the full-budget run 2.89 and 2.31 on 16 (7 lower, 9 alike), and the paired t-test the gate used then missed
both (p = 0.022, 0.037); the speed gate alone at 24 prompts saw 6 and 3 prompts lower (12% and 7% pooled): F4
reaches only the prompts whose drafts share a draft batch. How many prompts does the gate need? Each draw takes `size` prompts with replacement from
a measured gate (each prompt's [drafting steps, accepted tokens] alone and at 8 in flight, as the server's
per-answer `timings` stated them) and asks the suite's own `collapses` whether the level collapsed, at the run's
alpha. Measured pairs, not a model: the two F4 gates are the power; the same drafter with
`--no-spec-draft-backend-sampling` and DFlash (one prompt of which drafted a near-tie differently in company) are
the false alarms. Prints one table (markdown). Environment: none.
"""
from __future__ import annotations

import argparse
import random

from spec_route_suite.stressors.acceptance_collapse import collapses

ALPHA = 0.01
# llama.cpp's DFlash preset, 2026-12-05: report.json measurements.speed rows, each prompt's (alone, at 8 in flight)
# [steps, accepted]; the CI stage (/tmp/ci-llama/n2, 8 prompts), the full-budget run (/tmp/full-llama/f1, 16) and
# the speed gate alone twice at 24 prompts (`spec-route-suite -n 8 --routes routes/llama-cpp-dflash.toml
# stressors/test_speed.py`: 6 and 3 prompts lower, pooled 12% and 7% lower)
MEASURED = {
    "eagle3 (F4), CI run": {
        "p0": ([3, 13], [10, 6]), "p1": ([6, 3], [6, 3]), "p2": ([10, 12], [14, 8]), "p3": ([8, 14], [10, 12]),
        "p4": ([8, 11], [12, 7]), "p5": ([3, 13], [7, 9]), "p6": ([6, 4], [6, 4]), "p7": ([7, 12], [11, 8])},
    "eagle3 (F4), full run": {
        "p0": ([3, 13], [3, 13]), "p1": ([4, 5], [7, 2]), "p2": ([10, 12], [14, 8]), "p3": ([8, 14], [8, 14]),
        "p4": ([8, 11], [12, 7]), "p5": ([2, 14], [9, 7]), "p6": ([6, 4], [7, 3]), "p7": ([7, 12], [11, 8]),
        "p8": ([3, 16], [5, 14]), "p9": ([8, 12], [8, 12]), "p10": ([5, 14], [5, 14]), "p11": ([12, 9], [12, 9]),
        "p12": ([4, 11], [4, 11]), "p13": ([11, 15], [11, 15]), "p14": ([4, 13], [4, 13]), "p15": ([5, 14], [5, 14])},
    "eagle3 (F4), gate alone 1": {
        "p0": ([3, 13], [3, 13]), "p1": ([4, 5], [4, 5]), "p2": ([10, 12], [10, 12]), "p3": ([8, 14], [9, 13]),
        "p4": ([8, 11], [11, 8]), "p5": ([2, 14], [9, 7]), "p6": ([6, 4], [9, 1]), "p7": ([7, 12], [7, 12]),
        "p8": ([3, 16], [3, 16]), "p9": ([8, 12], [8, 12]), "p10": ([5, 14], [5, 14]), "p11": ([12, 9], [12, 9]),
        "p12": ([4, 11], [4, 11]), "p13": ([11, 15], [11, 15]), "p14": ([4, 13], [4, 13]), "p15": ([5, 14], [5, 14]),
        "p16": ([14, 12], [14, 12]), "p17": ([6, 10], [6, 10]), "p18": ([5, 16], [5, 16]), "p19": ([4, 13], [4, 13]),
        "p20": ([5, 14], [11, 8]), "p21": ([10, 3], [10, 3]), "p22": ([8, 12], [8, 12]), "p23": ([9, 16], [12, 13])},
    "eagle3 (F4), gate alone 2": {
        "p0": ([3, 13], [3, 13]), "p1": ([4, 5], [4, 5]), "p2": ([10, 12], [10, 12]), "p3": ([8, 14], [8, 14]),
        "p4": ([8, 11], [8, 11]), "p5": ([2, 14], [2, 14]), "p6": ([6, 4], [6, 4]), "p7": ([7, 12], [7, 12]),
        "p8": ([3, 16], [3, 16]), "p9": ([8, 12], [8, 12]), "p10": ([5, 14], [5, 14]), "p11": ([12, 9], [12, 9]),
        "p12": ([4, 11], [4, 11]), "p13": ([11, 15], [11, 15]), "p14": ([4, 13], [4, 13]), "p15": ([5, 14], [8, 11]),
        "p16": ([14, 12], [14, 12]), "p17": ([6, 10], [6, 10]), "p18": ([5, 16], [5, 16]), "p19": ([4, 13], [4, 13]),
        "p20": ([5, 14], [11, 8]), "p21": ([10, 3], [10, 3]), "p22": ([8, 12], [8, 12]), "p23": ([9, 16], [12, 13])},
    "eagle3_cpu_sampling": {
        "p0": ([3, 13], [3, 13]), "p1": ([6, 3], [6, 3]), "p2": ([10, 12], [10, 12]), "p3": ([8, 14], [8, 14]),
        "p4": ([8, 11], [8, 11]), "p5": ([2, 14], [2, 14]), "p6": ([6, 4], [6, 4]), "p7": ([7, 12], [7, 12])},
    "dflash": {
        "p0": ([3, 13], [3, 13]), "p1": ([6, 3], [6, 3]), "p2": ([8, 14], [8, 14]), "p3": ([5, 17], [4, 18]),
        "p4": ([6, 13], [6, 13]), "p5": ([2, 14], [2, 14]), "p6": ([4, 6], [4, 6]), "p7": ([7, 12], [7, 12])},
}


def detected(pairs: list[tuple[list[int], list[int]]]) -> bool:
    """The suite's own decision on one speed gate made of these prompts."""
    alone = {f"q{i}": a for i, (a, _) in enumerate(pairs)}
    loaded = {f"q{i}": b for i, (_, b) in enumerate(pairs)}
    rows = [{"concurrency": 1, "acceptance_by_prompt": alone}, {"concurrency": 8, "acceptance_by_prompt": loaded}]
    return bool(collapses(rows, alpha=ALPHA))


def rate(route: str, size: int, draws: int, rng: random.Random) -> float:
    pool = list(MEASURED[route].values())
    return sum(detected([rng.choice(pool) for _ in range(size)]) for _ in range(draws)) / draws


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[8, 16, 24, 32])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"warning rate over {args.draws} speed gates of `size` prompts drawn from the measured ones, alpha {ALPHA}\n")
    print("| prompts | " + " | ".join(MEASURED) + " |")
    print("|---|" + "---|" * len(MEASURED))
    for size in args.sizes:
        print(f"| {size} | " + " | ".join(f"{rate(r, size, args.draws, rng):.3f}" for r in MEASURED) + " |", flush=True)
    print("\nThe measured gates themselves, as sent: "
          + ", ".join(f"{r} ({len(MEASURED[r])} prompts): {'warning' if detected(list(MEASURED[r].values())) else 'none'}"
                      for r in MEASURED))


if __name__ == "__main__":
    main()
