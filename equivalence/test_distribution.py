"""Sampled outputs: the candidate must draw from the baseline's distribution at every grid setting.

One test per sampling setting (equivalence/distribution.py GRID), each at alpha / len(GRID), so
the route's false-alarm rate over the grid is <= alpha. A failure is reported only after fresh
samples confirm it; the finding carries both p-values, the prompts BH points at, their bins and
counts, and the smallest TV shift this budget could have seen (also recorded when it passes).
"""
from __future__ import annotations

import pytest

from equivalence.distribution import (FAST_PROMPTS, GRID, SERIAL_PROMPTS, RouteArm, RouteScorer, plan_for,
                                      position_entropies, run_check, sample_tokens, select_prompts, setting_alpha)
from equivalence.stats.families import GATE
from equivalence.stats.oracle import ProbabilityOracle
from equivalence.stats.sequential import SequentialPlan
from equivalence.stats.warp import SamplingSetting
from fixtures.prompts.encode import encode_prompt
from fixtures.prompts.records import load_prompt_set
from reports.findings import Finding

pytestmark = pytest.mark.check("distribution")

PLAN = SequentialPlan()
BUDGET_NOTE = ("the smallest TV shift (per prompt, worst direction) this budget detects with power 0.9; "
               "raise it with --samples-per-prompt or a batched/concurrent route")


def _records(suite_config):
    records = load_prompt_set(suite_config.categories)
    if suite_config.prompt_limit is None:
        return records
    seen: dict[str, int] = {}
    kept = []
    for record in records:
        seen[record.category] = seen.get(record.category, 0) + 1
        if seen[record.category] <= suite_config.prompt_limit:
            kept.append(record)
    return kept


@pytest.mark.parametrize("setting", GRID, ids=[s.name for s in GRID])
def test_sampling_distribution(setting: SamplingSetting, baseline, candidate, tokenizer, suite_config, findings):
    records = _records(suite_config)
    all_ids = [encode_prompt(tokenizer, r.text) for r in records]
    serial = RouteArm(candidate, all_ids[:1], tokens=1).serial or RouteArm(baseline, all_ids[:1], tokens=1).serial
    tokens = sample_tokens(candidate.spec, serial=serial)
    scorer = RouteScorer(baseline, all_ids, vocab=len(tokenizer)) if baseline.capabilities.prompt_logprobs else None
    if scorer is not None and not scorer.full_vocabulary():
        scorer = None  # the score-based families need the whole distribution; the gate does not
    selector = ProbabilityOracle(scorer, setting) if scorer else None
    count = min(len(records), SERIAL_PROMPTS if serial else FAST_PROMPTS)
    chosen = select_prompts([position_entropies(selector, i, tokens) for i in range(len(records))] if selector else None,
                            count, categories=[r.category for r in records])
    prompt_ids = [all_ids[i] for i in chosen]
    prompt_names = [records[i].id for i in chosen]
    budget = plan_for(suite_config=suite_config, serial=serial, prompts=len(chosen), tokens=tokens, plan=PLAN)
    oracle = ProbabilityOracle(RouteScorer(baseline, prompt_ids, vocab=len(tokenizer)), setting) if scorer else None
    result = run_check(baseline=RouteArm(baseline, prompt_ids, tokens=tokens),
                       candidate=RouteArm(candidate, prompt_ids, tokens=tokens), prompts=len(chosen),
                       setting=setting, budget=budget, alpha=setting_alpha(suite_config.alpha), seed=suite_config.seed,
                       oracle=oracle, plan=PLAN)

    families = {name: result.family_report(name) for name in result.hypotheses}
    for name, report in families.items():
        findings.measure("p_value", name=f"{setting.name}/{name}", p_value=report["holm_adjusted"])
    summary = {
        "setting": setting.__dict__, "prompts": prompt_names, "budget": budget.as_dict(),
        "samples_used_per_arm_per_prompt": result.samples_used, "look_sizes": list(result.look_sizes),
        "stopped": result.stopped, "alpha_this_setting": result.alpha, "seed": suite_config.seed,
        "min_detectable_tv": budget.min_detectable_tv, "min_detectable_tv_note": BUDGET_NOTE,
        "score_based_families": scorer is not None,
    }
    findings.measure("distribution_budget", **summary)
    if not result.failed:
        findings.add(Finding(
            check="distribution", severity="info", route=candidate.name,
            title=(f"{setting.name}: no distribution shift found ({result.stopped}); this budget detects TV shifts "
                   f">= {budget.min_detectable_tv:.3f} per prompt with power {budget.power}"),
            details={**summary, "families": families}))
        return
    failing = [n for n, r in families.items() if r["rejected"]]
    prompts = result.evidence.prompt_report(decode=tokenizer.decode, prompt_ids=prompt_names)
    gate = families[GATE]
    title = (f"{setting.name}: sampled tokens differ from the baseline's distribution ({', '.join(failing)}); "
             f"gate p={gate['confirm_p']:.2g} confirmed on fresh samples after screening p={gate['screen_p']:.2g}"
             if gate["rejected"] else
             f"{setting.name}: sampled tokens differ from the baseline's distribution ({', '.join(failing)})")
    findings.add(Finding(
        check="distribution", severity="bug", route=candidate.name, prompt_id=prompts[0]["prompt_id"], title=title,
        details={**summary, "families": families, "failing_families": failing,
                 "gate_fresh_samples_p": result.fresh_gate_pvalue(), "prompts_by_significance": prompts}))
    lines = [f"  {n}: Holm-adjusted p={families[n]['holm_adjusted']:.3g} (screen p={families[n]['screen_p']}, "
             f"confirm p={families[n]['confirm_p']})" for n in failing]
    top = prompts[0]
    pytest.fail(
        f"candidate '{candidate.name}' does not sample from baseline '{baseline.name}''s distribution at "
        f"{setting.name} ({result.stopped}):\n" + "\n".join(lines) +
        f"\n  most significant prompt {top['prompt_id']} (p={top['pvalue']:.3g}, observed TV {top['observed_tv']:.3f}):"
        f"\n    bins      {top['bins']}\n    baseline  {top['baseline_counts']}\n    candidate {top['candidate_counts']}",
        pytrace=False)
