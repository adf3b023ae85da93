"""Sampled outputs: the candidate must draw from the baseline's distribution at every grid setting.

One test per sampling setting (equivalence/distribution.py GRID), each at alpha / len(GRID), so
the route's false-alarm rate over the grid is <= alpha. A failure is reported only after a further
look confirms it (cumulative samples); the finding also carries the gate's p-value on the fresh
samples alone, the prompts BH points at, their bins and
counts, and the smallest TV shift this budget could have seen (also recorded when it passes).
The grid point with min_p probes it first on both routes; when either refuses it, the point runs
without min_p and the coverage table's `distribution: min_p` row says "not supported by this route"
(the candidate refused) or "not verified" (the baseline did), never a pass. On
a candidate with capability `n`, half its samples come from n=4 requests pooled with the single
ones (equivalence/distribution.py RouteArm); a usage.completion_tokens that is not the sum over
the choices is a finding.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.equivalence.distribution import (GRID, N_CHOICES, RouteArm, plan_route_run, run_check,
                                                        setting_alpha, setting_probe)
from spec_route_suite.equivalence.features import Refusal, probe
from spec_route_suite.equivalence.stats.families import GATE
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.fixtures.prompts.fit import suite_prompts
from spec_route_suite.fixtures.routes.textlevel import level_details, title_suffix
from spec_route_suite.reports.findings import Finding

pytestmark = pytest.mark.check("distribution")

PLAN = SequentialPlan()
BUDGET_NOTE = ("the smallest TV shift (per prompt, worst direction) this budget detects with power 0.9; "
               "raise it with --samples-per-prompt or a batched/concurrent route")


@pytest.mark.parametrize("setting", GRID, ids=[s.name for s in GRID])
def test_sampling_distribution(setting: SamplingSetting, baseline, candidate, tokenizer, fitted_prompts, suite_config,
                               findings):
    records = suite_prompts(suite_config.categories, suite_config.prompt_limit)
    setting, min_p_refusal = _min_p_supported(setting, baseline, candidate, fitted_prompts.ids(records[0], 1))
    run = plan_route_run(baseline=baseline, candidate=candidate,
                         records=records,
                         encode=fitted_prompts.ids, tokenizer=tokenizer, suite_config=suite_config, setting=setting,
                         plan=PLAN)
    budget, prompt_names = run.budget, run.prompt_names
    arms = {name: RouteArm(handle, run.prompt_ids, tokens=run.tokens, text_level=run.text_level, tokenizer=tokenizer,
                           n_choices=N_CHOICES if name == "candidate" else 0)
            for name, handle in (("baseline", baseline), ("candidate", candidate))}
    result = run_check(baseline=arms["baseline"], candidate=arms["candidate"], prompts=len(run.prompt_ids),
                       setting=setting, budget=budget, alpha=setting_alpha(suite_config.alpha), seed=suite_config.seed,
                       oracle=ProbabilityOracle(run.scorer, setting) if run.scorer else None, plan=PLAN)

    families = {name: result.family_report(name) for name in result.hypotheses}
    for name, report in families.items():
        findings.measure("p_value", name=f"{setting.name}/{name}", p_value=report["holm_adjusted"])
    summary = {
        "setting": setting.__dict__, "prompts": prompt_names, "budget": budget.as_dict(),
        "samples_used_per_arm_per_prompt": result.samples_used, "look_sizes": list(result.look_sizes),
        "stopped": result.stopped, "alpha_this_setting": result.alpha, "seed": suite_config.seed,
        "min_detectable_tv": budget.min_detectable_tv, "min_detectable_tv_note": BUDGET_NOTE,
        "score_based_families": run.scorer is not None, "serial_route": run.serial, **level_details(run.text_level),
        "candidate_samples_from_n_choices": arms["candidate"].pooled, "n_choices_refused": arms["candidate"].n_refused,
    }
    findings.measure("distribution_budget", **summary)
    if run.text_level:
        findings.measure("comparison", check="distribution", setting=setting.name, route=candidate.name,
                         **level_details(True))
    detectable, wanted = budget.min_detectable_tv, suite_config.detect_tv
    findings.cover("distribution", candidate.name, verified=detectable <= wanted,
                   ran={"settings": 1, "prompt-settings": len(run.prompt_ids),
                        "samples per arm": result.samples_used * len(run.prompt_ids)},
                   could_detect=f"{setting.name}: TV >= {detectable:.3f} per prompt (power {budget.power})"
                                + (f"; {arms['candidate'].pooled} samples from n={N_CHOICES} requests pooled in"
                                   if arms["candidate"].pooled else ""),
                   reason=(f"{setting.name}: minimum detectable TV {detectable:.3f} is above --detect-tv {wanted}"
                           + (" (a serial route's capped budget)" if run.serial else "")))
    _cover_min_p(findings, setting, candidate.name, min_p_refusal, verified=detectable <= wanted,
                 could_detect=f"min_p / top_k applied on one side only ({setting.name}: TV >= {detectable:.3f})")
    _usage_summed(arms["candidate"], setting, findings)
    inconsistent = result.evidence.baseline_inconsistent
    if inconsistent:
        findings.add(Finding(
            check="distribution", severity="warning", route=baseline.name,
            title=(f"{setting.name}: the baseline's own samples do not follow the requested sampling parameters "
                   f"({', '.join(sorted(inconsistent))}); score-based families not evaluated (e.g. an implicit top-k)"),
            details={**summary, "baseline_pvalues": inconsistent}))
    if not result.failed:
        findings.add(Finding(
            check="distribution", severity="info", route=candidate.name,
            title=(f"{setting.name}: no distribution shift found ({result.stopped}); this budget detects TV shifts "
                   f">= {budget.min_detectable_tv:.3f} per prompt with power {budget.power}"
                   + title_suffix(text_level=run.text_level)),
            details={**summary, "families": families}))
        return
    failing = [n for n, r in families.items() if r["rejected"]]
    prompts = result.evidence.prompt_report(decode=tokenizer.decode, prompt_ids=prompt_names)
    gate = families[GATE]
    fresh = result.fresh_gate_pvalue()
    title = (f"{setting.name}: sampled tokens differ from the baseline's distribution ({', '.join(failing)}); "
             f"gate p={fresh:.2g} on fresh samples only (drawn after the screening look, p={gate['screen_p']:.2g})"
             if gate["rejected"] and fresh is not None else
             f"{setting.name}: sampled tokens differ from the baseline's distribution ({', '.join(failing)})"
             ) + title_suffix(text_level=run.text_level)
    findings.add(Finding(
        check="distribution", severity="bug", route=candidate.name, prompt_id=prompts[0]["prompt_id"], title=title,
        details={**summary, "families": families, "failing_families": failing,
                 "gate_fresh_samples_p": fresh, "prompts_by_significance": prompts}))
    lines = [f"  {n}: Holm-adjusted p={families[n]['holm_adjusted']:.3g} (screen p={families[n]['screen_p']}, "
             f"cumulative confirm p={families[n]['confirm_p']}, screening samples included)" for n in failing]
    top = prompts[0]
    pytest.fail(
        f"candidate '{candidate.name}' does not sample from baseline '{baseline.name}''s distribution at "
        f"{setting.name} ({result.stopped}):\n" + "\n".join(lines) +
        f"\n  most significant prompt {top['prompt_id']} (p={top['pvalue']:.3g}, observed TV {top['observed_tv']:.3f}):"
        f"\n    bins      {top['bins']}\n    baseline  {top['baseline_counts']}\n    candidate {top['candidate_counts']}",
        pytrace=False)


def _min_p_supported(setting, baseline, candidate, prompt_ids) -> tuple[SamplingSetting, Refusal | None]:
    """The setting to run: as given when both routes accept its min_p (probed with one token), else
    the same point without min_p, and the refusal."""
    req = setting_probe(prompt_ids, setting)
    if req is None:
        return setting, None
    for handle in (baseline, candidate):
        answer = probe(handle, req, "min_p")
        if isinstance(answer, Refusal):
            return replace(setting, min_p=0.0), answer
    return setting, None


def _cover_min_p(findings, setting, route: str, refusal: Refusal | None, *, verified: bool, could_detect: str) -> None:
    """The `distribution: min_p` row: verified with this point's budget, not supported when the candidate
    refused min_p, not verified when the baseline did."""
    if refusal is None and not setting.min_p:
        return
    if refusal is not None:
        ours = refusal.route == route
        findings.cover("distribution", route, verified=False, supported=not ours, part="min_p",
                       could_detect=could_detect,
                       reason=refusal.describe() if ours else f"the baseline refuses min_p: {refusal.describe()}")
        return
    findings.cover("distribution", route, verified=verified, part="min_p", could_detect=could_detect,
                   reason="" if verified else f"{setting.name}: the budget misses --detect-tv (see the distribution row)")


def _usage_summed(arm: RouteArm, setting, findings) -> None:
    """usage.completion_tokens of an n-choice answer must be the sum over its choices."""
    if not arm.usage_problems:
        return
    findings.add(Finding(
        check="distribution", severity="bug", route=arm.name,
        title=f"{setting.name}: n={N_CHOICES} answers report usage.completion_tokens that is not the sum over "
              f"their choices ({len(arm.usage_problems)} answers)",
        details={"diff": "; ".join(arm.usage_problems[:8]), "feature": "n", "answers": len(arm.usage_problems)}))
    pytest.fail(f"{setting.name}: usage not summed over the n={N_CHOICES} choices on '{arm.name}': "
                f"{arm.usage_problems[0]}", pytrace=False)
