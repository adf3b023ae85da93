"""Request features: the reference engine implements them right, adapters pass or refuse them, and the
feature checks (equivalence/test_features.py) pass the correct engine and catch each planted fault.

The engine is checked against independent oracles: transformers' own processors (hf AR: repetition
penalty, logit_bias as sequence_bias, min_new_tokens) and a plain greedy loop written here for the
OpenAI frequency/presence penalties, in a concurrent batch of rows with and without features; the hf
route's own penalty processor (spec_route_suite/routes/hf_penalties.py) against the same loop and the engine.
The check is proven both ways in one route-suite run at its default budget (reference baseline).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
import torch

from spec_route_suite.equivalence.features import Refusal, probe, repeat_rate
from spec_route_suite.embedded import DRAFT_DIR, TARGET_DIR
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Request, ResponseFormat, RouteWrapper
from spec_route_suite.routes.errors import FeatureUnsupported, RouteMalformed
from spec_route_suite.routes.wire.openai import OpenAIRoute
from spec_route_suite.routes.wire.sglang_generate import SGLangRoute
from spec_route_suite.routes.spec import RouteSpec, parse_route_uri
from spec_route_suite.session import RouteHandle
from tests.mutation import MUTANTS, run_route_suite

PROMPTS = ("code-03", "json-00", "math-00", "chat-00")
FEATURE_FAULTS = [m for m in MUTANTS if m.catcher == "features"]


@pytest.fixture(scope="module")
def models():
    from spec_route_suite.reference.route import load_model
    torch.set_num_threads(1)
    return load_model(str(TARGET_DIR)), load_model(str(DRAFT_DIR))


@pytest.fixture(scope="module")
def ref(models, loop):
    from spec_route_suite.reference import ReferenceRoute
    spec = RouteSpec(name="ref", kind="reference", model=str(TARGET_DIR), tokenizer=str(TARGET_DIR),
                     draft=str(DRAFT_DIR), num_assistant_tokens=4)
    route = ReferenceRoute(spec, models=models)
    yield route
    loop.run(route.aclose(), timeout=30)


@pytest.fixture(scope="module")
def ar():
    from spec_route_suite.routes.wire.hf import HFRoute
    return HFRoute(parse_route_uri("baseline", f"hf:{TARGET_DIR}", base=TARGET_DIR))


@pytest.fixture(scope="module")
def assisted():
    from spec_route_suite.routes.wire.hf import HFRoute
    from spec_route_suite.routes.spec import default_candidate
    return HFRoute(default_candidate())


@pytest.fixture(scope="module")
def prompts(ref):
    by_id = {p.id: p for p in load_prompt_set()}
    return {name: encode_prompt(ref.tokenizer, by_id[name].text) for name in PROMPTS}


def together(loop, route, requests):
    async def go():
        return list(await asyncio.gather(*(route.generate(r) for r in requests)))
    return loop.run(go(), timeout=600)


def greedy(ids, **kw) -> Request:
    return Request(prompt_ids=tuple(ids), **{"max_tokens": 32, **kw})


# -- the reference engine against independent oracles ------------------------------------------
def test_engine_features_equal_transformers_processors_in_a_mixed_batch(loop, ref, ar, prompts):
    """Each feature request (and a plain one beside it) equals transformers' AR answer with the same
    processor, token for token, while speculation verifies several positions per step."""
    ids = list(prompts.values())
    eos = ref.tokenizer.eos_token_id
    plain = together(loop, ref, [greedy(i, request_id=f"plain-{n}") for n, i in enumerate(ids)])
    banned = plain[1].token_ids[0]
    requests = [greedy(ids[0], ignore_eos=True, repetition_penalty=1.3), greedy(ids[1], logit_bias=((banned, -100.0),)),
                greedy(ids[2], min_tokens=len(plain[2].token_ids) + 6), greedy(ids[3], logit_bias=((511, 5.0), (eos, -3.0))),
                greedy(ids[1], ignore_eos=True, repetition_penalty=0.9, min_tokens=4)]
    mixed = requests + [greedy(i, request_id=f"plain-{n}") for n, i in enumerate(ids)]
    got = together(loop, ref, mixed)
    want = [asyncio.run(ar.generate(r)) for r in mixed]
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if (g.token_ids, g.finish_reason) != (w.token_ids, w.finish_reason)]
    assert not bad, f"requests {bad} differ from transformers AR with the same processors"
    assert banned not in got[1].token_ids and len(got[2].token_ids) >= len(plain[2].token_ids) + 6
    assert got[len(requests):] == plain or [g.token_ids for g in got[len(requests):]] == [p.token_ids for p in plain]


def _greedy_loop(model, prompt, *, max_tokens: int, frequency: float, presence: float) -> list[int]:
    """An independent AR oracle for the OpenAI penalties: full forward each step, counts in Python."""
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = model(input_ids=torch.tensor([list(prompt) + out])).logits[0, -1].float()
            for token in set(out):
                logits[token] -= frequency * out.count(token) + presence
            out.append(int(logits.argmax()))
    return out


@pytest.mark.parametrize("frequency, presence", [(1.0, 0.0), (0.0, 2.0), (0.5, 0.5)])
def test_engine_openai_penalties_equal_a_plain_greedy_loop(loop, ref, models, prompts, frequency, presence):
    ids = prompts["json-00"]   # code-03 happens to be a prompt none of these penalties changes
    got = together(loop, ref, [greedy(ids, ignore_eos=True, frequency_penalty=frequency, presence_penalty=presence,
                                      max_tokens=40), greedy(prompts["code-03"], max_tokens=40)])[0]
    want = _greedy_loop(models[0], ids, max_tokens=40, frequency=frequency, presence=presence)
    assert list(got.token_ids) == want
    plain = together(loop, ref, [greedy(ids, ignore_eos=True, max_tokens=40)])[0]
    assert got.token_ids != plain.token_ids and repeat_rate(got.token_ids) <= repeat_rate(plain.token_ids)


def test_engine_n_choices_are_independent_rows_with_summed_usage(loop, ref, prompts):
    one = together(loop, ref, [greedy(prompts["math-00"])])[0]
    many = together(loop, ref, [greedy(prompts["math-00"], n=4, request_id="n4")])[0]
    assert [c.token_ids for c in many.choices] == [one.token_ids] * 4 and many.token_ids == one.token_ids
    assert many.usage_completion_tokens == 4 * len(one.token_ids)
    sampled = together(loop, ref, [greedy(prompts["math-00"], n=4, temperature=1.0, ignore_eos=True, seed=3)])[0]
    again = together(loop, ref, [greedy(prompts["math-00"], n=4, temperature=1.0, ignore_eos=True, seed=3)])[0]
    assert len({c.token_ids for c in sampled.choices}) > 1, "independent rows gave identical samples"
    assert [c.token_ids for c in sampled.choices] == [c.token_ids for c in again.choices], "seeded n not reproducible"


# -- adapters: pass through or refuse, never drop ------------------------------------------------
@pytest.mark.parametrize("frequency, presence", [(1.0, 0.0), (0.0, 2.0), (0.5, 0.5)])
def test_hf_openai_penalties_equal_the_greedy_loop_and_the_engine(loop, ref, ar, assisted, models, prompts, frequency,
                                                                   presence):
    """Our logits processor on the transformers baseline: the same tokens as the plain loop written from the
    OpenAI definition and as the reference engine, and transformers' assisted generation (a speculative
    route verifying several positions per step) gives them too."""
    ids = prompts["json-00"]
    req = greedy(ids, ignore_eos=True, frequency_penalty=frequency, presence_penalty=presence, max_tokens=40)
    got = asyncio.run(ar.generate(req))
    assert list(got.token_ids) == _greedy_loop(models[0], ids, max_tokens=40, frequency=frequency, presence=presence)
    assert got.token_ids == together(loop, ref, [req])[0].token_ids
    assert got.token_ids != asyncio.run(ar.generate(replace(req, frequency_penalty=0.0, presence_penalty=0.0))).token_ids
    assert asyncio.run(assisted.generate(req)).token_ids == got.token_ids


def test_penalty_processor_is_the_openai_formula_over_output_tokens_only():
    """Random logits and histories: mu[j] - c[j] * frequency - (c[j] > 0) * presence with c counted over
    the generated tokens alone, the reference engine's `penalise` row by row."""
    from spec_route_suite.routes.wire.hf_processors import OpenAIPenalties
    from spec_route_suite.reference.features import penalise
    gen = torch.Generator().manual_seed(0)
    vocab, prompt_length = 50, 7
    ids = torch.randint(0, vocab, (4, prompt_length + 12), generator=gen)
    ids[:, prompt_length:prompt_length + 6] = ids[:, :1]   # repeats of a prompt token inside the output
    scores = torch.randn(4, vocab, generator=gen)
    got = OpenAIPenalties(prompt_length, frequency=0.7, presence=1.3)(ids, scores.clone())
    for row in range(4):
        output = ids[row, prompt_length:].tolist()
        want = scores[row].clone()
        for token in set(output):
            want[token] -= 0.7 * output.count(token) + 1.3
        torch.testing.assert_close(got[row], want)
        engine = penalise(scores[row].clone(), prompt=ids[row, :prompt_length].tolist(), output=output,
                          req=greedy((1,), frequency_penalty=0.7, presence_penalty=1.3), vocab=vocab)
        torch.testing.assert_close(got[row], engine)
    untouched = OpenAIPenalties(ids.shape[1], frequency=0.7, presence=1.3)(ids, scores.clone())
    torch.testing.assert_close(untouched, scores)   # the prompt alone is never penalised


def test_hf_refuses_what_it_cannot_do_and_serves_our_processors(ar, prompts, loop):
    handle = RouteHandle(ar, ar.spec, loop, 60)
    answer = probe(handle, greedy(prompts["math-00"], n=2), "n")
    assert isinstance(answer, Refusal) and answer.feature == "n", answer
    for feature, change in (("frequency_penalty", {"frequency_penalty": 1.0}),
                            ("response_format", {"response_format": ResponseFormat("json_object")})):
        assert not isinstance(probe(handle, greedy(prompts["math-00"], **change), feature), Refusal), feature


def test_openai_payload_carries_each_feature_and_only_when_on():
    route = OpenAIRoute(RouteSpec(name="c", kind="openai", model="m", base_url="http://127.0.0.1:9/v1"))
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    full = route.completion_payload(greedy((1, 2), frequency_penalty=0.5, presence_penalty=1.0,
                                           repetition_penalty=1.2, logit_bias=((7, -100.0),), min_tokens=3,
                                           min_p=0.1, n=3, response_format=ResponseFormat("json_schema", schema)))
    assert (full["frequency_penalty"], full["presence_penalty"], full["repetition_penalty"]) == (0.5, 1.0, 1.2)
    assert full["logit_bias"] == {"7": -100.0} and full["min_tokens"] == 3 and full["min_p"] == 0.1
    assert full["n"] == 3 and full["response_format"]["json_schema"]["schema"] == json.loads(schema)
    plain = route.completion_payload(greedy((1, 2)))
    assert plain["n"] == 1 and not {"logit_bias", "min_tokens", "frequency_penalty", "response_format"} & set(plain)
    sglang = SGLangRoute(RouteSpec(name="s", kind="sglang", model="m", base_url="http://127.0.0.1:9"))
    params = sglang.completion_payload(greedy((1, 2), min_tokens=3, logit_bias=((7, 1.0),)))["sampling_params"]
    assert params["min_new_tokens"] == 3 and params["logit_bias"] == {"7": 1.0} and "min_tokens" not in params
    with pytest.raises(FeatureUnsupported):
        sglang.completion_payload(greedy((1, 2), n=2))


def test_openai_n_choices_parsed_in_index_order_with_body_usage():
    route = OpenAIRoute(RouteSpec(name="c", kind="openai", model="m", base_url="http://127.0.0.1:9/v1"))
    body = {"choices": [{"index": 1, "text": "b", "token_ids": [5, 6], "finish_reason": "length"},
                        {"index": 0, "text": "a", "token_ids": [3, 4], "finish_reason": "stop"}],
            "usage": {"completion_tokens": 4}}
    out = route._parse_choices(body, greedy((1,), n=2), latency_s=0.1)
    assert [c.token_ids for c in out.choices] == [(3, 4), (5, 6)] and out.token_ids == (3, 4)
    assert out.usage_completion_tokens == 4


def test_usage_of_n_choices_is_bounded_by_n_times_max_tokens():
    """vLLM bills the sum over the n choices (found on vLLM for CPU: 4 x 24 = 96 was called malformed)."""
    route = OpenAIRoute(RouteSpec(name="c", kind="openai", model="m", base_url="http://127.0.0.1:9/v1"))
    choices = [{"index": i, "text": "ab", "token_ids": [3, 4], "finish_reason": "length"} for i in range(4)]
    req = greedy((1,), n=4, max_tokens=2)
    out = route._parse_choices({"choices": choices, "usage": {"completion_tokens": 8}}, req, latency_s=0.1)
    assert out.usage_completion_tokens == 8 and len(out.choices) == 4
    with pytest.raises(RouteMalformed, match=r"usage.completion_tokens=9 is above max_tokens=2 x n=4"):
        route._parse_choices({"choices": choices, "usage": {"completion_tokens": 9}}, req, latency_s=0.1)


def test_a_400_from_a_real_server_is_not_supported_not_a_pass(loop):
    """The in-process OpenAI server refuses n above its maximum with HTTP 400: the probe calls that a refusal."""
    from spec_route_suite.servers.inprocess import serve_in_thread
    url, stop = serve_in_thread("reference:", model_name="tiny")
    try:
        route = OpenAIRoute(parse_route_uri("c", f"openai:{url}?model=tiny&tokenizer={TARGET_DIR}", base=TARGET_DIR))
        handle = RouteHandle(route, route.spec, loop, 60)
        answer = probe(handle, greedy((1, 2, 3), n=65, max_tokens=4), "n")
        assert isinstance(answer, Refusal) and "400" in answer.why, answer
        handle.close()
    finally:
        stop()


# -- the check, both ways, at its default budget -------------------------------------------------
def test_feature_checks_pass_the_correct_engine_and_catch_each_fault(tmp_path):
    candidates = {"correct": "reference:", **{m.route_name: m.uri() for m in FEATURE_FAULTS}}
    result = run_route_suite(candidates, [], tmp_path, paths=["equivalence/test_features.py"],
                             baseline_uri="reference:", workers=2)
    assert result.report, result.describe()
    correct = result.outcomes_for("correct", check="features")
    assert correct["failed"] == 0 and correct["error"] == 0 and correct["passed"] >= 7, (correct, result.describe())
    assert not result.findings_for("correct"), result.findings_for("correct")
    for mutant in FEATURE_FAULTS:
        assert result.caught(route=mutant.route_name, check="features"), f"{mutant.fault} not caught\n{result.describe()}"


# -- structured output: the engine's JSON automaton and the check's schema judge -----------------
@pytest.mark.parametrize("text, prefix, complete", [
    (' {"a": 1, "b": [true, null, -2.5e3], "c": {"d": "x\\"y"}}', True, True),
    ('{"a": "unfinished', True, False), ("{}", True, True), ('{"a" 1}', False, False), ("[1]", False, False),
    ('{"a": tru', True, False), ('{"a": trux}', False, False), ('{"a": 1}}', False, False), ('{,}', False, False)])
def test_json_prefix_automaton(text, prefix, complete):
    from spec_route_suite.routes.wire.grammar import JsonPrefix
    state = JsonPrefix().feed(text)
    assert (state is not None) == prefix and (state is not None and state.complete) == complete


def test_schema_judge_on_stopped_answers_only():
    from spec_route_suite.equivalence.features import json_answer_problem, schema_of
    from spec_route_suite.routes.base import Completion
    schema = schema_of({"name": "Dina", "age": 31})
    def out(text, finish="stop"):
        return Completion(token_ids=(1,), text=text, finish_reason=finish, route="r")
    assert json_answer_problem(out('{"name": "Ann", "age": 4}'), schema=schema) is None
    assert "lacks required" in json_answer_problem(out('{"name": "Ann"}'), schema=schema)
    assert "wants integer" in json_answer_problem(out('{"name": "Ann", "age": "4"}'), schema=schema)
    assert "forbids" in json_answer_problem(out('{"name": "A", "age": 4, "x": 1}'), schema=schema)
    assert "not JSON" in json_answer_problem(out('{"name": '), schema=None)
    assert json_answer_problem(out('{"name": ', finish="length"), schema=None) is None


def test_feature_check_judges_word_the_format_rule_load_breaks_and_an_ignored_feature():
    """The pure parts of equivalence/feature_checks.py: one format violation naming every broken answer, what
    went wrong under load (errors and changed answers, each request twice), and an ignored feature's finding."""
    from spec_route_suite.equivalence.feature_checks import (format_violations, ignored_finding, is_json_object,
                                                             load_breaks)
    from spec_route_suite.routes.base import Completion
    from spec_route_suite.routes.errors import RouteError
    from types import SimpleNamespace

    def out(text, ids=(1,)):
        return Completion(token_ids=ids, text=text, finish_reason="stop", route="r")
    requests = [Request(prompt_ids=(1, 2), max_tokens=4, request_id=f"q{i}") for i in range(2)]
    assert format_violations("json_object", requests, [out('{"a": 1}'), out('{"a": 1}')], schema=None) == []
    [violation] = format_violations("json_object", requests, [out("[1]"), out("no")], schema=None)
    assert violation.detail.startswith("q0: $ is list, schema wants object")
    assert "; q1: answer is not JSON" in violation.detail
    assert is_json_object('{"a": 1}') and not is_json_object("[1]") and not is_json_object("{")
    serial = [out("a", (1,)), out("b", (2,))]
    assert load_breaks(requests, serial * 2, serial) == []
    broken = load_breaks(requests, [serial[0], out("c", (3,)), RouteError("boom"), serial[1]], serial)
    assert broken == ["q1: differs from its serial answer", "q0: boom"]
    finding = ignored_finding(route=SimpleNamespace(name="cand"), feature="min_p", problem="no effect",
                              req=requests[0], tokens=[1])
    assert (finding.check, finding.severity, finding.route) == ("features", "bug", "cand")
    assert finding.title == "min_p: route 'cand' accepts the feature but it did not act: no effect"
    assert finding.details["prompt_ids"] == [1, 2] and "prompt_ids" not in finding.details["request"]
    assert finding.details["request"]["request_id"] == "q0" and finding.details["tokens"] == [1]


SCHEMA = {"type": "object", "required": ["age", "name"], "additionalProperties": False,
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


@pytest.mark.parametrize("text, prefix, complete", [
    ('{"name": "Ann", "age": 31}', True, True), (' { "age" : -4 , "name":"A\\"b" } ', True, True),
    ('{"name": "Ann"}', False, False), ('{"name": "Ann"', True, False), ('{"nam', True, False),
    ('{"nick"', False, False), ('{"age": "4"', False, False), ('{"age": 4.5', False, False),
    ('{"age": 01', False, False), ('{"age": 4, "age": 5', False, False), ('{"age": 4, "name": "x"}x', False, False),
    ('{"age": -', True, False), ('{"age": -}', False, False)])
def test_schema_prefix_automaton(text, prefix, complete):
    from spec_route_suite.routes.wire.grammar import Schema, SchemaPrefix
    state = SchemaPrefix(Schema.parse(json.dumps(SCHEMA))).feed(text)
    assert (state is not None) == prefix and (state is not None and state.complete) == complete


@pytest.mark.parametrize("schema", [{"type": "array"}, {"type": "object", "properties": {"a": {"type": "object"}}},
                                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}])
def test_engine_refuses_schemas_it_cannot_constrain(loop, ref, prompts, schema):
    fmt = ResponseFormat("json_schema", json.dumps(schema))
    with pytest.raises(FeatureUnsupported, match="flat object schemas only"):
        loop.run(ref.generate(greedy(prompts["json-00"], response_format=fmt)), timeout=60)


@pytest.mark.parametrize("fmt", [ResponseFormat("json_object"), ResponseFormat("json_schema", json.dumps(SCHEMA))],
                         ids=["json_object", "json_schema"])
def test_engine_json_equals_a_masked_greedy_loop(loop, ref, models, prompts, fmt):
    """Speculation with the JSON mask at every verified position equals one-token-at-a-time decoding
    under the same mask (the automata are judged on their own above); a completed schema answer
    matches the schema."""
    from spec_route_suite.equivalence.features import json_answer_problem
    ids = prompts["math-00"]
    got = together(loop, ref, [greedy(ids, max_tokens=24, response_format=fmt), greedy(prompts["json-00"])])[0]
    mask = ref.engine.adjuster.json_mask(fmt)
    eos = frozenset({ref.tokenizer.eos_token_id})
    out: list[int] = []
    with torch.inference_mode():
        while len(out) < 24 and (not out or out[-1] not in eos):
            logits = models[0](input_ids=torch.tensor([list(ids) + out])).logits[0, -1].float()
            out.append(int(logits.masked_fill(~mask.allowed(mask.state_of(out), eos), float("-inf")).argmax()))
    assert list(got.token_ids) == out and got.text.lstrip().startswith("{")
    if fmt.type == "json_schema":
        assert got.text.lstrip().startswith('{"'), got.text
        assert json_answer_problem(got, schema=SCHEMA) is None


@pytest.mark.parametrize("fmt", [ResponseFormat("json_object"), ResponseFormat("json_schema", json.dumps(SCHEMA))],
                         ids=["json_object", "json_schema"])
def test_hf_json_processor_equals_the_engine(loop, ref, ar, assisted, prompts, fmt):
    """The transformers baseline's response_format processor (the engine's automaton as a logits processor)
    gives the engine's greedy answer, under assisted generation too; an unconstrainable schema is refused."""
    req = greedy(prompts["math-00"], max_tokens=24, response_format=fmt)
    got = asyncio.run(ar.generate(req))
    assert got.token_ids == together(loop, ref, [req])[0].token_ids and got.text.lstrip().startswith("{")
    assert asyncio.run(assisted.generate(req)).token_ids == got.token_ids
    nested = ResponseFormat("json_schema", json.dumps({"type": "object", "properties": {"a": {"type": "object"}}}))
    with pytest.raises(FeatureUnsupported, match="flat object schemas only"):
        asyncio.run(ar.generate(replace(req, response_format=nested)))


# -- n = 4 sampled, pooled into the distribution check ---------------------------------------------
class MisSummedUsage(RouteWrapper):
    """A planted route wrapper: n > 1 answers report the first choice's length as usage.completion_tokens."""

    async def generate(self, req: Request):
        out = await self.inner.generate(req)
        return replace(out, usage_completion_tokens=len(out.token_ids)) if req.n > 1 else out


def test_distribution_arm_pools_n_choices_and_checks_their_usage(loop, ref, prompts):
    """Half of a candidate's draw (whole n=4 requests) comes from n=4 answers; a usage that is not the
    sum over the choices is kept as a problem (the distribution test turns it into a finding)."""
    from spec_route_suite.equivalence.distribution import GRID
    from spec_route_suite.equivalence.distribution_routes import N_CHOICES, RouteArm
    for route, expect_problems in ((ref, False), (MisSummedUsage(ref), True)):
        handle = RouteHandle(route, ref.spec, loop, 120)
        arm = RouteArm(handle, [prompts["chat-00"]], tokens=5, n_choices=N_CHOICES)
        samples = arm.draw(0, GRID[0], 18, seed=7)
        assert len(samples) == 18 and arm.pooled == 8 and all(0 < len(s) <= 5 for s in samples)
        assert bool(arm.usage_problems) == expect_problems, arm.usage_problems
    plain = RouteArm(RouteHandle(ref, ref.spec, loop, 120), [prompts["chat-00"]], tokens=5)
    assert len(plain.draw(0, GRID[0], 18, seed=7)) == 18 and plain.pooled == 0
    refusing = RouteArm(RouteHandle(RefusesN(ref), ref.spec, loop, 120), [prompts["chat-00"]], tokens=5,
                        n_choices=N_CHOICES)
    assert len(refusing.draw(0, GRID[0], 18, seed=7)) == 18 and refusing.pooled == 0
    assert "feature:n" in refusing.n_refused and refusing.n_choices == 0, refusing.n_refused


class RefusesN(MisSummedUsage):
    """A route that declares capability n but answers n > 1 with its documented refusal."""

    async def generate(self, req: Request):
        if req.n > 1:
            raise FeatureUnsupported("n", route=self.inner.name, request_id=req.request_id, why="batch 1 only")
        return await self.inner.generate(req)
