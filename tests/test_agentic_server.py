"""Agent traffic over real HTTP: the in-process server parses as its engine does and the OpenAI route reads it.

Why: the agentic checks run against servers (vLLM, llama.cpp) through the OpenAI route; without a real
engine here, the in-process server stands in, so it must answer chat requests with tools exactly as its
engine's own parse (tokens, tool_calls, reasoning, content, finish_reason, plain and streamed one chunk
per verified block), take agent turns (assistant tool_calls, tool results) rendered by the pair's
template, and carry the engine's planted parser faults to the wire: a fault shows in the served stream
and not in the served plain answer, as it would on vLLM's streaming path.
"""
from __future__ import annotations

from urllib.parse import quote

import pytest

from spec_route_suite.equivalence.agentic import AgentView, agent_request
from spec_route_suite.embedded import PAIR2_DIR
from spec_route_suite.prompts.agentic import parity_prompts, session_plans
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.servers.inprocess import serve_in_thread
from spec_route_suite.stressors.agentic.sessions import SessionSettings, run_session

TARGET, DRAFT = PAIR2_DIR / "target", PAIR2_DIR / "draft"
ENGINE = f"reference:{TARGET}?draft={DRAFT}"
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(str(TARGET))


@pytest.fixture(scope="module")
def routes(loop):
    """(the engine in process, the same engine served, the reasoning_leak_in_block engine served) as routes."""
    built, stops = [build_route(parse_route_uri("local", ENGINE, base=TARGET))], []
    for name, uri in (("served", ENGINE), ("leaky", f"{ENGINE}&fault=reasoning_leak_in_block")):
        url, stop = serve_in_thread(uri, model_name="pair2")
        stops.append(stop)
        built.append(build_route(parse_route_uri(name, f"openai:{url}?model=pair2&tokenizer={quote(str(TARGET))}",
                                                 base=TARGET)))
    yield built
    for route in built:
        loop.run(route.aclose(), timeout=30)
    for stop in stops:
        stop()


def _answers(loop, route, tok, *, stream: bool):
    return [loop.run(route.generate(agent_request(tok, p.messages, p.tools, max_tokens=MAX_TOKENS,
                                                  request_id=f"{p.id}-{stream}", stream=stream)), timeout=300)
            for p in parity_prompts()]


def test_served_answers_are_the_engines_own_parse(loop, routes, tok):
    local, served, _ = routes
    for stream in (False, True):
        ours, theirs = _answers(loop, local, tok, stream=stream), _answers(loop, served, tok, stream=stream)
        assert [AgentView.of(c) for c in theirs] == [AgentView.of(c) for c in ours]
        assert [c.token_ids for c in theirs] == [c.token_ids for c in ours]
        assert sum(bool(c.tool_calls) for c in theirs) >= 2 and all(c.reasoning for c in theirs), \
            "the pair should call tools and think on these prompts"
        assert all(c.finish_reason == "tool_calls" for c in theirs if c.tool_calls)
        if stream:
            assert all(c.stream_events and c.stream_events < len(c.token_ids) for c in theirs), "one chunk per block"


def test_agent_turns_go_over_the_wire(loop, routes, tok):
    """A session's turns (assistant tool_calls, tool results) are accepted, rendered as the template renders them
    (the server's prompt count equals the local rendering) and answered like the engine in process."""
    local, served, _ = routes
    settings = SessionSettings(tokenizer=tok, max_tokens=MAX_TOKENS, fits=lambda req: True, timeout_s=300)
    plan = session_plans(1)[0]
    ours = loop.run(run_session(local, plan, settings, tag="local", stream=True), timeout=600)
    theirs = loop.run(run_session(served, plan, settings, tag="served", stream=True), timeout=600)
    assert theirs.ended == "done" and len(theirs.turns) >= 2
    assert any(m[0] == "tool" for m in theirs.turns[-1].request.messages), "no tool result was sent back"
    assert [AgentView.of(t.answer) for t in theirs.turns] == [AgentView.of(t.answer) for t in ours.turns]
    last = theirs.turns[-1].request
    assert loop.run(served.prompt_tokens(last), timeout=120) == len(last.prompt_ids)


def test_a_planted_parser_fault_reaches_the_served_stream_only(loop, routes, tok):
    _, served, leaky = routes
    assert [AgentView.of(c) for c in _answers(loop, leaky, tok, stream=False)] == \
           [AgentView.of(c) for c in _answers(loop, served, tok, stream=False)]
    clean, leaked = _answers(loop, served, tok, stream=True), _answers(loop, leaky, tok, stream=True)
    assert [c.token_ids for c in leaked] == [c.token_ids for c in clean]
    assert [AgentView.of(c) for c in leaked] != [AgentView.of(c) for c in clean]
