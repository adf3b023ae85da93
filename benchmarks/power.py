"""Power per request of the distribution check's two designs: scoring (one-sample) and two-sample.

    python -m benchmarks.power [--runs 40] [--aa-runs 1000] [--reference-runs 2] [--skip-reference]

Everything runs the route suite's own decision (equivalence/exact_verdict.py: run_distribution with the
sequential plan, every family, weighted Holm, the premise control and the two-sample fallback; or
run_check alone for the two-sample design) at alpha 0.01 over the grid, power 0.9.

1. Budgets: the samples each design plans per setting for TV 0.05 on the default run's shape
   (20 prompts, 10 tokens), and their ratio.
2. A/A: the scoring design's false-alarm rate over --aa-runs route verdicts (a correct speculative
   sampler against exact scores, every grid setting, the budget planned for TV 0.05).
3. Requests to power 0.9 (synthetic sampler, --runs verdicts per budget): for each planted fault and a
   temperature x0.95 / x0.98 shift, the smallest budget (per prompt, on a x sqrt(2) ladder) at which the
   verdict fails the route in >= 90% of runs, in samples drawn per setting at that budget (mean over
   runs, premise control and fallbacks included; "max" is the planned budget), and the power at the
   budget planned for TV 0.05.
4. The reference engine's distribution faults of the mutation table (benchmarks/power_reference.py).
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
from scipy import stats

from spec_route_suite.equivalence.distribution import GRID, SCORING, TWO_SAMPLE
from spec_route_suite.equivalence.distribution_plan import budget_for
from spec_route_suite.equivalence.exact_verdict import ExactBaseline, verdict
from spec_route_suite.equivalence.stats.onesample import SCORED_GATE, scored_weights
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.equivalence.stats.synthetic import EOS, FAULTS, SyntheticModel

ALPHA, POWER, DESIGN_TV = 0.01, 0.9, 0.05
PLAN = SequentialPlan()
DESIGNS = (SCORING, TWO_SAMPLE)
MODEL = SyntheticModel(prompts=4, vocab=32, concentration=0.1)
TOKENS = 5
EXACT = ExactBaseline(MODEL, stop_ids=(EOS,))
# the grid points where each shift shows on the synthetic pair (all four: a temperature error is everywhere)
ACTIVE = {"residual_from_p": GRID[2:3], "bonus_from_q": GRID[1:2], "soft_q_for_argmax_draft": GRID[2:3],
          "draft_temperature_ignored": GRID[2:3], "top_p_one_side": GRID[1:2],
          "temperature x0.95": GRID, "temperature x0.98": GRID}
LADDER = tuple(2 ** (k / 2) for k in range(-8, 5))   # budget scales around the one planned for TV 0.05


def planned(design: str, *, prompts: int = MODEL.prompts, tokens: int = TOKENS, tv: float = DESIGN_TV) -> int:
    """Samples per prompt the design plans (per arm for two-sample)."""
    if design == SCORING:
        weight = scored_weights(token_families=True)[SCORED_GATE]
        return budget_for(detect_tv=tv, alpha=ALPHA, prompts=prompts, tokens=tokens, plan=PLAN, one_sample=True,
                          weight=weight).samples_per_prompt
    return budget_for(detect_tv=tv, alpha=ALPHA, prompts=prompts, tokens=tokens, plan=PLAN).samples_per_prompt


def budget_table() -> str:
    lines = ["| design | samples per prompt | arms | samples per setting (20 prompts, 10 tokens) | vs two-sample |",
             "|---|---|---|---|---|"]
    two = 2 * 20 * planned(TWO_SAMPLE, prompts=20, tokens=10)
    for design in DESIGNS:
        n = planned(design, prompts=20, tokens=10)
        arms = 1 if design == SCORING else 2
        lines.append(f"| {design} | {n} | {arms} | {arms * 20 * n} | {arms * 20 * n / two:.2f} |")
    return "\n".join(lines)


def candidate_arm(row: str):
    if row.startswith("temperature"):
        return MODEL.arm("candidate", tokens=TOKENS, temperature_scale=float(row.split("x")[1]))
    return MODEL.speculative_arm("candidate", tokens=TOKENS, fault=None if row == "correct" else row)


def run_verdicts(row: str, design: str, *, scale: float, runs: int, first_seed: int = 0) -> tuple[float, float]:
    """(power, mean samples drawn per setting run) of `runs` verdicts at `scale` x the scoring design's budget."""
    samples = max(2, round(scale * planned(SCORING)))
    baseline, candidate = MODEL.arm("baseline", tokens=TOKENS), candidate_arm(row)
    hits, drawn = 0, []
    for run in range(first_seed, first_seed + runs):
        results = verdict(EXACT, baseline, candidate, prompts=MODEL.prompts, tokens=TOKENS, seed=run,
                          samples=samples, settings=ACTIVE.get(row, GRID), design=design, alpha=ALPHA, plan=PLAN)
        hits += results[-1].failed
        drawn.append(np.mean([r.requests() for r in results]))
    return hits / runs, float(np.mean(drawn))


@dataclass
class PowerRow:
    row: str
    design: str
    scale: float        # budget at power 0.9, as a multiple of the scoring design's TV-0.05 budget (per prompt)
    drawn: float        # mean samples drawn per setting run there
    at_default: float   # power at the design's own TV-0.05 budget
    seconds: float
    floor: bool = False  # power >= 0.9 even at the ladder's lowest budget: the numbers are upper bounds

    def cells(self) -> list[str]:
        arms = 1 if self.design == SCORING else 2
        reached = math.isfinite(self.scale)
        max_requests = arms * 2 ** (self.design == TWO_SAMPLE) * self.scale * planned(SCORING) * MODEL.prompts
        bound = "<= " if self.floor else ""
        return [self.row, self.design, f"{self.at_default:.2f}",
                f"{bound}{self.drawn:.0f}" if reached else f"not reached by {LADDER[-1]:g}x",
                f"{bound}{max_requests:.0f}" if reached else "-", f"{self.seconds:.0f}"]


def power_row(row: str, design: str, runs: int) -> PowerRow:
    """Power at the design's own TV-0.05 budget, then down the ladder while power stays >= 0.9 (or up it until
    power reaches 0.9): the smallest budget on the ladder with power >= 0.9."""
    start = time.perf_counter()
    own = 1.0 if design == SCORING else planned(TWO_SAMPLE) / (2 * planned(SCORING))
    at_default, own_drawn = run_verdicts(row, design, scale=own, runs=runs)
    scale, drawn, floor = (own, own_drawn, False) if at_default >= POWER else (math.inf, math.nan, False)
    steps = [s for s in reversed(LADDER) if s < own] if at_default >= POWER else [s for s in LADDER if s > own]
    going_down = at_default >= POWER
    for step in steps:
        power, mean_drawn = run_verdicts(row, design, scale=step, runs=runs)
        hit = power >= POWER
        if hit:
            scale, drawn, floor = step, mean_drawn, step == LADDER[0]
        if hit != going_down:   # down the ladder: stop at the first miss; up it: at the first hit
            break
    return PowerRow(row, design, scale, drawn, at_default, time.perf_counter() - start, floor)


def aa_rate(runs: int) -> str:
    baseline, candidate = MODEL.arm("baseline", tokens=TOKENS), candidate_arm("correct")
    start, alarms, drawn = time.perf_counter(), 0, []
    for run in range(runs):
        results = verdict(EXACT, baseline, candidate, prompts=MODEL.prompts, tokens=TOKENS, seed=100_000 + run,
                          alpha=ALPHA, plan=PLAN)
        alarms += results[-1].failed
        drawn.append(np.mean([r.requests() for r in results]))
    low, high = stats.binomtest(alarms, runs).proportion_ci(0.95)
    return (f"scoring design A/A: {alarms} false alarms in {runs} route verdicts = {alarms / runs:.4f} "
            f"(95% CI {low:.4f}-{high:.4f}; alpha {ALPHA}), mean samples drawn per setting {np.mean(drawn):.0f} of "
            f"{planned(SCORING) * MODEL.prompts} planned ({time.perf_counter() - start:.0f} s)")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header] + rows
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [" | ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="verdicts per budget on the power ladder")
    parser.add_argument("--aa-runs", type=int, default=1000)
    parser.add_argument("--reference-runs", type=int, default=2)
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args(argv)
    print(f"alpha {ALPHA} over {len(GRID)} grid settings, power {POWER}, sequential looks {PLAN.looks}\n")
    print(budget_table(), "\n", flush=True)
    print(aa_rate(args.aa_runs), "\n", flush=True)
    header = ["shift (synthetic pair, 4 prompts)", "design", "power at TV-0.05 budget",
              "samples drawn per setting at power 0.9", "planned max there", "s"]
    rows = []
    for row in (*FAULTS, "temperature x0.95", "temperature x0.98"):
        for design in DESIGNS:
            rows.append(power_row(row, design, args.runs).cells())
            print(" | ".join(rows[-1]), flush=True)
    print("\n" + table(header, rows), flush=True)
    if not args.skip_reference:
        from benchmarks.power_reference import reference_table
        print("\n" + reference_table(args.reference_runs), flush=True)


if __name__ == "__main__":
    main()
