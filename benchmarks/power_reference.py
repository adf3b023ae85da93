"""The scoring design on the real embedded models: every distribution row of the mutation table at the default budget.

The transformers AR baseline (whole-vocabulary scores, so the scoring design with its token families)
against the reference engine with each planted distribution fault on the grid point where the mutation
table runs it (tests/mutation.py), with a candidate that samples at 0.95 x and 0.98 x the temperature
on the whole grid, and with the correct engine; the budget is the route suite's default for a fast route
(20 prompts, 6 at the min_p point, 10 tokens, TV 0.05), prompts chosen as the route suite chooses them.
Columns: runs that failed the route; samples drawn per setting (candidate, premise control, fallback);
the scoring test's gate noncentrality per sample, and from it the requests each design needs for power
0.9 with this fault on these prompts (noncentral chi-square at the gate's level, the sequential plan's
inflation; two-sample: half the noncentrality per sample on each of two arms).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import optimize, stats

from spec_route_suite.equivalence.distribution import GRID, SCORING, run_distribution, setting_alpha
from spec_route_suite.equivalence.distribution_plan import (FAST_PROMPTS, MIN_P_PROMPTS, budget_for, gate_level,
                                                            scoring_builder)
from spec_route_suite.equivalence.distribution_prompts import prompt_scores, select_prompts
from spec_route_suite.equivalence.distribution_routes import N_CHOICES, RouteArm, RouteScorer
from spec_route_suite.equivalence.stats.onesample import SCORED_GATE, scored_weights
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.sequential import SequentialPlan

ALPHA, TOKENS, TV = 0.01, 10, 0.05
PLAN = SequentialPlan()
T15, T07, MINP = GRID[2], GRID[1], GRID[3]
ROWS = (("correct", None, GRID), ("residual_from_p", None, (T15,)), ("bonus_from_q", None, (T15,)),
        ("soft_q_for_argmax_draft", None, (T15,)), ("draft_temperature_ignored", None, (T15,)),
        ("top_p_one_side", None, (T07,)), ("min_p_draft_only", None, (MINP,)), ("n_shared_stream", None, (T15,)),
        ("temperature x0.95", 0.95, GRID), ("temperature x0.98", 0.98, GRID))


class ScaledTemperature:
    """An arm that samples at `factor` x the setting's temperature: a sampler off by a few percent."""

    def __init__(self, arm: RouteArm, factor: float):
        self.arm, self.factor, self.name, self.serial = arm, factor, arm.name, arm.serial

    def draw(self, prompt, setting, n, seed):
        return self.arm.draw(prompt, replace(setting, temperature=setting.temperature * self.factor), n, seed)


def requests_for_power(noncentrality_per_sample: float, *, df: int, prompts: int, level: float, arms: int) -> float:
    """Samples (all arms) per setting for power 0.9: n per prompt with ncx2(df, n x lambda) > chi2 critical."""
    if noncentrality_per_sample <= 0:
        return math.inf
    if math.isinf(noncentrality_per_sample):   # a sample the baseline gives probability 0: the first one decides
        return math.nan
    critical = stats.chi2.isf(level, df)
    # solved in the noncentrality itself: scipy's ncx2 gives NaN for a noncentrality near 0 (a bracket in samples
    # starting at 1e-6 x a small lambda hit it)
    needed = optimize.brentq(lambda nc: stats.ncx2.sf(critical, df, nc) - 0.9, 1e-3, 1e6)
    return arms * prompts * PLAN.inflation * needed / noncentrality_per_sample


class Bench:
    """The baseline, its scores and the prompts per setting, built once."""

    def __init__(self):
        import torch
        from spec_route_suite.prompts.encode import encode_record
        from spec_route_suite.prompts.records import load_prompt_set
        from spec_route_suite.routes.loop import BackgroundLoop
        from spec_route_suite.routes.registry import build_route
        from spec_route_suite.routes.spec import default_baseline
        from spec_route_suite.session import RouteHandle
        torch.set_num_threads(1)
        self.loop = BackgroundLoop()
        spec = default_baseline()
        self.baseline = RouteHandle(build_route(spec), spec, self.loop, 600)
        self.tokenizer = self.baseline.route.tokenizer
        records = load_prompt_set()
        ids = [encode_record(self.tokenizer, r) for r in records]
        scorer = RouteScorer(self.baseline, ids, vocab=len(self.tokenizer))
        scores = prompt_scores(self.baseline, ids, depth=TOKENS, settings=GRID, shared=None,
                               score=lambda prompt, path: scorer.score_many(ids.index(tuple(prompt)), [path])[0])
        self.prompts = {s: [ids[i] for i in select_prompts(scores[repr(s)], MIN_P_PROMPTS if s.min_p else FAST_PROMPTS)]
                        for s in GRID}

    def candidate(self, fault: str | None):
        from spec_route_suite.routes.registry import build_route
        from spec_route_suite.routes.spec import parse_route_uri
        from spec_route_suite.session import RouteHandle
        spec = parse_route_uri("candidate", "reference:" + (f"?fault={fault}" if fault else ""), base=Path("."))
        return RouteHandle(build_route(spec), spec, self.loop, 600)

    def setting_run(self, candidate, factor, setting, seed: int):
        prompt_ids = self.prompts[setting]
        prompts = len(prompt_ids)
        weight = scored_weights(token_families=True)[SCORED_GATE]
        common = dict(detect_tv=TV, alpha=ALPHA, prompts=prompts, tokens=TOKENS, plan=PLAN)
        scoring, two_sample = budget_for(**common, one_sample=True, weight=weight), budget_for(**common)
        oracle = ProbabilityOracle(RouteScorer(self.baseline, prompt_ids, vocab=len(self.tokenizer)), setting)
        cand = RouteArm(candidate, prompt_ids, tokens=TOKENS, n_choices=N_CHOICES)
        build = scoring_builder(oracle, oracle=oracle, setting=setting, prompts=prompts, tokens=TOKENS,
                                budget=scoring, stop_ids=(self.tokenizer.eos_token_id,), seed=seed)
        return run_distribution(baseline=RouteArm(self.baseline, prompt_ids, tokens=TOKENS),
                                candidate=ScaledTemperature(cand, factor) if factor else cand, prompts=prompts,
                                setting=setting, alpha=setting_alpha(ALPHA), seed=seed, two_sample=two_sample,
                                scoring=build, oracle=oracle, plan=PLAN)


def reference_table(runs: int) -> str:
    bench = Bench()
    level = gate_level(ALPHA, PLAN, weight=scored_weights(token_families=True)[SCORED_GATE])
    lines = ["| candidate (reference engine) | grid points | failed the route | designs that decided | samples drawn "
             "per setting | gate lambda / sample | scoring: requests for power 0.9 | two-sample: requests for "
             "power 0.9 | s |", "|---|---|---|---|---|---|---|---|---|"]
    for label, factor, settings in ROWS:
        start = time.perf_counter()
        candidate = bench.candidate(None if factor or label == "correct" else label)
        failed, drawn, lambdas, dfs, decided = 0, [], [], [], set()
        for run in range(runs):
            for setting in settings:
                result = bench.setting_run(candidate, factor, setting, seed=run)
                drawn.append(result.requests())
                scored = result.superseded or result
                if scored.design == SCORING:
                    gate, _, counts = scored.evidence.gate()
                    n = scored.samples_used
                    lambdas.append(max(0.0, gate.statistic - gate.df) / n if n else 0.0)
                    dfs.append(gate.df)
                decided.add(result.design + (" (fallback)" if result.superseded else ""))
                if result.failed:
                    failed += 1
                    break
        candidate.close()
        lam, df = float(np.median(lambdas)), int(np.median(dfs))
        prompts = len(bench.prompts[settings[0]])
        one = requests_for_power(lam, df=df, prompts=prompts, level=level, arms=1)
        two = requests_for_power(lam / 2, df=df, prompts=prompts, level=gate_level(ALPHA, PLAN), arms=2)
        names = "all" if len(settings) == len(GRID) else ", ".join(s.name for s in settings)
        need = ["a few (a token the baseline never samples)" if math.isnan(r) else f"{r:.0f}" for r in (one, two)]
        lines.append(f"| {label} | {names} | {failed}/{runs} | {', '.join(sorted(decided))} | {np.mean(drawn):.0f} | "
                     f"{lam:.4f} | {need[0]} | {need[1]} | {time.perf_counter() - start:.0f} |")
        print(lines[-1], flush=True)
    bench.loop.close()
    return "\n".join(lines)
