"""Request features under speculation: penalties, logit_bias, min_tokens, n > 1, structured output.

Each test probes the feature on the routes it needs (a refusal is "not verified: ... does not
support ...", never a pass), checks greedy parity with the baseline where both support it
(divergences classified as in the greedy check, same --greedy-policy), and checks that the
feature acted on a request built so that it must (equivalence/features.py). Prompts: the
lean prompts (one per category), a handful of short requests per feature.
"""
from __future__ import annotations

import json

import pytest

from spec_route_suite.equivalence.feature_checks import (JSON_TOKENS, N, SAMPLED_TOKENS, SHORT_TOKENS, baseline_schema,
                                                         compared, cover_feature, engine_ignores, feature_parity,
                                                         feature_pool, format_violations, ignored, json_pool,
                                                         n_rules, parity_not_verified, penalised_baseline,
                                                         plain_answer, rules_judged, supported, survives_load)
from spec_route_suite.equivalence.features import (BAN_BIAS, BOOST_BIAS, PENALTIES, Refusal, banned_effect,
                                                   boosted_effect, identical_samples_p, n_greedy_parity,
                                                   penalty_effect, probe, rare_token, with_feature)
from spec_route_suite.equivalence.rules import Violation, feature_violation, min_tokens_violations
from spec_route_suite.routes.base import Completion, Request, ResponseFormat
from spec_route_suite.reports.repro_spec import choices_repro, parity_repro, rule_repro

pytestmark = pytest.mark.check("features")


@pytest.fixture
def parity(findings, baseline, candidate, tokenizer, suite_config, calibration, eos_token_id):
    def check(feature: str, req: Request, expected: Completion, actual: Completion) -> None:
        feature_parity(findings, feature=feature, req=req, expected=expected, actual=actual, baseline=baseline,
                       candidate=candidate, tokenizer=tokenizer, suite_config=suite_config, calibration=calibration,
                       eos_token_id=eos_token_id)
    return check


@pytest.mark.parametrize("feature", sorted(PENALTIES))
def test_penalty_acts_and_matches(feature, baseline, candidate, tokenizer, suite_config, findings, parity):
    """On a pool prompt whose 40-token continuation (ignore_eos) the penalty visibly de-repeats on the
    baseline, it must do the same on the candidate (changed, repeating less), token for token."""
    cover_feature(findings, candidate, feature)
    req, penalised, expected = penalised_baseline(findings, feature=feature, pool=feature_pool(tokenizer, suite_config),
                                                  baseline=baseline, candidate=candidate)
    actual = supported(candidate, penalised, feature, findings, part=feature)
    plain = candidate.generate(req)
    problem = penalty_effect(feature=feature, plain=plain, penalised=actual, prompt_ids=req.prompt_ids)
    if problem:
        ignored(findings, route=candidate, feature=feature, problem=problem, req=penalised,
                plain_tokens=list(plain.token_ids), penalised_tokens=list(actual.token_ids),
                repro=parity_repro([penalised], candidate=candidate, baseline=baseline, expected=[expected],
                                   actual=[actual]))
    parity(feature, penalised, expected, actual)
    compared(findings, candidate, feature, requests=2, tokens=len(actual.token_ids))


@pytest.mark.parametrize("direction", ["ban", "boost"])
def test_logit_bias_acts_and_matches(direction, baseline, candidate, tokenizer, suite_config, findings, parity):
    """-100 on the baseline's first greedy token: it never appears; +100 on a rare token: it comes first."""
    cover_feature(findings, candidate, "logit_bias")
    pid, ids = feature_pool(tokenizer, suite_config)[0]
    req, plain = plain_answer(baseline, pid, ids, max_tokens=SHORT_TOKENS, tag="bias")
    if not plain.token_ids:
        pytest.skip(f"not verified: logit_bias: the baseline's answer to {pid} is empty")
    if direction == "ban":
        token = plain.token_ids[0]
        biased = with_feature(req, logit_bias=((token, BAN_BIAS),))
    else:
        token = rare_token(tokenizer, avoid=plain.token_ids, decode=tokenizer.decode)
        biased = with_feature(req, logit_bias=((token, BOOST_BIAS),), max_tokens=8)
    expected = supported(baseline, biased, "logit_bias", findings)
    actual = supported(candidate, biased, "logit_bias", findings, part="logit_bias")

    def effect(answer: Completion) -> list[Violation]:
        if answer.text_level:   # which ids it emitted is invisible: parity with the baseline's judged effect decides
            return []
        return feature_violation("logit_bias", banned_effect(banned=token, out=answer) if direction == "ban"
                                 else boosted_effect(boosted=token, out=answer))
    engine_ignores(findings, feature="logit_bias", req=biased, baseline=baseline, candidate=candidate,
                   expected=expected, theirs=effect(expected), ours=effect(actual), tokens=list(actual.token_ids))
    parity("logit_bias", biased, expected, actual)
    compared(findings, candidate, "logit_bias", requests=1, tokens=len(actual.token_ids))


def test_min_tokens_acts_and_matches(baseline, candidate, tokenizer, suite_config, findings, parity, eos_token_id):
    """min_tokens 8 past the baseline's natural EOS: no stop before it, finish_reason and usage right."""
    cover_feature(findings, candidate, "min_tokens")
    if eos_token_id is None:
        pytest.skip("not verified: min_tokens: the tokenizer has no EOS token")
    for pid, ids in feature_pool(tokenizer, suite_config):
        req, plain = plain_answer(baseline, pid, ids, max_tokens=SHORT_TOKENS, tag="min-tokens")
        if plain.finish_reason == "stop" and plain.token_ids and plain.token_ids[-1] == eos_token_id:
            break
    else:
        pytest.skip("not verified: min_tokens: no pool prompt whose baseline answer ends with EOS")
    natural = len(plain.token_ids)
    longer = with_feature(req, min_tokens=natural + 8, max_tokens=natural + 16)
    expected = supported(baseline, longer, "min_tokens", findings)
    actual = supported(candidate, longer, "min_tokens", findings, part="min_tokens")
    theirs, ours = (min_tokens_violations(out=answer, min_tokens=longer.min_tokens, max_tokens=longer.max_tokens,
                                          stop_ids={eos_token_id}) for answer in (expected, actual))
    rules_judged(findings, feature="min_tokens", req=longer, baseline=baseline, candidate=candidate, ours=ours,
                 expected=expected, theirs=theirs, natural_length=natural, tokens=list(actual.token_ids),
                 finish=actual.finish_reason)
    parity("min_tokens", longer, expected, actual)
    compared(findings, candidate, "min_tokens", requests=1, tokens=len(actual.token_ids))


def test_n_greedy_choices_match_baseline(baseline, candidate, tokenizer, suite_config, findings):
    """n=4 at temperature 0: four answers, each the baseline's (n=1) answer; usage sums the four."""
    cover_feature(findings, candidate, "n")
    pid, ids = feature_pool(tokenizer, suite_config)[0]
    req, plain = plain_answer(baseline, pid, ids, max_tokens=SHORT_TOKENS, tag="n")
    many = with_feature(req, n=N)
    answer = supported(candidate, many, "n", findings, part="n")
    choices = [list(c.token_ids) for c in answer.choices] or [list(answer.token_ids)]
    n_rules(findings, req=many, answer=answer, baseline=baseline, candidate=candidate,
            baseline_tokens=list(plain.token_ids), choices=choices)
    problem = n_greedy_parity(out=answer, expected=plain.token_ids, expected_text=plain.text)
    if problem:
        ignored(findings, route=candidate, feature="n", problem=problem, req=many,
                baseline_tokens=list(plain.token_ids), choices=choices,
                repro=choices_repro(many, candidate=candidate, baseline=baseline, mode="greedy"))
    compared(findings, candidate, "n", requests=1, choices=len(choices))


def test_n_sampled_choices_are_independent(baseline, candidate, tokenizer, suite_config, findings):
    """n=4 at T=1: four identical answers are a finding when, were the choices independent, the other
    three would repeat the first with probability p(first)^3 < alpha (p from the baseline's scoring)."""
    cover_feature(findings, candidate, "n")
    baseline.require("prompt_logprobs")
    pid, ids = feature_pool(tokenizer, suite_config)[0]
    many = Request(prompt_ids=tuple(ids), max_tokens=SAMPLED_TOKENS, temperature=1.0, ignore_eos=True, n=N,
                   request_id=f"feature-n-sampled-{pid}")
    answer = supported(candidate, many, "n", findings, part="n")
    answers = [c.token_ids for c in answer.choices] or [answer.token_ids]
    n_rules(findings, req=many, answer=answer, baseline=baseline, candidate=candidate)
    first = answers[0]
    logprob = sum(step.logprob for step in baseline.score(many.prompt_ids, first, 1)) if first else 0.0
    p_value = identical_samples_p(answers=answers, logprob_of_first=logprob)
    if p_value is not None and p_value < suite_config.alpha:
        ignored(findings, route=candidate, feature="n",
                problem=f"the {N} sampled choices are identical (p = {p_value:.2g} if independent)", req=many,
                choices=[list(a) for a in answers], p_value=p_value,
                repro=choices_repro(many, candidate=candidate, baseline=baseline))
    compared(findings, candidate, "n", requests=1, choices=len(answers))


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_structured_output_parses_matches_and_survives_load(kind, baseline, candidate, tokenizer, suite_config,
                                                            findings, parity):
    """Every stopped answer is one JSON object (matching the schema), equal to the baseline's where it
    supports the format, and the same again with 8 requests in flight (one at a time on a route that serves one
    at a time: queued behind each other they would only test its timeouts); the route is healthy after."""
    part = f"response_format {kind}"
    cover_feature(findings, candidate, part)
    pool = json_pool(tokenizer, suite_config)
    schema = baseline_schema(baseline, pool) if kind == "json_schema" else None
    fmt = ResponseFormat(kind, json.dumps(schema, sort_keys=True) if schema else "")
    requests = [Request(prompt_ids=ids, max_tokens=JSON_TOKENS, response_format=fmt,
                        request_id=f"feature-{kind}-{pid}") for pid, ids in pool]
    serial = [supported(candidate, r, "response_format", findings, part=part) for r in requests]
    expected = [probe(baseline, r, "response_format") for r in requests]
    refused = next((e for e in expected if isinstance(e, Refusal)), None)
    engine_ignores(findings, feature=kind, req=requests[0], baseline=baseline, candidate=candidate,
                   expected=refused or expected[0],
                   theirs=[] if refused else format_violations(kind, requests, expected, schema=schema),
                   ours=format_violations(kind, requests, serial, schema=schema), answers=[o.text for o in serial],
                   repro=lambda route, other: rule_repro(requests, candidate=route, baseline=other, schema=schema))
    if not any(o.finish_reason == "stop" for o in serial):
        pytest.skip(f"not verified: {kind}: no answer of '{candidate.name}' completed within {JSON_TOKENS} tokens")
    survives_load(findings, kind=kind, requests=requests, serial=serial, baseline=baseline, candidate=candidate)
    if refused is not None:   # the candidate's answers were judged above; parity with the baseline was not
        parity_not_verified(findings, part=part, refused=refused, baseline=baseline, candidate=candidate,
                            requests=len(serial) * 3)
        return
    for req, actual, answer in zip(requests, serial, expected):
        parity(kind, req, answer, actual)
    compared(findings, candidate, part, requests=len(serial) * 3)
