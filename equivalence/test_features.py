"""Request features under speculation: penalties, logit_bias, min_tokens, n > 1, structured output.

Each test probes the feature on the routes it needs (a refusal is "not verified: ... does not
support ...", never a pass), checks greedy parity with the baseline where both support it
(divergences classified as in the greedy check, same --greedy-policy), and checks that the
feature acted on a request built so that it must (equivalence/features.py). Prompts: the
lean prompts (one per category), a handful of short requests per feature.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.equivalence.divergence import UNCLASSIFIED, Classification, classify_divergence
from spec_route_suite.equivalence.differential import Differential, control
from spec_route_suite.equivalence.features import (BAN_BIAS, BOOST_BIAS, PENALTIES, FeatureScorer, Refusal,
                                                   banned_effect, boosted_effect, classifiable, identical_samples_p,
                                                   json_answer_problem, n_greedy_parity, penalty_effect, probe,
                                                   rare_token, schema_of, with_feature)
from spec_route_suite.equivalence.rules import (Violation, choices_violations, feature_violation, format_violation,
                                              min_tokens_violations)
from spec_route_suite.equivalence.greedy import compare_greedy
from spec_route_suite.prompts.encode import encode_record
from spec_route_suite.prompts.prompt_set import prompt_pool, prompt_set
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Completion, Request, ResponseFormat
from spec_route_suite.routes.textlevel import aligned, describe, title_suffix
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import ANSWER_FIELDS, choices_repro, load_repro, parity_repro, rule_repro

pytestmark = pytest.mark.check("features")

POOL = 2               # lean prompts a feature may choose from
PENALTY_TOKENS = 40    # with ignore_eos: long enough that the model repeats itself
SHORT_TOKENS = 24
N = 4
SAMPLED_TOKENS = 24
JSON_TOKENS = 48
JSON_CONCURRENCY = 8
# what each feature's row in the coverage table could detect (reports/coverage.py, one row per feature)
DETECTS = {
    "repetition_penalty": "penalty dropped or applied to the bonus token only (answer unchanged or repeating as "
                          "much); greedy divergence under the penalty",
    "frequency_penalty": "penalty dropped or applied to the bonus token only; greedy divergence under the penalty",
    "presence_penalty": "penalty dropped or applied to the bonus token only; greedy divergence under the penalty",
    "logit_bias": "bias skipped at draft positions (a -100 token appears, a +100 token does not lead); greedy "
                  "divergence under the bias",
    "min_tokens": "EOS inside an accepted block before min_tokens; wrong finish_reason or usage; greedy divergence",
    "n": "n=4 greedy choices unlike the baseline's answer; sampled choices copying one random stream; usage not "
         "summed over the choices",
    "response_format json_object": "answers that are not one JSON object; greedy divergence; answers changing or "
                                   "the engine dying with 8 in flight",
    "response_format json_schema": "answers not matching the schema; greedy divergence; answers changing or the "
                                   "engine dying with 8 in flight",
}


def _pool(tokenizer, suite_config) -> list[tuple[str, tuple[int, ...]]]:
    prompts = pick_lean(prompt_pool(suite_config), POOL)
    return [(p.id, encode_record(tokenizer, p)) for p in prompts]


def _plain(route, prompt_id: str, prompt_ids, *, max_tokens: int, tag: str, **kw) -> tuple[Request, Completion]:
    req = Request(prompt_ids=tuple(prompt_ids), max_tokens=max_tokens, temperature=0.0,
                  request_id=f"feature-{tag}-{prompt_id}", **kw)
    return req, route.generate(req)


def _covers(findings, candidate, part: str) -> None:
    """This test's row of the coverage table (features: PART on the candidate). Its outcome decides the
    status: passed -> verified, failed -> failed, skipped -> not verified, unless the candidate refused
    the feature (`_not_supported`: not supported by this route)."""
    findings.cover("features", candidate.name, verified=True, part=part, could_detect=DETECTS[part])


def _compared(findings, candidate, part: str, **counts: int) -> None:
    """What the test compared once it got through (requests, tokens, choices): the evidence behind "verified"."""
    findings.cover("features", candidate.name, verified=True, part=part, could_detect=DETECTS[part], ran=counts)


def _engine_ignores(findings, *, feature: str, req: Request, baseline, candidate, expected, ours, theirs,
                    **evidence) -> None:
    """The feature judged on both routes' answers to the same request: ignored alike is engine behaviour (a note,
    the test not verified), by one route only a finding (_rules_judged fails the test)."""
    _rules_judged(findings, feature=feature, req=req, baseline=baseline, candidate=candidate, ours=ours,
                  expected=expected, theirs=theirs, **evidence)
    if ours or theirs:
        pytest.skip(f"not verified: the engine itself does not honour {feature} here (the baseline does the same "
                    f"on the same request): {(ours or theirs)[0].detail}"[:400])


def _supported(route, req: Request, feature: str, findings, *, part: str | None = None) -> Completion:
    """The route's answer to a feature request, or skip as not verified when it refuses the feature."""
    answer = probe(route, req, feature)
    if isinstance(answer, Refusal):
        _not_supported(findings, answer, part=part)
    findings.measure("feature_support", feature=feature, route=route.name, supported=True)
    return answer


def _not_supported(findings, refusal: Refusal, *, part: str | None = None) -> None:
    """Skip as not verified; when `part` is given the refusing route is the one under test, and its row
    of the coverage table says "not supported by this route" (listed, never a pass)."""
    findings.measure("feature_support", feature=refusal.feature, route=refusal.route, supported=False,
                     why=refusal.why)
    if part is not None:
        findings.cover("features", refusal.route, verified=False, supported=False, part=part,
                       could_detect=DETECTS[part], reason=refusal.describe())
    pytest.skip(f"not verified: {refusal.describe()}")


def _ignored(findings, *, route, feature: str, problem: str, req: Request, **evidence) -> None:
    """A route accepted a feature and did not apply it as it must: a finding, and the test fails."""
    findings.add(_ignored_finding(route=route, feature=feature, problem=problem, req=req, **evidence))
    pytest.fail(f"{feature} on '{route.name}': {problem}", pytrace=False)


def _ignored_finding(*, route, feature: str, problem: str, req: Request, **evidence) -> Finding:
    return Finding(
        check="features", severity="bug", route=route.name,
        title=f"{feature}: route '{route.name}' accepts the feature but it did not act: {problem}"[:300],
        details={"diff": problem, "feature": feature, "prompt_ids": list(req.prompt_ids),
                 "request": {k: v for k, v in dataclasses.asdict(req).items() if k != "prompt_ids"}, **evidence})


def _rules_judged(findings, *, feature: str, req: Request, baseline, candidate, ours: list[Violation],
                  expected: Completion | Refusal | None, theirs: list[Violation] = (), repro=None, **evidence) -> None:
    """The serving rules of a feature answer, judged against the baseline's answer to the same request: what
    both break alike is an engine note; what the candidate alone breaks (or the baseline alone) a finding, with
    the other route's answer quoted; the test fails once after both are recorded. With no baseline answer
    (it refused the feature) the candidate is judged on its own and the finding says so. `repro(route, other)`
    words the repro of a route's finding (default: parity with the other route on `req`; None: no repro)."""
    if repro is None:
        repro = lambda route, other: parity_repro([req], candidate=route, baseline=other,  # noqa: E731
                                                   fields=ANSWER_FIELDS)
    if not ours and not theirs:
        return
    if not isinstance(expected, Completion):
        why = expected.describe() if isinstance(expected, Refusal) else "the baseline was not asked"
        verdict_candidate, verdict_baseline = ours, []
        evidence["baseline_control"] = control(req.request_id, None, why_none=f"no control: {why}")
    else:
        differential = Differential(findings, check="features", baseline=baseline, candidate=candidate)
        verdict = differential.judge(label=req.request_id, request=req, baseline_answer=expected,
                                     baseline_violations=theirs, candidate_violations=ours)
        differential.close()
        verdict_candidate, verdict_baseline = list(verdict.candidate), list(verdict.baseline)
        evidence["baseline_control"] = control(req.request_id, expected, theirs)
    failures = []
    for route, other, broken in ((candidate, baseline, verdict_candidate), (baseline, candidate, verdict_baseline)):
        if broken:
            problem = "; ".join(v.detail for v in broken)
            failures.append(f"{feature} on '{route.name}': {problem}")
            block = repro(route, other) if repro else None
            findings.add(_ignored_finding(route=route, feature=feature, problem=problem, req=req, **evidence,
                                          **({"repro": block} if block else {})))
    if failures:
        pytest.fail("; ".join(failures), pytrace=False)


def _parity(findings, *, feature: str, req: Request, expected: Completion, actual: Completion, baseline, candidate,
            tokenizer, suite_config, calibration, eos_token_id) -> None:
    """Greedy parity under the feature: the greedy check's comparison, classification and policy (text-level,
    both sides re-tokenized from their text, when the server gives no ids)."""
    expected, actual = aligned(expected, actual, tokenizer)
    divergence = compare_greedy(baseline=expected, candidate=actual, decode=tokenizer.decode)
    if divergence is None:
        return
    tau = calibration.get().tau
    if classifiable(req):
        verdict = classify_divergence(
            baseline=FeatureScorer(baseline, req, eos_token_id=eos_token_id), prompt_ids=req.prompt_ids,
            divergence=divergence, baseline_completion=expected, candidate_completion=actual,
            max_tokens=req.max_tokens, tau=tau, eos_token_id=eos_token_id, decode=tokenizer.decode)
    else:
        verdict = Classification(verdict=UNCLASSIFIED, method="none", tau=tau,
                                 reason=f"{feature} rescales logits, which teacher-forced logprobs cannot "
                                        "reproduce: the divergence cannot be classified and counts as a bug")
    excused = suite_config.greedy_policy == "classify" and verdict.is_near_tie
    findings.add(Finding(
        check="features", severity="near-tie" if excused else "bug", route=candidate.name,
        title=f"{feature}: greedy output with the feature diverges from the baseline at token "
              f"{divergence.position} ({verdict.verdict})" + title_suffix(expected, actual),
        details={"diff": divergence.diff() + f"\n  classification: {verdict.summary()}", "feature": feature,
                 **describe(expected, actual),
                 "divergence": dataclasses.asdict(divergence), "classification": verdict.to_details(),
                 "policy": suite_config.greedy_policy, "prompt_ids": list(req.prompt_ids),
                 "max_tokens": req.max_tokens, "baseline_tokens": list(expected.token_ids),
                 "candidate_tokens": list(actual.token_ids),
                 "repro": parity_repro([req], candidate=candidate, baseline=baseline, expected=[expected],
                                       actual=[actual])}))
    if not excused:
        pytest.fail(f"{feature}: candidate '{candidate.name}' diverges from baseline '{baseline.name}' at token "
                    f"{divergence.position}\n{divergence.diff()}\n  classification: {verdict.summary()}",
                    pytrace=False)


@pytest.fixture
def parity(findings, baseline, candidate, tokenizer, suite_config, calibration, eos_token_id):
    def check(feature: str, req: Request, expected: Completion, actual: Completion) -> None:
        _parity(findings, feature=feature, req=req, expected=expected, actual=actual, baseline=baseline,
                candidate=candidate, tokenizer=tokenizer, suite_config=suite_config, calibration=calibration,
                eos_token_id=eos_token_id)
    return check


@pytest.mark.parametrize("feature", sorted(PENALTIES))
def test_penalty_acts_and_matches(feature, baseline, candidate, tokenizer, suite_config, findings, parity):
    """On a pool prompt whose 40-token continuation (ignore_eos) the penalty visibly de-repeats on the
    baseline, it must do the same on the candidate (changed, repeating less), token for token."""
    _covers(findings, candidate, feature)
    problems, unchanged = [], 0
    for pid, ids in _pool(tokenizer, suite_config):
        req, base_plain = _plain(baseline, pid, ids, max_tokens=PENALTY_TOKENS, tag="penalty", ignore_eos=True)
        penalised = with_feature(req, **{feature: PENALTIES[feature]})
        expected = probe(baseline, penalised, feature)
        if isinstance(expected, Refusal):
            _not_supported(findings, expected)
        problem = penalty_effect(feature=feature, plain=base_plain, penalised=expected, prompt_ids=req.prompt_ids)
        if problem is None:
            break
        problems.append(f"{pid}: {problem}")
        unchanged += expected.token_ids == base_plain.token_ids
    else:
        if unchanged == len(problems):   # accepted everywhere, acted nowhere: does the candidate do the same?
            actual = _supported(candidate, penalised, feature, findings, part=feature)
            ignored = actual.token_ids == candidate.generate(req).token_ids
            _engine_ignores(findings, feature=feature, req=penalised, baseline=baseline, candidate=candidate,
                            expected=expected, theirs=feature_violation(feature, "; ".join(problems)),
                            ours=feature_violation(feature, "left the output unchanged" if ignored else None))
        pytest.skip(f"not verified: {feature}: on no pool prompt did it reduce the baseline's repetition "
                    f"({'; '.join(problems)})")
    findings.measure("feature_support", feature=feature, route=baseline.name, supported=True)
    actual = _supported(candidate, penalised, feature, findings, part=feature)
    plain = candidate.generate(req)
    problem = penalty_effect(feature=feature, plain=plain, penalised=actual, prompt_ids=req.prompt_ids)
    if problem:
        _ignored(findings, route=candidate, feature=feature, problem=problem, req=penalised,
                 plain_tokens=list(plain.token_ids), penalised_tokens=list(actual.token_ids),
                 repro=parity_repro([penalised], candidate=candidate, baseline=baseline, expected=[expected],
                                    actual=[actual]))
    parity(feature, penalised, expected, actual)
    _compared(findings, candidate, feature, requests=2, tokens=len(actual.token_ids))


@pytest.mark.parametrize("direction", ["ban", "boost"])
def test_logit_bias_acts_and_matches(direction, baseline, candidate, tokenizer, suite_config, findings, parity):
    """-100 on the baseline's first greedy token: it never appears; +100 on a rare token: it comes first."""
    _covers(findings, candidate, "logit_bias")
    pid, ids = _pool(tokenizer, suite_config)[0]
    req, plain = _plain(baseline, pid, ids, max_tokens=SHORT_TOKENS, tag="bias")
    if not plain.token_ids:
        pytest.skip(f"not verified: logit_bias: the baseline's answer to {pid} is empty")
    if direction == "ban":
        token = plain.token_ids[0]
        biased = with_feature(req, logit_bias=((token, BAN_BIAS),))
    else:
        token = rare_token(tokenizer, avoid=plain.token_ids, decode=tokenizer.decode)
        biased = with_feature(req, logit_bias=((token, BOOST_BIAS),), max_tokens=8)
    expected = _supported(baseline, biased, "logit_bias", findings)
    actual = _supported(candidate, biased, "logit_bias", findings, part="logit_bias")

    def effect(answer: Completion) -> list[Violation]:
        if answer.text_level:   # which ids it emitted is invisible: parity with the baseline's judged effect decides
            return []
        return feature_violation("logit_bias", banned_effect(banned=token, out=answer) if direction == "ban"
                                 else boosted_effect(boosted=token, out=answer))
    _engine_ignores(findings, feature="logit_bias", req=biased, baseline=baseline, candidate=candidate,
                    expected=expected, theirs=effect(expected), ours=effect(actual), tokens=list(actual.token_ids))
    parity("logit_bias", biased, expected, actual)
    _compared(findings, candidate, "logit_bias", requests=1, tokens=len(actual.token_ids))


def test_min_tokens_acts_and_matches(baseline, candidate, tokenizer, suite_config, findings, parity, eos_token_id):
    """min_tokens 8 past the baseline's natural EOS: no stop before it, finish_reason and usage right."""
    _covers(findings, candidate, "min_tokens")
    if eos_token_id is None:
        pytest.skip("not verified: min_tokens: the tokenizer has no EOS token")
    for pid, ids in _pool(tokenizer, suite_config):
        req, plain = _plain(baseline, pid, ids, max_tokens=SHORT_TOKENS, tag="min-tokens")
        if plain.finish_reason == "stop" and plain.token_ids and plain.token_ids[-1] == eos_token_id:
            break
    else:
        pytest.skip("not verified: min_tokens: no pool prompt whose baseline answer ends with EOS")
    natural = len(plain.token_ids)
    longer = with_feature(req, min_tokens=natural + 8, max_tokens=natural + 16)
    expected = _supported(baseline, longer, "min_tokens", findings)
    actual = _supported(candidate, longer, "min_tokens", findings, part="min_tokens")
    theirs, ours = (min_tokens_violations(out=answer, min_tokens=longer.min_tokens, max_tokens=longer.max_tokens,
                                          stop_ids={eos_token_id}) for answer in (expected, actual))
    _rules_judged(findings, feature="min_tokens", req=longer, baseline=baseline, candidate=candidate, ours=ours,
                  expected=expected, theirs=theirs, natural_length=natural, tokens=list(actual.token_ids),
                  finish=actual.finish_reason)
    parity("min_tokens", longer, expected, actual)
    _compared(findings, candidate, "min_tokens", requests=1, tokens=len(actual.token_ids))


def test_n_greedy_choices_match_baseline(baseline, candidate, tokenizer, suite_config, findings):
    """n=4 at temperature 0: four answers, each the baseline's (n=1) answer; usage sums the four."""
    _covers(findings, candidate, "n")
    pid, ids = _pool(tokenizer, suite_config)[0]
    req, plain = _plain(baseline, pid, ids, max_tokens=SHORT_TOKENS, tag="n")
    many = with_feature(req, n=N)
    answer = _supported(candidate, many, "n", findings, part="n")
    choices = [list(c.token_ids) for c in answer.choices] or [list(answer.token_ids)]
    _n_rules(findings, req=many, answer=answer, baseline=baseline, candidate=candidate,
             baseline_tokens=list(plain.token_ids), choices=choices)
    problem = n_greedy_parity(out=answer, expected=plain.token_ids, expected_text=plain.text)
    if problem:
        _ignored(findings, route=candidate, feature="n", problem=problem, req=many,
                 baseline_tokens=list(plain.token_ids), choices=choices,
                 repro=choices_repro(many, candidate=candidate, baseline=baseline, mode="greedy"))
    _compared(findings, candidate, "n", requests=1, choices=len(choices))


def _n_rules(findings, *, req: Request, answer: Completion, baseline, candidate, **evidence) -> None:
    """n choices and their summed usage, judged against the baseline's answer to the same n request (asked only
    when the candidate breaks a rule; a baseline without n gives no control)."""
    ours = choices_violations(answer, n=req.n)
    if not ours:
        return
    expected = probe(baseline, req, "n") if baseline.capabilities.n else Refusal(
        route=baseline.name, feature="n", why="the baseline lacks capability n")
    theirs = choices_violations(expected, n=req.n) if isinstance(expected, Completion) else []
    _rules_judged(findings, feature="n", req=req, baseline=baseline, candidate=candidate, ours=ours,
                  expected=expected, theirs=theirs, **evidence,
                  repro=lambda route, other: rule_repro([req], candidate=route, baseline=other, rule="n_usage"))


def test_n_sampled_choices_are_independent(baseline, candidate, tokenizer, suite_config, findings):
    """n=4 at T=1: four identical answers are a finding when, were the choices independent, the other
    three would repeat the first with probability p(first)^3 < alpha (p from the baseline's scoring)."""
    _covers(findings, candidate, "n")
    baseline.require("prompt_logprobs")
    pid, ids = _pool(tokenizer, suite_config)[0]
    many = Request(prompt_ids=tuple(ids), max_tokens=SAMPLED_TOKENS, temperature=1.0, ignore_eos=True, n=N,
                   request_id=f"feature-n-sampled-{pid}")
    answer = _supported(candidate, many, "n", findings, part="n")
    answers = [c.token_ids for c in answer.choices] or [answer.token_ids]
    _n_rules(findings, req=many, answer=answer, baseline=baseline, candidate=candidate)
    first = answers[0]
    logprob = sum(step.logprob for step in baseline.score(many.prompt_ids, first, 1)) if first else 0.0
    p_value = identical_samples_p(answers=answers, logprob_of_first=logprob)
    if p_value is not None and p_value < suite_config.alpha:
        _ignored(findings, route=candidate, feature="n",
                 problem=f"the {N} sampled choices are identical (p = {p_value:.2g} if independent)", req=many,
                 choices=[list(a) for a in answers], p_value=p_value,
                 repro=choices_repro(many, candidate=candidate, baseline=baseline))
    _compared(findings, candidate, "n", requests=1, choices=len(answers))


def _json_pool(tokenizer, suite_config) -> list[tuple[str, tuple[int, ...]]]:
    """JSON-category prompts (answers that complete) and lean prompts of other kinds (where the
    grammar must steer the model away from its own answer). A user's prompt set without a `json` category
    borrows our two fixture JSON prompts, so the structured-output check keeps prompts that can complete."""
    prompts = prompt_set(suite_config)
    everything = list(prompts.pool)
    json_prompts = [p for p in everything if p.category == "json"][:2]
    if not json_prompts and prompts.user:
        json_prompts = load_prompt_set(("json",))[:2]
    others = [p for p in pick_lean(everything, POOL + 1) if p.category != "json"][:POOL]
    return [(p.id, encode_record(tokenizer, p)) for p in json_prompts + others]


@pytest.mark.parametrize("kind", ["json_object", "json_schema"])
def test_structured_output_parses_matches_and_survives_load(kind, baseline, candidate, tokenizer, suite_config,
                                                            findings, parity):
    """Every stopped answer is one JSON object (matching the schema), equal to the baseline's where it
    supports the format, and the same again with 8 requests in flight (one at a time on a route that serves one
    at a time: queued behind each other they would only test its timeouts); the route is healthy after."""
    _covers(findings, candidate, f"response_format {kind}")
    schema = None
    pool = _json_pool(tokenizer, suite_config)
    if kind == "json_schema":
        sample = next((json.loads(c.text) for c in (_plain(baseline, pid, ids, max_tokens=JSON_TOKENS, tag="json")[1]
                                                     for pid, ids in pool) if _is_object(c.text)), None)
        if sample is None:
            pytest.skip("not verified: json_schema: no baseline answer in the pool is a JSON object to take a schema from")
        schema = schema_of(sample)
    fmt = ResponseFormat(kind, json.dumps(schema, sort_keys=True) if schema else "")
    requests = [Request(prompt_ids=ids, max_tokens=JSON_TOKENS, response_format=fmt,
                        request_id=f"feature-{kind}-{pid}") for pid, ids in pool]
    part = f"response_format {kind}"
    serial = [_supported(candidate, r, "response_format", findings, part=part) for r in requests]
    expected = [probe(baseline, r, "response_format") for r in requests]
    refused = next((e for e in expected if isinstance(e, Refusal)), None)

    def violations(answers) -> list[Violation]:
        return format_violation(kind, [f"{r.request_id}: {p}" for r, out in zip(requests, answers)
                                       if (p := json_answer_problem(out, schema=schema))])
    _engine_ignores(findings, feature=kind, req=requests[0], baseline=baseline, candidate=candidate,
                    expected=refused or expected[0], theirs=[] if refused else violations(expected),
                    ours=violations(serial), answers=[o.text for o in serial],
                    repro=lambda route, other: rule_repro(requests, candidate=route, baseline=other, schema=schema))
    if not any(o.finish_reason == "stop" for o in serial):
        pytest.skip(f"not verified: {kind}: no answer of '{candidate.name}' completed within {JSON_TOKENS} tokens")
    # a route that serves one request at a time would only queue them: each request keeps its own deadline there
    in_flight = JSON_CONCURRENCY if candidate.capabilities.concurrency else 1
    loaded = candidate.generate_concurrently(requests * 2, concurrency=in_flight)
    broken = [f"{r.request_id}: {o if isinstance(o, Exception) else 'differs from its serial answer'}"
              for r, o, s in zip(requests * 2, loaded, serial * 2)
              if isinstance(o, Exception) or o.token_ids != s.token_ids]
    if broken or not candidate.health():
        _ignored(findings, route=candidate, feature=kind, req=requests[0],
                 problem=f"at concurrency {in_flight}: " + ("; ".join(broken)[:600] or "route unhealthy after"),
                 repro=load_repro([(r, 0, None) for r in requests * 2], candidate=candidate, baseline=baseline,
                                  concurrency=in_flight))
    if refused is not None:   # the candidate's answers were judged above; parity with the baseline was not
        findings.measure("feature_support", feature="response_format", route=baseline.name, supported=False,
                         why=refused.why)
        findings.cover("features", candidate.name, verified=False, part=part, could_detect=DETECTS[part],
                       ran={"requests": len(serial) * 3},
                       reason=f"parity with the baseline not verified: {refused.describe()}")
        return
    for req, actual, answer in zip(requests, serial, expected):
        parity(kind, req, answer, actual)
    _compared(findings, candidate, part, requests=len(serial) * 3)


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
