"""One boundary sweep judged: run on both routes, coverage recorded, what both routes break alike noted as engine
behaviour, what the candidate alone breaks reported with the baseline's answer to the same case as its control.

Why a module: the boundary sweeps (equivalence/test_boundaries.py) and the stop-string sweeps
(equivalence/test_stop_strings.py) judge alike; a test module importing another test module loaded it under two
names. Environment: none.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.boundaries import run_sweep, violations
from spec_route_suite.equivalence.differential import Differential, control
from spec_route_suite.routes.textlevel import level_details, title_suffix
from spec_route_suite.reports.findings import DIVERGES, Finding
from spec_route_suite.reports.repro_spec import ANSWER_FIELDS, parity_repro

SHOWN = 12
REPRO_ATTEMPTS = 20   # a rule broken on 20% of requests reproduces within 20 resends 99 times in 100


def judge_sweep(variant, source, cases, how, depth, *, baseline, candidate, tokenizer, findings,
                check: str = "boundary", counts: dict | None = None) -> None:
    """Run one sweep on both routes, record coverage, note what both routes break alike (engine behaviour)
    and report what the candidate alone breaks, with the baseline's answer to the same case as its control."""
    shape = "chat " if cases and cases[0].request.chat else ""
    differential = Differential(findings, check=check, baseline=baseline, candidate=candidate, prompt_id=source.id)
    result = run_sweep(baseline=baseline, candidate=candidate, cases=cases, decode=tokenizer.decode,
                       differential=differential)
    differential.close()
    problems, level = result.problems, level_details(result.text_level)
    if result.text_level:
        findings.measure("comparison", check=check, variant=variant, prompt_id=source.id, route=candidate.name,
                         **level)
    # `counts` name what the sweep exists for (stop-string requests): none sent is vacuous, whatever else ran
    empty = [name for name, n in {"cases": result.cases, **(counts or {})}.items() if not n]
    vacuous = f"vacuous: 0 {', 0 '.join(empty)} ({how})" if empty else ""
    findings.cover(check, candidate.name, verified=depth.known and not empty,
                   ran={"chat boundary cases" if shape else "cases": result.cases, **(counts or {})},
                   could_detect=f"{shape}tokens past a stop/EOS/max_tokens, wrong finish_reason (k={depth.k}, "
                                f"{depth.source})" + (" (text-level)" if result.text_level else ""),
                   reason="; ".join(r for r in (depth.gap(), vacuous) if r))
    if result.baseline_problems:
        findings.add(Finding(
            check=check, severity="bug", route=baseline.name, prompt_id=source.id,
            title=(f"the baseline '{baseline.name}' itself breaks {variant} boundary rules on prompt {source.id} "
                   f"(a finding about the baseline, not the candidate): {result.baseline_problems[0][:160]}"),
            details={"problems": result.baseline_problems[:100], "how": how}))
    if not problems:
        return
    case, expected, actual = result.first_bad
    shown = "\n".join(problems[:SHOWN]) + (f"\n... {len(problems) - SHOWN} more" if len(problems) > SHOWN else "")
    findings.add(Finding(
        check=check, severity="bug", route=candidate.name, prompt_id=source.id,
        title=(f"{shape}{variant} boundary violations on prompt {source.id} (k={depth.k}; first: {case.label})"
               + title_suffix(text_level=result.text_level)),
        details={"diff": shown, "how": how, "speculation_depth": depth.k, "depth_source": depth.source, **level,
                 **({} if result.rules_broken else {"cause": DIVERGES}),   # no rule broken: the answers only differ
                 "first_case": {"prompt_ids": list(case.request.prompt_ids), "max_tokens": case.request.max_tokens,
                                "stop": list(case.request.stop), "stop_token_ids": list(case.request.stop_token_ids),
                                "ignore_eos": case.request.ignore_eos,
                                **({"messages": [list(m) for m in case.request.messages]} if shape else {})},
                 "baseline_tokens": list(expected.token_ids), "candidate_tokens": list(actual.token_ids),
                 "baseline_control": control(case.label, expected, violations(case=case, completion=expected,
                                                                              decode=tokenizer.decode)),
                 "problems": problems[:100], "both_routes": result.shared[:20],
                 # an engine may break a rule on some requests only (a per-request fault, a race): the script
                 # resends the case up to REPRO_ATTEMPTS times and stops at the first reproduction
                 "repro": parity_repro([case.request], candidate=candidate, baseline=baseline, fields=ANSWER_FIELDS,
                                       expected=[expected], actual=[actual], attempts=REPRO_ATTEMPTS)}))
    pytest.fail(f"{shape}{variant} sweep on prompt {source.id} (baseline '{baseline.name}' vs candidate "
                f"'{candidate.name}', k={depth.k}; {how}){title_suffix(text_level=result.text_level)}:\n{shown}",
                pytrace=False)
