"""Every response parser and folder of the HTTP adapters (vLLM/OpenAI, chat, SGLang, llama.cpp), fed what
broken servers send.

Property (tests/hostile_shapes.py `check_outcome`): for any answer, the adapter returns a valid
Completion (or score list, inventory, acceptance snapshot) or raises a RouteError naming the
route and the request; nothing else escapes. The answers go through the adapters' real
response path (httpx, status and content-type checks, JSON/SSE decoding, folding) on a mock
transport, so bytes-level damage (truncation, invalid UTF-8, a connection cut mid-event) is
covered too. Shrunk failures found while building this are kept as @example (see the list in
each example's comment: shape -> bug -> fix). Examples are bounded so the module stays well under
a minute. The named shapes the fault server serves are proven one by one at the end.
"""
from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.hostile_shapes import (BODY_SHAPES, STREAM_SHAPES, TEN_MB, Reply, Tally, byte_damage, chat_body, check_completion,
                            check_outcome, check_token_logprobs, damaged, dumps, hostile_values, json_reply,
                            llama_body, llama_events, models_body, requests, score_body, sglang_body, sse_reply,
                            token_lists, vllm_body, vllm_events, call_with)
from spec_route_suite.routes.base import AcceptanceSnapshot, Request, RouteInventory
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.routes.speculation.metrics import acceptance_from_metrics, parse_prometheus, speculative_positions
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import parse_route_uri

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = 100
HOSTILE = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                                HealthCheck.data_too_large])
TALLY: dict[str, Tally] = {}
_ROUTES: dict[str, object] = {}


def route(kind: str):
    """One route object per flavour for the whole module (its tokenizer table is built once)."""
    if kind not in _ROUTES:
        uri = {"openai": "openai:http://hostile.invalid/v1?model=toy&tokenizer=fixtures/models/target",
               "sglang": "sglang:http://hostile.invalid?model=toy&tokenizer=fixtures/models/target",
               "llama-cpp": "llama-cpp:http://hostile.invalid?model=toy&tokenizer=fixtures/models/target"}[kind]
        _ROUTES[kind] = build_route(parse_route_uri("candidate", uri, base=ROOT))
    return _ROUTES[kind]


def answering(post: Reply, *, models: Reply | None = None):
    """A transport: every POST gets `post`, GET /v1/models gets `models` (a well-formed list by default)."""
    def replies(request: httpx.Request) -> Reply:
        if request.method == "GET":
            return models or json_reply(models_body())
        return post
    return replies


def generated(kind: str, req: Request, reply: Reply, name: str) -> object:
    r = route(kind)
    return check_outcome(lambda: call_with(r, answering(reply), lambda: r.generate(req)), request_id=req.request_id,
                         route_name=r.name, valid=lambda c: check_completion(c, req, r.name),
                         tally=TALLY.setdefault(name, Tally()))


# ---------------------------------------------------------------- strategies of whole cases
@st.composite
def completion_cases(draw, build=vllm_body):
    req = draw(requests())
    body = build(draw(token_lists(req)), req)
    return req, draw(byte_damage(json_reply(draw(damaged(body)))))


@st.composite
def stream_cases(draw, build=vllm_body, events_of=vllm_events):
    req = draw(requests(stream=True))
    events = events_of(build(draw(token_lists(req)), req))
    events = draw(damaged(events, max_edits=4))
    return req, draw(byte_damage(sse_reply(events, done=draw(st.sampled_from([True, True, True, False])))))


def sglang_events(body: dict) -> list[dict]:
    """SGLang's default cumulative stream: every event carries the output so far."""
    ids, meta = body["output_ids"], body["meta_info"]
    events = []
    for n in range(1, len(ids) + 1):
        event_meta = {**meta, "completion_tokens": n, "finish_reason": meta["finish_reason"] if n == len(ids) else None}
        for key in ("output_token_logprobs", "output_top_logprobs"):
            if key in meta:
                event_meta[key] = meta[key][:n]
        events.append({"text": " ".join(f"t{t}" for t in ids[:n]), "output_ids": ids[:n], "meta_info": event_meta})
    return events or [body]


REQ = Request(prompt_ids=(1, 2, 3), max_tokens=4, logprobs=2, request_id="req-7")
PLAIN = Request(prompt_ids=(1, 2, 3), max_tokens=4, request_id="req-9")
STREAM_REQ = Request(prompt_ids=(1, 2, 3), max_tokens=4, request_id="req-8", stream=True)


# ---------------------------------------------------------------- /v1/completions
@HOSTILE
@given(case=completion_cases())
# NaN logprob -> Completion carried NaN into the logprob checks -> rejected as malformed (_logprob_value)
@example(case=(REQ, json_reply(vllm_body([5], REQ, logprobs=[math.nan]))))
# logprob 1e400 (JSON ints have no size limit) -> OverflowError escaped float() -> rejected as malformed
@example(case=(REQ, json_reply(vllm_body([5], REQ, logprobs=[-(10 ** 400)]))))
# token id 2**40 -> accepted, then tokenizer.decode raised OverflowError inside a check -> ids bounded to [0, 2**31)
@example(case=(PLAIN, json_reply({**vllm_body([5], PLAIN), "choices": [{**vllm_body([5], PLAIN)["choices"][0],
                                                                        "token_ids": [2 ** 40]}]})))
# usage.completion_tokens true (a bool) -> counted as 1 token -> ignored like any non-count
@example(case=(REQ, json_reply({**vllm_body([5], REQ), "usage": {"completion_tokens": True}})))
# 10 MB extra field: a valid answer, parsed
@example(case=(REQ, json_reply({**vllm_body([5], REQ), "padding": "x" * TEN_MB})))
# nested JSON bomb -> RecursionError escaped resp.json() and the route -> malformed "not JSON"
@example(case=(REQ, Reply(pieces=(b"[" * 100_000 + b"]" * 100_000,))))
def test_completions_answer_is_valid_or_a_route_error(case):
    req, reply = case
    generated("openai", req, reply, "completions")


@HOSTILE
@given(case=stream_cases())
# regression (found by the named stream shapes below, not by this property: the result looked valid):
# content after the finish_reason (events out of order) was folded into one answer -> now malformed
@example(case=(STREAM_REQ, sse_reply([
    {"choices": [{"index": 0, "text": "t1", "token_ids": [1], "finish_reason": "stop"}]},
    {"choices": [{"index": 0, "text": "t2", "token_ids": [2], "finish_reason": None}]}])))
# a nested JSON bomb as one event -> RecursionError escaped read_events -> malformed
@example(case=(STREAM_REQ, sse_reply([b"[" * 100_000])))
def test_completion_stream_is_valid_or_a_route_error(case):
    req, reply = case
    generated("openai", req, reply, "completions-stream")


# ---------------------------------------------------------------- /v1/chat/completions
def chatted(req: Request, reply: Reply) -> object:
    r = route("openai")
    return check_outcome(lambda: call_with(r, answering(reply), lambda: r.chat([{"role": "user", "content": "hi"}],
                                                                               req)),
                         request_id=req.request_id, route_name=r.name, valid=lambda c: check_completion(c, req, r.name),
                         tally=TALLY.setdefault("chat-stream" if req.stream else "chat", Tally()))


@HOSTILE
@given(case=completion_cases(build=chat_body))
def test_chat_answer_is_valid_or_a_route_error(case):
    chatted(*case)


def chat_events(body: dict) -> list[dict]:
    events = vllm_events(vllm_body(body["choices"][0]["token_ids"], REQ_CHAT))
    for event in events:
        for choice in event["choices"]:
            choice["delta"] = {"content": choice.pop("text")}
    return events


REQ_CHAT = Request(prompt_ids=(1,), max_tokens=12, request_id="chat")


@HOSTILE
@given(case=stream_cases(build=chat_body, events_of=chat_events))
def test_chat_stream_is_valid_or_a_route_error(case):
    chatted(*case)


# ---------------------------------------------------------------- SGLang /generate
@HOSTILE
@given(case=completion_cases(build=sglang_body))
def test_sglang_generate_is_valid_or_a_route_error(case):
    req, reply = case
    generated("sglang", req, reply, "sglang-generate")


@HOSTILE
@given(case=stream_cases(build=sglang_body, events_of=sglang_events))
def test_sglang_stream_is_valid_or_a_route_error(case):
    req, reply = case
    generated("sglang", req, reply, "sglang-stream")


# ---------------------------------------------------------------- llama.cpp /completion (native)
LLAMA_PLAIN = Request(prompt_ids=(1, 2, 3), max_tokens=2, logprobs=1, request_id="req-1")


def llama_probs(logprob, top) -> dict:
    return {**llama_body([5], LLAMA_PLAIN), "completion_probabilities": [
        {"id": 5, "token": "t5", "logprob": logprob, "top_logprobs": top}]}


@HOSTILE
@given(case=completion_cases(build=llama_body))
# logprob 1e400 -> OverflowError escaped float() -> malformed
@example(case=(LLAMA_PLAIN, json_reply(llama_probs(-(10 ** 400), []))))
# top_logprobs 7 (an int) -> a TypeError only the generic shape guard caught -> named: "top_logprobs has a bad entry"
@example(case=(LLAMA_PLAIN, json_reply(llama_probs(-0.5, 7))))
# tokens_predicted 9 for 1 token at max_tokens 2 -> accepted -> checked like usage.completion_tokens (malformed)
@example(case=(LLAMA_PLAIN, json_reply({**llama_body([5], LLAMA_PLAIN), "tokens_predicted": 9})))
def test_llama_cpp_completion_is_valid_or_a_route_error(case):
    req, reply = case
    generated("llama-cpp", req, reply, "llama-cpp-completion")


LLAMA_REQ = Request(prompt_ids=(1, 2, 3), max_tokens=1, logprobs=1, request_id="req-0", stream=True)


@HOSTILE
@given(case=stream_cases(build=llama_body, events_of=llama_events))
# top_logprobs entry with logprob NaN -> accepted into the Completion (only "is a number" was checked)
# -> chosen and top logprobs validated like the OpenAI adapter's (_logprob: finite, not above 0)
@example(case=(LLAMA_REQ, sse_reply(llama_events({**llama_body([0], LLAMA_REQ), "completion_probabilities": [
    {"id": 0, "token": "t0", "logprob": -0.5, "top_logprobs": [{"id": 0, "token": "t0", "logprob": math.nan}]}]}))))
# a partial event whose completion_probabilities is 3 (an int) -> a TypeError only the generic shape guard
# caught -> named: "stream event 1: content, tokens or probabilities malformed"
@example(case=(LLAMA_REQ, sse_reply([{"content": "t0", "tokens": [0], "stop": False, "completion_probabilities": 3},
                                     {**llama_body([], LLAMA_REQ), "completion_probabilities": []}])))
def test_llama_cpp_stream_is_valid_or_a_route_error(case):
    req, reply = case
    generated("llama-cpp", req, reply, "llama-cpp-stream")


# ---------------------------------------------------------------- teacher forcing (scores)
def scored(kind: str, prompt: list[int], continuation: list[int], reply: Reply, models: Reply, name: str) -> object:
    r = route(kind)
    r._context_limit = False  # ask /v1/models again: it is part of the hostile answer
    seen: list[str] = []

    def work():
        return r.score(tuple(prompt), tuple(continuation), 3)

    def replies(request: httpx.Request) -> Reply:
        seen.append(request.url.path)
        return answering(reply, models=models)(request)

    def valid(result) -> None:
        assert isinstance(result, list) and len(result) == len(continuation), result
        check_token_logprobs(result, tuple(continuation))

    try:
        result = call_with(r, replies, work)
    except RouteError as exc:
        assert exc.route == r.name and exc.request_id.startswith("score-"), exc.describe()
        TALLY.setdefault(name, Tally()).count(exc.kind)
        return exc
    valid(result)
    TALLY.setdefault(name, Tally()).count("valid")
    return result


@st.composite
def score_cases(draw, build):
    prompt = draw(st.lists(st.integers(0, 511), min_size=1, max_size=4))
    continuation = draw(st.lists(st.integers(0, 511), min_size=1, max_size=4))
    body = draw(damaged(build(prompt, continuation), max_edits=4))
    models = draw(st.one_of(st.just(models_body()), damaged(models_body()), hostile_values))
    return prompt, continuation, draw(byte_damage(json_reply(body))), json_reply(models)


def sglang_score_body(prompt: list[int], continuation: list[int], top_k: int = 3) -> dict:
    ids = prompt + continuation
    return {"text": "", "output_ids": [], "meta_info": {
        "input_token_logprobs": [[None, ids[0], None]] + [[-0.25, t, None] for t in ids[1:]],
        "input_top_logprobs": [None] + [[[-0.25, t, None]] for t in ids[1:]], "finish_reason": {"type": "length"}}}


@HOSTILE
@given(case=score_cases(score_body))
# prompt_logprobs entry {"5": {"logprob": NaN}} -> NaN reached the near-tie margins -> malformed
@example(case=([1], [5], json_reply({"choices": [{"prompt_logprobs": [None, {"5": {"logprob": math.nan}}]}]}),
               json_reply(models_body())))
def test_vllm_scores_are_valid_or_a_route_error(case):
    scored("openai", *case, name="score-vllm")


@st.composite
def flat_score_cases(draw):
    prompt, continuation = [1, 2], draw(st.lists(st.integers(0, 511), min_size=1, max_size=3))
    body = sglang_score_body(prompt, continuation)
    meta = body["meta_info"]
    del meta["input_top_logprobs"]
    rows = len(prompt) + len(continuation) - 1
    meta.update(input_top_logprobs_val_flat=[-0.25] * rows, input_top_logprobs_idx_flat=(prompt + continuation)[1:],
                input_top_logprobs_shape=[rows, 1], input_top_logprobs_null_prefix=1)
    return prompt, continuation, json_reply(draw(damaged(body, max_edits=3))), json_reply(models_body())


@HOSTILE
@given(case=st.one_of(score_cases(sglang_score_body), flat_score_cases()))
# flat shape [10**10, 0] with empty arrays -> 10**10 empty rows built (a hang) -> shape checked against the rows
@example(case=([1, 2], [5], json_reply({"meta_info": {
    "input_token_logprobs": [[None, 1, None], [-0.1, 2, None], [-0.2, 5, None]],
    "input_top_logprobs_val_flat": [], "input_top_logprobs_idx_flat": [],
    "input_top_logprobs_shape": [10 ** 10, 0]}}), json_reply(models_body())))
# flat null_prefix 10**12 -> MemoryError building the prefix -> malformed
@example(case=([1, 2], [5], json_reply({"meta_info": {
    "input_token_logprobs": [[None, 1, None], [-0.1, 2, None], [-0.2, 5, None]],
    "input_top_logprobs_val_flat": [-0.2], "input_top_logprobs_idx_flat": [5],
    "input_top_logprobs_shape": [1, 1], "input_top_logprobs_null_prefix": 10 ** 12}}), json_reply(models_body())))
# /v1/models {"data": -1.0} -> TypeError escaped score() (the context-limit probe ran outside the shape guard)
# -> a "data" that is not a list means no limit is known
@example(case=([0], [0], json_reply(sglang_score_body([0], [0])), json_reply({"object": None, "data": -1.0})))
def test_sglang_scores_are_valid_or_a_route_error(case):
    scored("sglang", *case, name="score-sglang")


# ---------------------------------------------------------------- /metrics, /v1/models, /server_info, /props
metrics_lines = st.one_of(
    st.text(max_size=40),
    st.builds(lambda name, labels, value: f"{name}{labels} {value}",
              st.sampled_from(["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                               "vllm:spec_decode_num_accepted_tokens_total",
                               "vllm:spec_decode_num_accepted_tokens_per_pos_total", "x"]),
              st.sampled_from(["", '{engine="0"}', '{position="1"}', '{position="99999"}', '{position="-1"}',
                               '{model_name="toy",position="0"}', '{bad', '{a="\\"}"}']),
              st.sampled_from(["1", "-5", "NaN", "+Inf", "-Inf", "1e308", "1e999", "x", "0x10", "7 1700000000"])))


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(text=st.lists(metrics_lines, max_size=12).map("\n".join))
# position="99999" -> a 100000-wide per-position tuple (a huge table in the report) -> positions bounded
@example(text='vllm:spec_decode_num_drafts_total 1\nvllm:spec_decode_num_accepted_tokens_per_pos_total{position="99999"} 1')
# drafts -5 -> a negative acceptance length in the report -> negative counters skipped
@example(text="vllm:spec_decode_num_drafts_total -5\nvllm:spec_decode_num_accepted_tokens_total 3")
def test_metrics_parsing_never_raises_and_counts_are_counts(text):
    assert all(isinstance(s.value, float) for s in parse_prometheus(text))
    snap = acceptance_from_metrics(text, model_name="toy")
    TALLY.setdefault("metrics", Tally()).count("none" if snap is None else "snapshot")
    if snap is not None:
        assert isinstance(snap, AcceptanceSnapshot)
        counts = (snap.drafts, snap.draft_tokens, snap.accepted, *snap.accepted_per_pos)
        assert all(isinstance(c, int) and c >= 0 for c in counts), snap
        assert len(snap.accepted_per_pos) <= 64, len(snap.accepted_per_pos)
    positions = speculative_positions(text)
    assert positions is None or 0 < positions <= 64


INVENTORY_PATHS = ("/version", "/v1/models", "/get_server_info", "/metrics", "/server_info", "/props", "/slots")


@st.composite
def inventory_answers(draw):
    """A hostile answer per GET endpoint: well-formed, damaged, any JSON value, or bytes that are not JSON."""
    wellformed = {"/version": {"version": "0.32.0"}, "/v1/models": models_body(),
                  "/get_server_info": {"model_path": "/m", "speculative_algorithm": "EAGLE", "context_length": 512,
                                       "internal_states": [{"avg_spec_accept_length": 2.5}], "version": "0.5"},
                  "/server_info": {"vllm_config": {"speculative_config": {"method": "ngram", "model": "x"},
                                                   "model_config": {"dtype": "torch.float32", "max_logprobs": 5}}},
                  "/props": {"default_generation_settings": {"n_ctx": 512}, "total_slots": 1, "build_info": "b1",
                             "model_path": "/m/toy.gguf"},
                  "/slots": [{"id": 0, "speculative": True, "params": {"speculative.types": "none,draft-simple",
                                                                        "speculative.n_max": 4}}]}
    answers = {}
    for path in INVENTORY_PATHS:
        if path == "/metrics":
            answers[path] = Reply(content_type="text/plain", pieces=(draw(st.lists(metrics_lines, max_size=5)
                                                                          .map("\n".join)).encode(),))
            continue
        body = draw(st.one_of(damaged(wellformed[path], max_edits=4), hostile_values))
        answers[path] = draw(byte_damage(json_reply(body)))
    return answers


@pytest.mark.parametrize("kind", ["openai", "sglang", "llama-cpp"])
@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers=inventory_answers())
# /v1/models max_model_len false -> a context length of False in the inventory -> bools are not lengths
@example(answers={"/v1/models": json_reply({"data": [{"id": "toy", "max_model_len": False}]})})
# llama.cpp /props n_ctx true -> a context length of True in the inventory -> _count: bools are not lengths
@example(answers={"/props": json_reply({"default_generation_settings": {"n_ctx": True}})})
def test_inventory_and_acceptance_never_raise(kind, answers):
    r = route(kind)

    def replies(request: httpx.Request) -> Reply:
        return answers.get(request.url.path, Reply(status=404, pieces=(b'{"detail": "Not Found"}',)))

    inventory = call_with(r, replies, r.inventory)
    assert isinstance(inventory, RouteInventory)
    assert all(isinstance(getattr(inventory, f), str) for f in ("engine", "version", "model", "dtype"))
    assert inventory.max_model_len is None or (isinstance(inventory.max_model_len, int)
                                              and not isinstance(inventory.max_model_len, bool))
    try:
        snap = call_with(r, replies, r.acceptance)
    except RouteError as exc:  # /metrics answering an error status is a route error, named
        assert exc.route == r.name
        snap = None
    assert snap is None or isinstance(snap, AcceptanceSnapshot)
    TALLY.setdefault(f"inventory-{kind}", Tally()).count("ok")


# ---------------------------------------------------------------- the fault server's named shapes, one by one
@pytest.mark.parametrize("shape", sorted(BODY_SHAPES))
def test_each_body_shape_is_a_named_route_error(shape):
    damage, words = BODY_SHAPES[shape]
    req = Request(prompt_ids=(1, 2), max_tokens=4, request_id=f"shape-{shape}")
    outcome = generated("openai", req, damage(vllm_body([3, 4, 5], req), req), "named-shapes")
    assert isinstance(outcome, RouteError), f"{shape} was accepted: {outcome}"
    assert words in outcome.describe(), outcome.describe()


@pytest.mark.parametrize("shape", sorted(STREAM_SHAPES))
def test_each_stream_shape_is_a_named_route_error(shape):
    damage, words = STREAM_SHAPES[shape]
    req = Request(prompt_ids=(1, 2), max_tokens=4, request_id=f"shape-{shape}", stream=True)
    outcome = generated("openai", req, damage(vllm_events(vllm_body([3, 4, 5], req)), req), "named-shapes")
    assert isinstance(outcome, RouteError), f"{shape} was accepted: {outcome}"
    assert words in outcome.describe(), outcome.describe()


def test_wellformed_answers_still_parse():
    """The control: the undamaged answers every property starts from are valid Completions."""
    req = Request(prompt_ids=(1, 2), max_tokens=4, logprobs=2, request_id="ok")
    for kind, body in (("openai", vllm_body([3, 4, 5], req)), ("sglang", sglang_body([3, 4, 5], req))):
        c = generated(kind, req, json_reply(body), "control")
        check_completion(c, req, route(kind).name)
        assert c.token_ids == (3, 4, 5) and [t.logprob for t in c.logprobs] == [-0.5] * 3
    stream = Request(prompt_ids=(1, 2), max_tokens=4, request_id="ok-sse", stream=True)
    c = generated("openai", stream, sse_reply(vllm_events(vllm_body([3, 4, 5], stream))), "control")
    assert c.token_ids == (3, 4, 5) and c.usage_completion_tokens == 3
    full = Request(prompt_ids=(1, 2), max_tokens=3, request_id="ok-full")  # usage == max_tokens is fine
    assert generated("openai", full, json_reply(vllm_body([3, 4, 5], full)), "control").usage_completion_tokens == 3
    over = Request(prompt_ids=(1, 2), max_tokens=2, request_id="ok-over")  # an overshoot the boundary check judges
    assert generated("openai", over, json_reply(vllm_body([3, 4, 5], over)), "control").token_ids == (3, 4, 5)
    chat = chatted(Request(prompt_ids=(1,), max_tokens=4, logprobs=1, request_id="ok-chat"),
                   json_reply(chat_body([3, 4], REQ)))
    assert chat.token_ids == (3, 4) and chat.text == "t3 t4"


def test_zz_report_tally(capsys):
    """Print how the examples ended per property (the closing note quotes it)."""
    with capsys.disabled():
        for name, tally in sorted(TALLY.items()):
            print(f"\n{name}: {sum(tally.outcomes.values())} examples {dict(sorted(tally.outcomes.items()))}")
