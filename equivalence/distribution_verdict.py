"""One sampling setting's verdict on a route pair: what its run says, as the report records it.

Why: the distribution test only collects (min_p probed, a plan, the samples) and records. What the
run's result means is judged here from values (`judge_setting`): which design decided and why, the
summary every finding carries, each sampled prompt's class outcome, the coverage rows (the setting's
and min_p's), the finding of a pass, of a failure (with its repro's sample size) or of a baseline
that breaks its own sampling parameters, and the failure's message; so it has unit tests of its own
(tests/test_distribution_verdict.py). The n-choice usage rule asks the baseline for its control
answer, so `usage_summed` records and fails itself.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from spec_route_suite.equivalence.differential import Differential, control
from spec_route_suite.equivalence.distribution import SCORING, CheckResult
from spec_route_suite.equivalence.distribution_plan import RoutePlan
from spec_route_suite.equivalence.distribution_routes import N_CHOICES, RouteArm, setting_request
from spec_route_suite.equivalence.features import Refusal, probe
from spec_route_suite.equivalence.rules import choices_violations
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.routes.base import Completion
from spec_route_suite.routes.textlevel import level_details, title_suffix
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import distribution_repro, rule_repro

REPRO_MIN_SAMPLES, REPRO_MAX_SAMPLES, REPRO_EXCESS = 100, 2000, 43.0
REPRO_SCORED_MIN, REPRO_SCORED_MULTIPLE = 400, 16
BUDGET_NOTE = ("the smallest TV shift (per prompt, worst direction) this budget detects with power 0.9; "
               "raise it with --samples-per-prompt or a batched/concurrent route")


@dataclass
class SettingVerdict:
    """What the report records of one setting, in the order the test records it: measurements and coverage
    rows (`record_evidence`), then the findings, then the failure's message ("" when the setting passed)."""

    measures: list[tuple[str, dict]] = field(default_factory=list)
    coverage: list[dict] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    failure: str = ""

    def record_evidence(self, findings) -> None:
        for kind, data in self.measures:
            findings.measure(kind, **data)
        for row in self.coverage:
            findings.cover("distribution", **row)


def judge_setting(run: RoutePlan, result: CheckResult, arm: RouteArm, *, setting: SamplingSetting, records,
                  min_p_refusal: Refusal | None, seed: int, detect_tv: float, baseline, candidate,
                  decode) -> SettingVerdict:
    """The setting's verdict from its plan, its result and the candidate's arm (`decode`: the tokenizer's, for the
    bins of a failure's prompts); nothing is sent and nothing recorded."""
    verdict = SettingVerdict()
    prompt_names = run.prompt_names
    budget = result.budget
    design = design_of(run, result)
    families = {name: result.family_report(name) for name in result.hypotheses}
    verdict.measures += [("class_outcome", row) for row in class_outcomes(result, records, prompt_names,
                                                                            setting=setting.name, route=candidate.name)]
    verdict.measures += [("p_value", dict(name=f"{setting.name}/{name}", p_value=report["holm_adjusted"]))
                         for name, report in families.items()]
    summary = {
        "setting": setting.__dict__, "prompts": prompt_names, "budget": budget.as_dict(), **design,
        "samples_used_per_arm_per_prompt": result.samples_used, "look_sizes": list(result.look_sizes),
        "stopped": result.stopped, "alpha_this_setting": result.alpha, "seed": seed,
        "min_detectable_tv": budget.min_detectable_tv, "min_detectable_tv_note": BUDGET_NOTE,
        "score_based_families": run.scorer is not None, "serial_route": run.serial, **level_details(run.text_level),
        "candidate_samples_from_n_choices": arm.pooled, "n_choices_refused": arm.n_refused,
        "samples_drawn": result.requests(), "scoring_requests": run.top.requests if run.top else 0,
    }
    verdict.measures.append(("distribution_budget", summary))
    if run.text_level:
        verdict.measures.append(("comparison", dict(check="distribution", setting=setting.name, route=candidate.name,
                                                    **level_details(True))))
    detectable, wanted = budget.min_detectable_tv, detect_tv
    verdict.coverage.append(dict(
        route=candidate.name, verified=detectable <= wanted,
        ran={"settings": 1, "prompt-settings": len(run.prompt_ids),
             "samples per arm": result.samples_used * len(run.prompt_ids)},
        could_detect=f"{setting.name}: TV >= {detectable:.3f} per prompt (power {budget.power}), "
                     f"{design['test']}: {design['why']}"
                     + (f"; {arm.pooled} samples from n={N_CHOICES} requests pooled in" if arm.pooled else ""),
        reason=(f"{setting.name}: minimum detectable TV {detectable:.3f} is above --detect-tv {wanted}"
                + (" (a serial route's capped budget)" if run.serial else ""))))
    min_p = min_p_row(setting, candidate.name, min_p_refusal, verified=detectable <= wanted,
                      ran={"prompt-settings": len(run.prompt_ids),
                           "samples per arm": result.samples_used * len(run.prompt_ids)},
                      could_detect=f"min_p / top_k applied on one side only ({setting.name}: TV >= {detectable:.3f})")
    verdict.coverage += [min_p] if min_p is not None else []
    inconsistent = result.evidence.baseline_inconsistent
    if inconsistent:
        verdict.findings.append(Finding(
            check="distribution", severity="warning", route=baseline.name,
            title=(f"{setting.name}: the baseline's own samples do not follow the requested sampling parameters "
                   f"({', '.join(sorted(inconsistent))}); score-based families not evaluated (e.g. an implicit top-k)"),
            details={**summary, "baseline_pvalues": inconsistent}))
    if not result.failed:
        verdict.findings.append(Finding(
            check="distribution", severity="info", route=candidate.name,
            title=(f"{setting.name}: no distribution shift found by the {design['test']} ({result.stopped}); this "
                   f"budget detects TV shifts >= {budget.min_detectable_tv:.3f} per prompt with power {budget.power}"
                   + title_suffix(text_level=run.text_level)),
            details={**summary, "families": families}))
        return verdict
    failing = result.standing()
    prompts = result.evidence.prompt_report(decode=decode, prompt_ids=prompt_names)
    gate = families[result.gate]
    fresh = result.fresh_gate_pvalue()
    title = (f"{setting.name}: sampled tokens differ from the baseline's distribution ({', '.join(failing)}); "
             f"gate p={fresh:.2g} on fresh samples only (drawn after the screening look, p={gate['screen_p']:.2g})"
             if gate["rejected"] and fresh is not None else
             f"{setting.name}: sampled tokens differ from the baseline's distribution ({', '.join(failing)})"
             ) + title_suffix(text_level=run.text_level)
    top = prompts[0]
    request = setting_request(run.prompt_ids[prompt_names.index(top["prompt_id"])], setting, run.tokens,
                              seed=seed if baseline.capabilities.seed and candidate.capabilities.seed else None,
                              tag=f"dist-repro-{setting.name}")
    verdict.findings.append(Finding(
        check="distribution", severity="bug", route=candidate.name, prompt_id=top["prompt_id"], title=title,
        details={**summary, "families": families, "failing_families": failing,
                 "gate_fresh_samples_p": fresh, "prompts_by_significance": prompts,
                 "repro": distribution_repro(request, candidate=candidate, baseline=baseline, tokens=run.tokens,
                                             samples=repro_samples(top),
                                             n_choices=N_CHOICES if arm.pooled else 1)}))
    lines = [f"  {n}: Holm-adjusted p={families[n]['holm_adjusted']:.3g} (screen p={families[n]['screen_p']}, "
             f"cumulative confirm p={families[n]['confirm_p']}, screening samples included"
             + (f"; the baseline's own samples: p={families[n]['baseline_control_p']:.3g}"
                if "baseline_control_p" in families[n] else "") + ")" for n in failing]
    reference = (f"    expected  {top['expected_counts']}" if "expected_counts" in top else
                 f"    baseline  {top['baseline_counts']}")
    verdict.failure = (
        f"candidate '{candidate.name}' does not sample from baseline '{baseline.name}''s distribution at "
        f"{setting.name} ({design['test']}, {result.stopped}):\n" + "\n".join(lines) +
        f"\n  most significant prompt {top['prompt_id']} (p={top['pvalue']:.3g}, observed TV {top['observed_tv']:.3f}):"
        f"\n    bins      {top['bins']}\n{reference}\n    candidate {top['candidate_counts']}")
    return verdict


def class_outcomes(result: CheckResult, records, prompt_names, *, setting: str, route: str) -> list[dict]:
    """Each sampled prompt's outcome under its class, for the report's per-class table: "shift" where the check
    failed and Benjamini-Hochberg points at the prompt, else "no shift found" (with its per-prompt p-value)."""
    by_id = {r.id: r for r in records}
    rows = []
    for row in result.evidence.prompt_report(decode=None, prompt_ids=prompt_names, limit=len(prompt_names)):
        record = by_id[row["prompt_id"]]
        rows.append(dict(check="distribution", route=route, prompt_id=record.id, source=record.source,
                         category=record.category, setting=setting, pvalue=row["pvalue"],
                         outcome="shift" if result.failed and row["flagged"] else "no shift found"))
    return rows


def design_of(run: RoutePlan, result: CheckResult) -> dict:
    """Which test decided and why (the coverage row and every finding say so)."""
    if result.superseded is not None:
        control = ", ".join(f"{n} p={p:.3g}" for n, p in result.superseded.control.items()
                            if result.superseded.rejected.get(n))
        return {"test": "two-sample test", "design": result.design,
                "why": (f"the scoring test rejected but the baseline's own samples fail it too ({control}): its scores "
                        f"do not describe its sampler, so the two-sample test decided on fresh samples"),
                "superseded_scoring": {n: result.superseded.family_report(n) for n in result.superseded.hypotheses}}
    test = ("scoring test (the candidate's samples against the baseline's exact probabilities)"
            if result.design == SCORING else "two-sample test")
    return {"test": test, "design": result.design, "why": run.why}


def repro_samples(top: dict) -> int:
    """Samples per route for the repro script's two-sample chi-square on the most significant prompt.

    After the two-sample design: the suite's own samples of that prompt, scaled so the shift it measured there (its
    statistic above its degrees of freedom) reaches REPRO_EXCESS, where a test at level 0.001 with a few cells
    rejects about 99 times in 100 (the planted faults reproduce at p < 1e-9 with this many). After the scoring
    design, whose one-sample statistic on a few dozen candidate samples has no two-sample equivalent (a sample the
    baseline gives probability 0 makes it infinite): REPRO_SCORED_MULTIPLE times the candidate's samples, at
    least REPRO_SCORED_MIN, so a shift seen once in 32 samples shows about 16 times in the repro's."""
    if "expected_counts" in top:
        seen = sum(top.get("candidate_counts") or []) or REPRO_MIN_SAMPLES
        return int(min(REPRO_MAX_SAMPLES, max(REPRO_SCORED_MIN, REPRO_SCORED_MULTIPLE * seen)))
    seen = sum(top.get("baseline_counts") or []) or REPRO_MIN_SAMPLES
    excess = max(float(top.get("statistic") or 0.0) - float(top.get("df") or 0), 1.0)
    return int(min(REPRO_MAX_SAMPLES, max(REPRO_MIN_SAMPLES, seen * REPRO_EXCESS / excess)))


def min_p_row(setting: SamplingSetting, route: str, refusal: Refusal | None, *, verified: bool, could_detect: str,
              ran: dict) -> dict | None:
    """The `distribution: min_p` row: verified with this point's budget, not supported when the candidate
    refused min_p, not verified when the baseline did (None: the point has no min_p to verify)."""
    if refusal is None and not setting.min_p:
        return None
    if refusal is not None:
        ours = refusal.route == route
        return dict(route=route, verified=False, supported=not ours, part="min_p", could_detect=could_detect,
                    reason=refusal.describe() if ours else f"the baseline refuses min_p: {refusal.describe()}")
    return dict(route=route, verified=verified, part="min_p", could_detect=could_detect, ran=ran,
                reason="" if verified else f"{setting.name}: the budget misses --detect-tv (see the distribution row)")


def usage_summed(arm: RouteArm, setting, findings, *, baseline, candidate) -> None:
    """usage.completion_tokens of an n-choice answer must be the sum over its choices. Judged against the
    baseline's answer to the first such request (equivalence/rules.py): the baseline billing it the same way is
    engine behaviour (a note, the `n_usage` part not verified); a baseline without n gives no control."""
    if not arm.usage_problems:
        return
    req, _, ours = arm.usage_problems[0]
    expected = probe(baseline, req, "n") if baseline.capabilities.n else None
    label = f"{setting.name} {req.request_id}"
    if isinstance(expected, Completion):
        differential = Differential(findings, check="distribution", baseline=baseline, candidate=candidate)
        theirs = choices_violations(expected)
        verdict = differential.judge(label=label, request=req, baseline_answer=expected, baseline_violations=theirs,
                                     candidate_violations=ours)
        differential.close()
        if not verdict.candidate:
            return
        quoted = control(label, expected, theirs)
    else:
        why = expected.describe() if isinstance(expected, Refusal) else "the baseline lacks capability n"
        quoted = control(label, None, why_none=f"no control: {why}")
    lines = [f"{r.request_id}: {'; '.join(v.detail for v in vs)}" for r, _, vs in arm.usage_problems[:8]]
    findings.add(Finding(
        check="distribution", severity="bug", route=arm.name,
        title=f"{setting.name}: n={N_CHOICES} answers report usage.completion_tokens that is not the sum over "
              f"their choices ({len(arm.usage_problems)} answers)",
        details={"diff": "; ".join(lines), "feature": "n", "answers": len(arm.usage_problems),
                 "baseline_control": quoted,
                 "repro": rule_repro([req], candidate=candidate, baseline=baseline, rule="n_usage")}))
    pytest.fail(f"{setting.name}: usage not summed over the n={N_CHOICES} choices on '{arm.name}': "
                f"{lines[0]}", pytrace=False)
