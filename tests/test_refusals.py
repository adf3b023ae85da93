"""A request feature the server refuses is a refusal, whatever the status: turned off once, in the server's words.

llama.cpp answers a request it will not serve with HTTP 500 and a sentence: "Only one completion choice is
allowed" (n > 1 on older builds), "tools param requires --jinja flag" (a server started without --jinja). Read as
route errors, one cause made an error finding in every check that sends the feature (issue #34 item 13). The
flavours recognise these words (any engine's, like the context words), the route turns the feature off with a
note quoting the server, raises FeatureUnsupported (the checks' "not verified"), and never sends the feature
again. A 500 in other words stays a route error. Proven over real sockets against tests/http_fakes.py.
Environment: none.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import FeatureUnsupported, RouteHTTPError
from spec_route_suite.routes.flavours import by_name
from spec_route_suite.routes.wire.openai import OpenAIRoute
from spec_route_suite.routes.spec import RouteSpec, Timeouts

from tests.http_fakes import FakeServer
from tests.test_openai_route import server, toy_tokenizer  # noqa: F401 - the fake server and its tokenizer

TOOLS = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])


def route_to(server: FakeServer, tokenizer: str) -> OpenAIRoute:
    return OpenAIRoute(RouteSpec(name="cand", kind="openai", model="toy", base_url=server.v1, tokenizer=tokenizer,
                                 timeouts=Timeouts(connect_s=1.0, request_s=10.0)))


def send_each(route: OpenAIRoute, requests: list[Request]) -> list[object]:
    """Each request's answer or the exception it raised, in order, on one event loop."""
    async def main():
        out = []
        try:
            for req in requests:
                try:
                    out.append(await route.generate(req))
                except Exception as exc:  # noqa: BLE001 - the test inspects what each request raised
                    out.append(exc)
        finally:
            await route.aclose()
        return out
    return asyncio.run(main())


@pytest.mark.parametrize("flavour", ["generic", "vllm", "llama.cpp"])
@pytest.mark.parametrize(("message", "feature"), [("Only one completion choice is allowed", "n"),
                                                  ("tools param requires --jinja flag", "tools"),
                                                  ("tool_choice param requires --jinja flag", "tools")])
def test_the_engines_refusal_words_name_the_feature_at_http_500(flavour, message, feature):
    refusal = by_name(flavour).refusal(500, message)
    assert refusal is not None and (refusal.kind, refusal.feature, refusal.message) == ("feature", feature, message)


def test_a_500_in_other_words_is_no_refusal():
    assert by_name("llama.cpp").refusal(500, "EngineCore encountered an issue.") is None
    assert by_name("generic").refusal(503, "Only one completion choice is allowed") is None   # not a refusal status


def test_n_refused_with_a_500_turns_n_off_once_in_the_servers_words(server, toy_tokenizer):
    server.faults = {"refuse_n_500"}
    route = route_to(server, toy_tokenizer)
    plain = Request(prompt_ids=(3, 4, 5), max_tokens=4, request_id="plain")
    many = replace(plain, n=2, request_id="n-1")
    answers = send_each(route, [plain, many, replace(many, request_id="n-2"), plain])
    first, second = answers[1], answers[2]
    assert isinstance(first, FeatureUnsupported) and first.feature == "n" and first.request_id == "n-1"
    assert "Only one completion choice is allowed" in str(first) and "HTTP 500" in str(first)
    assert isinstance(second, FeatureUnsupported) and second.request_id == "n-2"
    sent_n = [r for r in server.requests if r["method"] == "POST" and (r["body"] or {}).get("n", 1) != 1]
    assert len(sent_n) == 1, "a refused feature was sent again"
    assert not route.capabilities.n
    assert [n for n in route.notes if "turned off" in n] == [
        "cand: n turned off: the server refuses n (HTTP 500: Only one completion choice is allowed)"]
    assert not isinstance(answers[0], Exception) and not isinstance(answers[3], Exception)   # plain requests go on


def test_tools_refused_with_a_500_are_not_sent_again(server, toy_tokenizer):
    server.faults = {"refuse_tools_500"}
    route = route_to(server, toy_tokenizer)
    chat = Request(prompt_ids=(1, 2), max_tokens=4, messages=(("user", "hello"),), request_id="chat")
    with_tools = [replace(chat, tools=TOOLS, request_id=f"t-{n}") for n in (1, 2)]
    answers = send_each(route, [*with_tools, chat])
    assert all(isinstance(a, FeatureUnsupported) and a.feature == "tools" for a in answers[:2])
    assert "tools param requires --jinja flag" in str(answers[1])
    assert not isinstance(answers[2], Exception), answers[2]     # chat without tools is still served
    assert sum(bool((r["body"] or {}).get("tools")) for r in server.requests if r["method"] == "POST") == 1
    assert route.capabilities.chat


def test_an_engine_failure_stays_a_route_error(server, toy_tokenizer):
    server.faults = {"http500"}
    answers = send_each(route_to(server, toy_tokenizer), [Request(prompt_ids=(3, 4), max_tokens=4, n=2,
                                                                  request_id="x")])
    assert isinstance(answers[0], RouteHTTPError) and not isinstance(answers[0], FeatureUnsupported)
