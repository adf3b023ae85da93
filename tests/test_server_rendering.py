"""What a server renders decides: tools on offer, requests sized, roles it cannot render (issue #34 items 4, 10, 11).

The servers here are the in-process OpenAI server with a chat template of its own, as real servers have one:
llama.cpp renders tools into the prompt even for a template that takes none (its generic tool format), and its
template may be longer than the suite's (a spec-path chat request of 559 tokens as the server rendered it went to a
512-token slot). So:
- agentic "no tools" (not applicable) is what every engine says, by its own prompt count of one question with and
  without a tool, never the suite's local template; an engine that cannot say leaves it "not verified";
- the spec-path chat requests are sized by the server's own count, so none is refused;
- a conversation the suite's tokenizer cannot render (the first pair's corpus format has no `tool` role) is
  "not verified (why)" for those prompts, never a harness crash.
"""
from __future__ import annotations

import copy
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import spec_route_suite.equivalence.test_agentic as agentic_suite
from spec_route_suite.equivalence import spec_path
from spec_route_suite.equivalence.spec_path_requests import family_requests
from spec_route_suite.prompts.fit import ContextFit, FittedPrompts, RouteContext
from spec_route_suite.routes.base import RouteWrapper, unwrap
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import EMBEDDED_MODELS, parse_route_uri
from spec_route_suite.servers.inprocess import Engine, make_server
from tests.test_greedy_routes import FixedCalibration, Sink, handle, hf_route, reference_route, suite_config, tokenizer
from tests.test_greedy_streaming import FLOOR

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
SMALL_CONTEXT = 192
PADDING = 60   # tokens the long-template server adds to every chat prompt: chat-00 and chat-03 still fit, chat-01 not


class GenericToolsEngine(Engine):
    """A server that renders the tools it is offered into the prompt, whatever its template (llama.cpp's generic
    tool format for templates without tools)."""

    def render_chat(self, request_id, turns, tools=""):
        ids = super().render_chat(request_id, turns, tools)
        names = ", ".join(t["function"]["name"] for t in json.loads(tools or "[]"))
        return ids[:1] + self.encode(f"Tools you may call: {names}\n") + ids[1:] if tools else ids


class LongTemplateEngine(Engine):
    """A server whose chat template is PADDING tokens longer than the suite's rendering of the same messages;
    `refused_ids` names the requests it refused as too long."""

    refused_ids: list[str]

    def render_chat(self, request_id, turns, tools=""):
        ids = super().render_chat(request_id, turns, tools)
        return ids[:1] + self.encode("You are a helpful assistant. " * 20)[:PADDING] + ids[1:]

    def check_length(self, req):
        try:
            super().check_length(req)
        except Exception:
            self.refused_ids = [*getattr(self, "refused_ids", []), req.request_id]
            raise


class Servers:
    def __init__(self):
        self.stops = []

    def serve(self, engine_class, route, name: str, *, max_context: int | None = None):
        spec = unwrap(route).spec
        engine = engine_class(route, spec=replace(spec, max_context=max_context) if max_context else spec,
                              model_name="tiny")
        httpd = make_server(engine)
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.stops.append(lambda: (httpd.shutdown(), httpd.server_close(), engine.loop.close()))
        uri = f"openai:http://127.0.0.1:{httpd.server_address[1]}/v1?model=tiny&tokenizer={TARGET}&timeout=120"
        return engine, handle(build_route(parse_route_uri(name, uri, base=ROOT)), name)

    def close(self):
        for stop in self.stops:
            stop()


@pytest.fixture(scope="module")
def served():
    servers, reference = Servers(), reference_route("candidate")
    try:
        yield {"tools": [servers.serve(GenericToolsEngine, hf_route(n, False), n)[1] for n in ("baseline", "candidate")],
               "plain": [servers.serve(Engine, hf_route(n, False), n)[1] for n in ("baseline", "candidate")],
               "long": servers.serve(LongTemplateEngine, reference, "candidate", max_context=SMALL_CONTEXT)}
    finally:
        servers.close()
        reference.batcher.close()


def without_template():
    """The first pair's tokenizer as a pair without a chat template has it: rendered in the corpus format, which
    knows no `tool` role."""
    bare = copy.deepcopy(tokenizer())
    bare.chat_template = None
    return bare


class Silent(RouteWrapper):
    """A route whose server states no prompt token count."""

    async def prompt_tokens(self, req):
        return None


def run_parity(baseline, candidate, tok):
    sink = Sink()
    try:
        agentic_suite.test_parity(mode="plain", baseline=baseline, candidate=candidate, tokenizer=tok,
                                  context_fit=ContextFit((RouteContext("baseline", 512, "test"),)),
                                  suite_config=suite_config(), calibration=FixedCalibration(FLOOR),
                                  eos_token_id=tok.eos_token_id, findings=sink)
    except pytest.skip.Exception as skip:
        return f"skipped: {skip}", sink
    return "passed", sink


def parity_records(sink):
    return [m for kind, m in sink.measurements if kind == "coverage" and m["part"] == "parity plain"]


def test_no_tools_is_what_the_servers_render_not_the_local_template(served):
    """Item 4. The suite's template (the first pair's) takes no tools; a server that renders them offers the model
    tools, so the check runs there; servers that render none make it "not applicable"; a server that states no
    count leaves it "not verified"."""
    outcome, sink = run_parity(*served["tools"], tokenizer())
    assert outcome == "passed" and not any(r.get("applicable", True) is False for r in parity_records(sink)), outcome
    outcome, sink = run_parity(*served["plain"], tokenizer())
    assert outcome.startswith("skipped") and "not applicable" in outcome
    assert [r.get("applicable", True) for r in parity_records(sink)] == [False]
    baseline, candidate = served["tools"]
    blind = handle(Silent(unwrap(candidate.route)), "candidate")
    outcome, sink = run_parity(handle(Silent(unwrap(baseline.route)), "baseline"), blind, tokenizer())
    assert outcome.startswith("skipped: not verified") and "cannot be told" in outcome, outcome
    assert [r.get("applicable", True) for r in parity_records(sink)] == [True]


def test_a_pair_that_cannot_render_the_tool_role_is_not_verified_not_a_crash(served):
    """Item 11: agentic traffic with the first pair's tokenizer without a chat template. The conversations with a
    `tool` turn cannot be rendered here: not sent, the part not verified naming them; the others run."""
    outcome, sink = run_parity(*served["tools"], without_template())
    assert outcome == "passed", outcome
    unrendered = [r for r in parity_records(sink) if "cannot be rendered" in r["reason"]]
    assert unrendered and not unrendered[0]["verified"] and "unknown role 'tool'" in unrendered[0]["reason"]
    assert unrendered[0]["ran"]["prompts not rendered"] == 2, unrendered   # the two `result` prompts
    (answered,) = [r["ran"]["candidate answers"] for r in parity_records(sink) if "candidate answers" in r["ran"]]
    assert answered == 4   # the call and free prompts


def test_spec_path_chat_requests_are_sized_by_the_servers_rendering(served):
    """Item 10: the server renders every chat prompt PADDING tokens longer than the suite does; the spec-path chat
    family's requests are the prompts that fit as it renders them, and the server refuses none of them."""
    engine, candidate = served["long"]
    fit = ContextFit((RouteContext("baseline", SMALL_CONTEXT, "test"), RouteContext("candidate", SMALL_CONTEXT, "test")))
    fitted = FittedPrompts(tokenizer(), fit, max_tokens=spec_path.MAX_TOKENS)
    family = spec_path.BY_NAME["chat"]
    plain, chats = family_requests(family, candidate, tokenizer(), fitted, suite_config())
    assert len(chats) == spec_path.REQUESTS, [r.request_id for r in chats]
    for req in [*plain, *chats]:
        candidate.generate(req)
    # a prompt longer than the whole context is refused as the one-token probe that asks for its count (that refusal
    # states the count: how a server without a tokenize endpoint says it), never as a request of the check
    refused = getattr(engine, "refused_ids", [])
    assert all(rid.endswith("-len") for rid in refused) and len(refused) == len(engine.refused), refused
    sources = [r.request_id.split("-", 3)[-1] for r in chats]   # spec-chat-<n>-<prompt id>: the fitting prompts cycled
    assert {"chat-00", "chat-03"} <= set(sources) and not {"chat-01", "chat-02"} & set(sources), sources  # too long
