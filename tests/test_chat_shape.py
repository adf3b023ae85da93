"""The chat request shape, proven both ways over real HTTP (the in-process OpenAI server's /v1/chat/completions).

The route suite runs as a user runs it (a pytest subprocess writing a run folder) against an
in-process transformers AR baseline and candidates served by the in-process OpenAI server, each at
the same budget: the correct reference engine must pass every chat variant (greedy, boundary,
streaming) and the completion shape; a server whose chat template path drops the last user message,
and a route with a greedy divergence planted on chat requests only, must fail the chat variants
while the completion shape still passes (so only the chat shape could have caught them); a server
without a chat endpoint is "not verified: route lacks chat", never a pass. The mixing workload's
chat sessions run through the server's template: a server that answers the last user message in
another in-flight chat's context (the motivating report) is caught and attributed, the correct one
passes. Pair 2 runs the chat variants once too, so nothing leans on pair 1's chat format.
"""
from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from pathlib import Path

import pytest

from spec_route_suite.embedded import PAIR2_DIR, TARGET_DIR
from spec_route_suite.routes.chat import chat_request, render_chat_ids
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.errors import CapabilityMissing
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.wrappers.planted import parse_plant
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.servers.inprocess import serve_in_thread
from spec_route_suite.reports.repro_spec import parity_repro
from tests.repro_helpers import adapter_handle, script_for, served as in_process
from tests.test_second_pair import params, routes_file
from tests.test_suite_end_to_end import run_suite

PLANT_AT = 3
CHAT_TESTS = ("equivalence/test_greedy.py", "equivalence/test_boundaries.py", "equivalence/test_streaming.py")
CHAT_ARGS = ("-n", "2", "--categories", "chat", "--prompt-limit", "1", "-q",
             "-k", "test_chat_ or test_greedy_matches_baseline")
MIXING_ARGS = ("-n", "2", "--concurrency", "8", "--stress-requests", "100", "-q")


def served(base_url: str, tokenizer: Path, *, model: str = "tiny", plant: str | None = None) -> str:
    options = f'\noptions = {{ plant = "{plant}" }}' if plant else ""
    return (f'kind = "openai"\nbase_url = "{base_url}"\nmodel = "{model}"\ntokenizer = "{tokenizer}"\n'
            f"timeouts = {{ connect = 10, request = 300 }}{options}")


@contextlib.contextmanager
def servers(engine: str, model: str, **variants: dict):
    """One in-process server per variant (serve_in_thread keyword arguments); yields name -> base_url."""
    with contextlib.ExitStack() as stack:
        urls = {}
        for name, options in variants.items():
            urls[name], stop = serve_in_thread(engine, model_name=model, **options)
            stack.callback(stop)
        yield urls


def outcomes(report: dict, route: str, check: str) -> set[str]:
    return {t["outcome"] for t in report["tests"] if t["check"] == check and route in params(t["nodeid"])}


def coverage(report: dict, route: str, check: str) -> dict:
    """The family's rows on `route` folded into one: its parts' statuses (one when they agree) and what ran."""
    rows = [r for r in report["coverage"] if r["check"] == check and r["route"] == route]
    statuses = {r["status"] for r in rows}
    return {"status": statuses.pop() if len(statuses) == 1 else sorted(statuses), "parts": [r["part"] for r in rows],
            "ran": "; ".join(r["ran"] for r in rows), "why": "; ".join(r["why"] for r in rows)}


def bugs(report: dict, route: str, check: str) -> list[dict]:
    return [f for f in report["findings"] if f["route"] == route and f["check"] == check and f["severity"] == "bug"]


def assert_clean(report: dict, output: str) -> None:
    assert report["complete"] and not report["crashed_workers"], output
    assert [f["title"] for f in report["findings"] if f["severity"] == "error"] == [], output


def test_chat_variants_pass_the_correct_server_and_catch_chat_only_faults(tmp_path):
    with servers("reference:", "tiny", correct={}, dropped={"chat_fault": "drop_last_user"},
                 nochat={"chat": False}) as urls:
        routes = routes_file(tmp_path / "routes.toml", f'kind = "hf"\nmodel = "{TARGET_DIR}"', {
            "correct": served(urls["correct"], TARGET_DIR), "dropped": served(urls["dropped"], TARGET_DIR),
            "chatplant": served(urls["correct"], TARGET_DIR, plant=f"chat-divergence@{PLANT_AT}"),
            "nochat": served(urls["nochat"], TARGET_DIR)})
        result, report = run_suite(tmp_path, "--routes", str(routes), *CHAT_ARGS, paths=CHAT_TESTS, timeout=1200)
    output = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 1, output
    assert_clean(report, output)
    # the completion shape passes on every route: only the chat shape can see these faults
    for route in ("correct", "dropped", "chatplant", "nochat"):
        assert outcomes(report, route, "greedy") == {"passed"}, (route, output)
    assert outcomes(report, "correct", "chat") == {"passed"}, output
    row = coverage(report, "correct", "chat")
    assert row["status"] == "verified" and "chat boundary cases" in row["ran"] and "chat streams" in row["ran"]
    dropped = bugs(report, "dropped", "chat")
    assert any(f["title"].startswith("greedy chat output diverges") for f in dropped), output
    assert "failed" in coverage(report, "dropped", "chat")["status"]
    planted = [f for f in bugs(report, "chatplant", "chat") if f["title"].startswith("greedy chat")]
    assert planted and {f["details"]["divergence"]["position"] for f in planted} == {PLANT_AT}, output
    assert "failed" in outcomes(report, "chatplant", "chat")
    nochat = coverage(report, "nochat", "chat")
    assert nochat["status"] == "not verified" and "lacks chat" in nochat["why"], nochat
    assert outcomes(report, "nochat", "chat") == {"skipped"}


def test_mixing_chat_sessions_catch_the_last_user_message_answered_in_another_context(tmp_path):
    with servers("reference:", "tiny", correct={}, swapped={"chat_fault": "swap_context_under_load"}) as urls:
        routes = routes_file(tmp_path / "routes.toml", f'kind = "hf"\nmodel = "{TARGET_DIR}"', {
            "correct": served(urls["correct"], TARGET_DIR), "swapped": served(urls["swapped"], TARGET_DIR)})
        result, report = run_suite(tmp_path, "--routes", str(routes), *MIXING_ARGS,
                                   paths=("stressors/test_mixing.py",), timeout=1500)
    output = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 1, output
    assert_clean(report, output)
    assert outcomes(report, "correct", "mixing") == {"passed"}, output
    for route in ("correct", "swapped"):
        assert "chat requests" in coverage(report, route, "mixing")["ran"], coverage(report, route, "mixing")
    mixed = [f for f in bugs(report, "swapped", "mixing") if "another request's context" in f["title"]]
    assert mixed, output
    victims = {row["victim"] for row in mixed[0]["details"]["contamination_matrix"]}
    assert victims and all("-chat-" in key for key in victims), victims   # only the chat path is faulty
    assert bugs(report, "correct", "mixing") == []


def test_chat_variants_on_the_second_pair_served_in_process(tmp_path):
    target, engine = PAIR2_DIR / "target", f"reference:{PAIR2_DIR / 'target'}?draft={PAIR2_DIR / 'draft'}"
    with servers(engine, "pair2", correct={}, dropped={"chat_fault": "drop_last_user"}) as urls:
        routes = routes_file(tmp_path / "routes.toml", f'kind = "hf"\nmodel = "{target}"', {
            "correct": served(urls["correct"], target, model="pair2"),
            "dropped": served(urls["dropped"], target, model="pair2")})
        result, report = run_suite(tmp_path, "--routes", str(routes), *CHAT_ARGS, paths=CHAT_TESTS, timeout=1200)
    output = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 1, output
    assert_clean(report, output)
    assert outcomes(report, "correct", "chat") == {"passed"} and outcomes(report, "correct", "greedy") == {"passed"}
    assert coverage(report, "correct", "chat")["status"] == "verified"
    assert any(f["title"].startswith("greedy chat output diverges") for f in bugs(report, "dropped", "chat")), output


# ---- the adapter and server pieces, without a suite run ----

def test_server_chat_answers_equal_the_local_rendering_streamed_and_not():
    tokenizer = load_tokenizer(str(TARGET_DIR))
    record = next(r for r in load_prompt_set(("chat",)) if r.messages)
    req = chat_request(tokenizer, record.messages, max_tokens=12, request_id="chat-unit")
    assert req.chat and req.prompt_ids == render_chat_ids(tokenizer, record.messages)
    for mode in ("all", "logprobs"):
        base_url, stop = serve_in_thread("reference:", model_name="tiny", token_ids=mode)
        try:
            route = build_route(parse_route_uri("candidate", f"openai:{base_url}?model=tiny&tokenizer={TARGET_DIR}",
                                                base=Path.cwd()))
            async def both():
                try:
                    chat = await route.generate(req)
                    streamed = await route.generate(replace(req, stream=True))
                    plain = await route.generate(replace(req, messages=None))
                    return chat, streamed, plain
                finally:
                    await route.aclose()
            chat, streamed, plain = asyncio.run(both())
        finally:
            stop()
        assert not chat.text_level and chat.token_ids == streamed.token_ids == plain.token_ids, mode
        assert chat.text == streamed.text == plain.text and chat.finish_reason == streamed.finish_reason


def test_a_missing_chat_endpoint_is_a_missing_capability_not_an_error():
    tokenizer = load_tokenizer(str(TARGET_DIR))
    req = chat_request(tokenizer, [("user", "Hi.")], max_tokens=2, request_id="chat-missing")
    base_url, stop = serve_in_thread("reference:", model_name="tiny", chat=False)
    try:
        route = build_route(parse_route_uri("candidate", f"openai:{base_url}?model=tiny&tokenizer=fixtures/models/target", base=Path.cwd()))
        async def ask():
            try:
                return await route.generate(req)
            finally:
                await route.aclose()
        with pytest.raises(CapabilityMissing, match="lacks capability 'chat'"):
            asyncio.run(ask())
    finally:
        stop()
    assert route.capabilities.chat is False


def test_llama_cpp_declares_no_chat_and_the_plant_parses():
    llama = build_route(parse_route_uri("candidate", "llama-cpp:http://127.0.0.1:9/?model=m&tokenizer=fixtures/models/target", base=Path.cwd()))
    assert llama.capabilities.chat is False and "not verified" in llama.chat_unsupported_why
    spec = parse_route_uri("candidate", f"openai:http://127.0.0.1:9/v1?model=m&tokenizer=fixtures/models/target&plant=chat-divergence@{PLANT_AT}",
                           base=Path.cwd())
    assert parse_plant(spec) == ("chat-divergence", PLANT_AT)


def test_a_chat_repro_resends_the_messages_to_the_chat_endpoint():
    """Served in process or behind the OpenAI adapter, a chat request's repro posts its messages to
    /chat/completions (the server applies its own template), never the locally rendered prompt ids."""
    tokenizer = load_tokenizer(str(TARGET_DIR))
    req = chat_request(tokenizer, [("system", "Be brief."), ("user", "Hi.")], max_tokens=4, request_id="r")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."}]
    spec = parse_route_uri("candidate", "openai:http://127.0.0.1:9/v1?model=tiny&tokenizer=fixtures/models/target", base=Path.cwd())
    adapter = adapter_handle(build_route(spec), spec)
    baseline = {"name": "baseline", "kind": "hf", "model": str(TARGET_DIR)}
    for handle in (in_process("candidate"), adapter):
        block = parity_repro([req], candidate=handle, baseline=in_process("baseline"))
        script, curl, data = script_for(block, specs=[baseline, spec.public_dict()], route="candidate", check="chat")
        compile(script, "repro.py", "exec")
        sent = data["cases"][0]["requests"][0]["candidate"]
        assert sent["path"] == "/chat/completions" and sent["body"]["messages"] == messages, sent
        assert "prompt" not in sent["body"] and '"$CANDIDATE_URL/chat/completions"' in curl
