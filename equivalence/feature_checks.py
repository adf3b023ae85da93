"""How the feature checks (equivalence/test_features.py) ask, judge and record: one place for all of them.

Why: every feature test takes the same steps around its own effect judge (equivalence/features.py):
probe the feature and skip as not verified when a route refuses it (the coverage row says "not
supported by this route"), judge the serving rules against the baseline's answer to the same request
(ignored alike: an engine note; by one route only: a finding), greedy parity under the feature with the
greedy check's classification and policy, and the coverage rows that say what was compared. The
penalty test's search for a prompt the penalty acts on, the structured-output test's schema, format
rules and load replay live here too, so the tests read as "collect evidence, judge, record, fail if bug";
the pure parts (a finding's wording, format violations, what changed under load) have unit tests in
tests/test_features.py.
Environment: none.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.equivalence.divergence import UNCLASSIFIED, Classification, classify_divergence
from spec_route_suite.equivalence.differential import Differential, control
from spec_route_suite.equivalence.features import (PENALTIES, FeatureScorer, Refusal, classifiable,
                                                   json_answer_problem, penalty_effect, probe, schema_of,
                                                   with_feature)
from spec_route_suite.equivalence.rules import Violation, choices_violations, feature_violation, format_violation
from spec_route_suite.equivalence.greedy import compare_greedy
from spec_route_suite.prompts.encode import encode_record
from spec_route_suite.prompts.prompt_set import prompt_pool, prompt_set
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.textlevel import aligned, describe, title_suffix
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import ANSWER_FIELDS, load_repro, parity_repro, rule_repro

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


def feature_pool(tokenizer, suite_config) -> list[tuple[str, tuple[int, ...]]]:
    prompts = pick_lean(prompt_pool(suite_config), POOL)
    return [(p.id, encode_record(tokenizer, p)) for p in prompts]


def plain_answer(route, prompt_id: str, prompt_ids, *, max_tokens: int, tag: str,
                 **kw) -> tuple[Request, Completion]:
    req = Request(prompt_ids=tuple(prompt_ids), max_tokens=max_tokens, temperature=0.0,
                  request_id=f"feature-{tag}-{prompt_id}", **kw)
    return req, route.generate(req)


def cover_feature(findings, candidate, part: str) -> None:
    """This test's row of the coverage table (features: PART on the candidate). Its outcome decides the
    status: passed -> verified, failed -> failed, skipped -> not verified, unless the candidate refused
    the feature (`not_supported`: not supported by this route)."""
    findings.cover("features", candidate.name, verified=True, part=part, could_detect=DETECTS[part])


def compared(findings, candidate, part: str, **counts: int) -> None:
    """What the test compared once it got through (requests, tokens, choices): the evidence behind "verified"."""
    findings.cover("features", candidate.name, verified=True, part=part, could_detect=DETECTS[part], ran=counts)


def engine_ignores(findings, *, feature: str, req: Request, baseline, candidate, expected, ours, theirs,
                   **evidence) -> None:
    """The feature judged on both routes' answers to the same request: ignored alike is engine behaviour (a note,
    the test not verified), by one route only a finding (rules_judged fails the test)."""
    rules_judged(findings, feature=feature, req=req, baseline=baseline, candidate=candidate, ours=ours,
                 expected=expected, theirs=theirs, **evidence)
    if ours or theirs:
        pytest.skip(f"not verified: the engine itself does not honour {feature} here (the baseline does the same "
                    f"on the same request): {(ours or theirs)[0].detail}"[:400])


def supported(route, req: Request, feature: str, findings, *, part: str | None = None) -> Completion:
    """The route's answer to a feature request, or skip as not verified when it refuses the feature."""
    answer = probe(route, req, feature)
    if isinstance(answer, Refusal):
        not_supported(findings, answer, part=part)
    findings.measure("feature_support", feature=feature, route=route.name, supported=True)
    return answer


def not_supported(findings, refusal: Refusal, *, part: str | None = None) -> None:
    """Skip as not verified; when `part` is given the refusing route is the one under test, and its row
    of the coverage table says "not supported by this route" (listed, never a pass)."""
    findings.measure("feature_support", feature=refusal.feature, route=refusal.route, supported=False,
                     why=refusal.why)
    if part is not None:
        findings.cover("features", refusal.route, verified=False, supported=False, part=part,
                       could_detect=DETECTS[part], reason=refusal.describe())
    pytest.skip(f"not verified: {refusal.describe()}")


def ignored(findings, *, route, feature: str, problem: str, req: Request, **evidence) -> None:
    """A route accepted a feature and did not apply it as it must: a finding, and the test fails."""
    findings.add(ignored_finding(route=route, feature=feature, problem=problem, req=req, **evidence))
    pytest.fail(f"{feature} on '{route.name}': {problem}", pytrace=False)


def ignored_finding(*, route, feature: str, problem: str, req: Request, **evidence) -> Finding:
    return Finding(
        check="features", severity="bug", route=route.name,
        title=f"{feature}: route '{route.name}' accepts the feature but it did not act: {problem}"[:300],
        details={"diff": problem, "feature": feature, "prompt_ids": list(req.prompt_ids),
                 "request": {k: v for k, v in dataclasses.asdict(req).items() if k != "prompt_ids"}, **evidence})


def rules_judged(findings, *, feature: str, req: Request, baseline, candidate, ours: list[Violation],
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
            findings.add(ignored_finding(route=route, feature=feature, problem=problem, req=req, **evidence,
                                         **({"repro": block} if block else {})))
    if failures:
        pytest.fail("; ".join(failures), pytrace=False)


def feature_parity(findings, *, feature: str, req: Request, expected: Completion, actual: Completion, baseline,
                   candidate, tokenizer, suite_config, calibration, eos_token_id) -> None:
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


# ---- penalties ----
def penalised_baseline(findings, *, feature: str, pool, baseline, candidate) -> tuple[Request, Request, Completion]:
    """The first pool prompt whose 40-token continuation (ignore_eos) the penalty visibly de-repeats on the
    baseline: its plain request, the penalised request and the baseline's penalised answer. On no pool prompt:
    skip as not verified, after judging the candidate like the baseline when the baseline accepted the penalty
    everywhere and left every answer unchanged (engine_ignores)."""
    problems, unchanged = [], 0
    for pid, ids in pool:
        req, base_plain = plain_answer(baseline, pid, ids, max_tokens=PENALTY_TOKENS, tag="penalty", ignore_eos=True)
        penalised = with_feature(req, **{feature: PENALTIES[feature]})
        expected = probe(baseline, penalised, feature)
        if isinstance(expected, Refusal):
            not_supported(findings, expected)
        problem = penalty_effect(feature=feature, plain=base_plain, penalised=expected, prompt_ids=req.prompt_ids)
        if problem is None:
            break
        problems.append(f"{pid}: {problem}")
        unchanged += expected.token_ids == base_plain.token_ids
    else:
        if unchanged == len(problems):   # accepted everywhere, acted nowhere: does the candidate do the same?
            actual = supported(candidate, penalised, feature, findings, part=feature)
            left_alone = actual.token_ids == candidate.generate(req).token_ids
            engine_ignores(findings, feature=feature, req=penalised, baseline=baseline, candidate=candidate,
                           expected=expected, theirs=feature_violation(feature, "; ".join(problems)),
                           ours=feature_violation(feature, "left the output unchanged" if left_alone else None))
        pytest.skip(f"not verified: {feature}: on no pool prompt did it reduce the baseline's repetition "
                    f"({'; '.join(problems)})")
    findings.measure("feature_support", feature=feature, route=baseline.name, supported=True)
    return req, penalised, expected


# ---- n > 1 ----
def n_rules(findings, *, req: Request, answer: Completion, baseline, candidate, **evidence) -> None:
    """n choices and their summed usage, judged against the baseline's answer to the same n request (asked only
    when the candidate breaks a rule; a baseline without n gives no control)."""
    ours = choices_violations(answer, n=req.n)
    if not ours:
        return
    expected = probe(baseline, req, "n") if baseline.capabilities.n else Refusal(
        route=baseline.name, feature="n", why="the baseline lacks capability n")
    theirs = choices_violations(expected, n=req.n) if isinstance(expected, Completion) else []
    rules_judged(findings, feature="n", req=req, baseline=baseline, candidate=candidate, ours=ours,
                 expected=expected, theirs=theirs, **evidence,
                 repro=lambda route, other: rule_repro([req], candidate=route, baseline=other, rule="n_usage"))


# ---- structured output ----
def json_pool(tokenizer, suite_config) -> list[tuple[str, tuple[int, ...]]]:
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


def baseline_schema(baseline, pool) -> dict:
    """A strict schema shaped like the first of the baseline's plain answers in the pool that is a JSON object
    (asked in pool order until one is); skip as not verified when none is."""
    sample = next((json.loads(c.text) for c in (plain_answer(baseline, pid, ids, max_tokens=JSON_TOKENS, tag="json")[1]
                                                 for pid, ids in pool) if is_json_object(c.text)), None)
    if sample is None:
        pytest.skip("not verified: json_schema: no baseline answer in the pool is a JSON object to take a schema from")
    return schema_of(sample)


def format_violations(kind: str, requests, answers, *, schema: dict | None) -> list[Violation]:
    """The structured-output rule over one route's answers (one violation naming every request that breaks it)."""
    return format_violation(kind, [f"{r.request_id}: {p}" for r, out in zip(requests, answers)
                                   if (p := json_answer_problem(out, schema=schema))])


def load_breaks(requests, loaded, serial) -> list[str]:
    """What went wrong with the requests sent twice over in flight: an error, or an answer unlike its serial one."""
    return [f"{r.request_id}: {o if isinstance(o, Exception) else 'differs from its serial answer'}"
            for r, o, s in zip(requests * 2, loaded, serial * 2)
            if isinstance(o, Exception) or o.token_ids != s.token_ids]


def survives_load(findings, *, kind: str, requests, serial, baseline, candidate) -> None:
    """The requests again, twice over with 8 in flight: each answer its serial one, the route healthy after;
    else a finding and the test fails."""
    # a route that serves one request at a time would only queue them: each request keeps its own deadline there
    in_flight = JSON_CONCURRENCY if candidate.capabilities.concurrency else 1
    loaded = candidate.generate_concurrently(requests * 2, concurrency=in_flight)
    broken = load_breaks(requests, loaded, serial)
    if broken or not candidate.health():
        ignored(findings, route=candidate, feature=kind, req=requests[0],
                problem=f"at concurrency {in_flight}: " + ("; ".join(broken)[:600] or "route unhealthy after"),
                repro=load_repro([(r, 0, None) for r in requests * 2], candidate=candidate, baseline=baseline,
                                 concurrency=in_flight))


def parity_not_verified(findings, *, part: str, refused: Refusal, baseline, candidate, requests: int) -> None:
    """The baseline refused the format: the candidate's answers were judged on their own, parity with the baseline
    was not (the row says so)."""
    findings.measure("feature_support", feature="response_format", route=baseline.name, supported=False,
                     why=refused.why)
    findings.cover("features", candidate.name, verified=False, part=part, could_detect=DETECTS[part],
                   ran={"requests": requests}, reason=f"parity with the baseline not verified: {refused.describe()}")


def is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
