"""Power benchmark of the distribution check: fault, TV shift, samples used, power, samples / chi-square bound.

    python -m benchmarks.power [--synthetic-runs 100] [--reference-runs 3] [--skip-reference]

Every row runs `equivalence.distribution.run_check` itself (the sequential plan, every family,
weighted Holm) at a budget planned for a 5% TV shift (alpha 0.01 over the three grid settings, power
0.9). Columns:
- TV shift: the shift in total variation per prompt. Synthetic knob rows: exact, by construction.
  Fault rows: the "equivalent TV" of the observed gate statistic, sqrt((X^2 - df) / (2 n P)), i.e.
  the worst-direction shift that would give the same noncentrality (the planner's scale).
- samples used: mean samples per arm per prompt at the stopping look, over runs.
- x bound@5%: samples used / STATISTICS.md's fixed-n chi-square bound for 5% (goal <= 1.25).
- x bound@TV: samples used / the bound for the row's own TV (coarse looks: a gross fault stops at
  the 1/4 look, far above its own tiny bound).
Synthetic rows: the vectorised sampler (fixtures/routes/synthetic.py), hundreds of runs. Reference
rows: the reference engine's planted faults against the transformers AR baseline, on the grid
point where each fault acts, a few runs each (about a minute a run on 2 CPU cores).
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

from spec_route_suite.equivalence.distribution import GRID, gate_level, run_check, setting_alpha
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.planner import plan_budget, two_sample_chisquare_n
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.fixtures.routes.synthetic import FAULTS, SyntheticModel

ALPHA, POWER, DESIGN_TV = 0.01, 0.9, 0.05
PLAN = SequentialPlan()
# Where each fault acts: at T=1 there is no temperature to ignore; top-p exists only at the T=0.7 point.
ACTIVE = {"residual_from_p": GRID, "bonus_from_q": GRID, "soft_q_for_argmax_draft": GRID,
          "draft_temperature_ignored": GRID[1:], "top_p_one_side": GRID[1:2]}


@dataclass
class Row:
    label: str
    tv: float
    used: float
    power: float
    prompts: int
    runs: int
    seconds: float

    def cells(self) -> list[str]:
        bound_design = two_sample_chisquare_n(DESIGN_TV, alpha=ALPHA, power=POWER, prompts=self.prompts)
        bound_own = two_sample_chisquare_n(self.tv, alpha=ALPHA, power=POWER, prompts=self.prompts) if self.tv > 0 else math.inf
        return [self.label, f"{self.tv:.3f}", f"{self.used:.0f}", f"{self.power:.2f} ({self.runs} runs)",
                f"{self.used / bound_design:.2f}", f"{self.used / bound_own:.2f}" if bound_own < math.inf else "-",
                f"{self.seconds / self.runs:.1f}"]


def budget_for(prompts: int, tokens: int):
    return plan_budget(detect_tv=DESIGN_TV, level=gate_level(ALPHA, PLAN), power=POWER, prompts=prompts,
                       tokens=tokens, inflation=PLAN.inflation)


def equivalent_tv(result) -> float:
    gate = result.evidence.gate()[0]
    n = result.samples_used
    return math.sqrt(max(0.0, gate.statistic - gate.df) / (2 * n * result.budget.prompts)) if n else 0.0


def route_verdict(baseline, candidate, *, prompts: int, budget, seed: int, settings, oracle_for=None,
                  arms_for=None):
    """One route verdict over `settings` (each at alpha / len(GRID)): (failed, mean samples, equivalent TV).

    `arms_for(setting)` may give per-setting (baseline, candidate) arms (prompts chosen per setting)."""
    failed, used, tvs = False, [], []
    for setting in settings:
        base, cand = arms_for(setting) if arms_for else (baseline, candidate)
        result = run_check(baseline=base, candidate=cand, prompts=prompts, setting=setting, budget=budget,
                           alpha=setting_alpha(ALPHA), seed=seed, plan=PLAN,
                           oracle=oracle_for(setting) if oracle_for else None)
        failed |= result.failed
        used.append(result.samples_used)
        tvs.append(equivalent_tv(result))
        if result.failed:
            break  # the route already fails; a real run stops here too (first failing setting)
    return failed, float(np.mean(used)), max(tvs)


def synthetic_rows(runs: int) -> list[Row]:
    rows = []
    prompts = 6
    flat = SyntheticModel(prompts=prompts, vocab=8, concentration=1.0)
    budget = budget_for(prompts, 3)
    for tv in (0.0, 0.02, 0.05, 0.10, 0.20):
        start, hits, used = time.perf_counter(), 0, []
        for run in range(runs):
            cand = flat.arm("candidate", tokens=3, shift=tv, first_only=True, shift_seed=1000 + run)
            result = run_check(baseline=flat.arm("baseline", tokens=3), candidate=cand, prompts=prompts,
                               setting=GRID[0], budget=budget, alpha=setting_alpha(ALPHA), seed=run, plan=PLAN)
            hits += result.failed
            used.append(result.samples_used)
        label = "synthetic A/A (no shift)" if tv == 0 else f"synthetic shift, TV {tv:.0%} at token 1"
        rows.append(Row(label, tv, float(np.mean(used)), hits / runs, prompts, runs, time.perf_counter() - start))
    peaked = SyntheticModel(prompts=4, vocab=32, concentration=0.1)
    budget = budget_for(4, 5)
    for fault in FAULTS:
        start, hits, used, tvs = time.perf_counter(), 0, [], []
        for run in range(runs):
            failed, mean_used, tv = route_verdict(peaked.arm("baseline", tokens=5),
                                                  peaked.speculative_arm("candidate", tokens=5, fault=fault),
                                                  prompts=4, budget=budget, seed=run, settings=ACTIVE[fault])
            hits += failed
            used.append(mean_used)
            tvs.append(tv)
        rows.append(Row(f"synthetic {fault}", float(np.median(tvs)), float(np.mean(used)), hits / runs, 4, runs,
                        time.perf_counter() - start))
    return rows


def reference_rows(runs: int, prompts: int) -> list[Row]:
    """The reference engine's faults against the transformers AR baseline, through the route adapters."""
    from pathlib import Path

    import torch

    from spec_route_suite.equivalence.distribution import RouteArm, RouteScorer, position_entropies, select_prompts
    from spec_route_suite.fixtures.prompts.encode import encode_record
    from spec_route_suite.fixtures.prompts.records import load_prompt_set
    from spec_route_suite.fixtures.routes.loop import BackgroundLoop
    from spec_route_suite.fixtures.routes.registry import build_route
    from spec_route_suite.fixtures.routes.spec import default_baseline, parse_route_uri
    from spec_route_suite.fixtures.session import RouteHandle

    torch.set_num_threads(1)
    loop = BackgroundLoop()
    base_spec = default_baseline()
    baseline = RouteHandle(build_route(base_spec), base_spec, loop, 600)
    tokenizer = baseline.route.tokenizer
    records = load_prompt_set()
    ids = [encode_record(tokenizer, r) for r in records]
    vocab = len(tokenizer)
    tokens = 10  # two verify blocks of k = 4: what the route suite samples on a fast (batched) route
    prompt_ids = {}
    for setting in GRID:  # chosen per setting on the baseline alone, as the route suite does
        selector = ProbabilityOracle(RouteScorer(baseline, ids, vocab=vocab), setting)
        chosen = select_prompts([position_entropies(selector, i, tokens) for i in range(len(ids))], prompts)
        prompt_ids[setting] = [ids[i] for i in chosen]
    budget = budget_for(prompts, tokens)
    rows = []
    for fault in (None, *FAULTS):
        spec = parse_route_uri("candidate", "reference:" + (f"?fault={fault}" if fault else ""), base=Path("."))
        candidate = RouteHandle(build_route(spec), spec, loop, 600)
        start, hits, used, tvs = time.perf_counter(), 0, [], []
        for run in range(runs):
            failed, mean_used, tv = route_verdict(
                None, None, prompts=prompts, budget=budget, seed=run, settings=ACTIVE.get(fault, GRID),
                arms_for=lambda s: (RouteArm(baseline, prompt_ids[s], tokens=tokens),
                                    RouteArm(candidate, prompt_ids[s], tokens=tokens)),
                oracle_for=lambda s: ProbabilityOracle(RouteScorer(baseline, prompt_ids[s], vocab=vocab), s))
            hits += failed
            used.append(mean_used)
            tvs.append(tv)
        candidate.close()
        rows.append(Row(f"reference {fault or 'correct (A/A)'}", float(np.median(tvs)), float(np.mean(used)),
                        hits / runs, prompts, runs, time.perf_counter() - start))
        print(" | ".join(rows[-1].cells()), flush=True)
    baseline.close()
    loop.close()
    return rows


def table(rows: list[Row]) -> str:
    header = ["fault / shift", "TV shift", "samples used", "power", "x bound@5%", "x bound@TV", "s/run"]
    lines = [header] + [r.cells() for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [" | ".join(c.ljust(w) for c, w in zip(line, widths)) for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic-runs", type=int, default=100)
    parser.add_argument("--reference-runs", type=int, default=3)
    parser.add_argument("--reference-prompts", type=int, default=20)
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args(argv)
    budget = budget_for(6, 3)
    print(f"budget planned for TV {DESIGN_TV} at alpha {ALPHA} (gate level {budget.level:.4f}), power {POWER}; "
          f"sequential plan looks {PLAN.looks}, inflation {PLAN.inflation}\n")
    rows = synthetic_rows(args.synthetic_runs)
    print(table(rows), flush=True)
    if not args.skip_reference:
        print("\nreference engine (transformers AR baseline):", flush=True)
        print(table(reference_rows(args.reference_runs, args.reference_prompts)))


if __name__ == "__main__":
    main()
