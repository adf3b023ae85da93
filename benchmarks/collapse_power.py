"""Power and false alarms of the speed gate's acceptance-collapse warning, by the number of prompts it sends.

    python -m benchmarks.collapse_power [--draws 2000] [--sizes 8,16,24,32]

Why: the warning (stressors/speed/collapse.py) judges the speed gate's greedy prompts alone against at 8 in
flight, prompt by prompt. llama.cpp's EAGLE-3 collapse (docs/llama-cpp-findings.md F4) spares some prompts and
varies from run to run: the CI run of 2026-12-05 measured 2.61 alone and 1.75 at 8 on its 8 prompts (6 lower, 2
alike), the full-budget run 2.89 and 2.31 on 16 (7 lower, 9 alike), and the paired t-test the gate used then missed
both (p = 0.022, 0.037); the speed gate alone at 24 prompts saw 6 and 3 prompts lower (12% and 7% pooled): F4
reaches only the prompts whose drafts share a draft batch. How many prompts does the gate need? Each draw takes
`size` prompts with replacement from a measured gate (each prompt's [drafting steps, accepted tokens] alone and at
8 in flight, as the server's per-answer `timings` stated them; the gates are stressors/speed/measured_speed_gates.toml,
with each gate's run and command, which tests/test_acceptance_collapse.py also decides as sent) and asks the
suite's own `collapses` whether the level collapsed, at the run's default alpha. Measured pairs, not a model: the
four F4 gates are the power; the same drafter with `--no-spec-draft-backend-sampling` and DFlash (one prompt of
which drafted a near-tie differently in company) are the false alarms. Prints one table (markdown). Environment: none.
"""
from __future__ import annotations

import argparse
import random

from spec_route_suite.options import option
from spec_route_suite.stressors.speed.collapse import collapses
from spec_route_suite.stressors.speed.measured_gates import gate_rows, measured_gates

ALPHA = option("alpha").default
MEASURED_GATES = measured_gates()


def detected(pairs: list[tuple[list[int], list[int]]]) -> bool:
    """The suite's own decision on one speed gate made of these prompts."""
    return bool(collapses(gate_rows([a for a, _ in pairs], [b for _, b in pairs]), alpha=ALPHA))


def rate(gate: str, size: int, draws: int, rng: random.Random) -> float:
    pool = MEASURED_GATES[gate].pairs
    return sum(detected([rng.choice(pool) for _ in range(size)]) for _ in range(draws)) / draws


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[8, 16, 24, 32])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"warning rate over {args.draws} speed gates of `size` prompts drawn from the measured ones, alpha {ALPHA}\n")
    print("| prompts | " + " | ".join(MEASURED_GATES) + " |")
    print("|---|" + "---|" * len(MEASURED_GATES))
    for size in args.sizes:
        print(f"| {size} | " + " | ".join(f"{rate(name, size, args.draws, rng):.3f}" for name in MEASURED_GATES)
              + " |", flush=True)
    print("\nThe measured gates themselves, as sent: "
          + ", ".join(f"{name} ({len(gate.pairs)} prompts): {'warning' if detected(gate.pairs) else 'none'} "
                      f"(expected: {gate.expect})" for name, gate in MEASURED_GATES.items()))


if __name__ == "__main__":
    main()
