"""The scripts read answers as the adapters do: one reader module (routes/answer_fields.py), carried by the
repro and replay scripts, imported by the adapters.

Why: the repro runtime and the replay script each had a parser of their own for the same dialects, so a wire
the adapters learned to read (a finish reason, where ids are) could be read differently by the script that
resends its failing request. Here every well-formed answer shape the parser properties use (tests/hostile_shapes.py:
vLLM completions and chat, SGLang's /generate, llama.cpp's /completion, and their streams) is read by the
adapter and by the script reader, and both must see the same ids, text, finish reason, usage and logprobs.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from spec_route_suite.routes.answer_fields import answer, fold
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.reports.repro import runtime_source
from spec_route_suite.stressors.replay import WIRE_HELPERS
from tests.hostile_shapes import chat_body, llama_body, llama_events, sglang_body, vllm_body, vllm_events

ROOT = Path(__file__).resolve().parent.parent
URIS = {"openai": "openai:http://answers.invalid/v1?model=toy&tokenizer=fixtures/models/target", "sglang": "sglang:http://answers.invalid?model=toy&tokenizer=fixtures/models/target",
        "llama-cpp": "llama-cpp:http://answers.invalid?model=toy&tokenizer=fixtures/models/target"}
SCRIPT_IMPORTS = {"argparse", "asyncio", "json", "os", "sys", "httpx"}   # python3 + httpx, nothing else


def route(kind: str):
    return build_route(parse_route_uri("candidate", URIS[kind], base=ROOT))


def requests(stream: bool = False) -> list[Request]:
    return [Request(prompt_ids=(1, 2, 3), max_tokens=4, request_id="plain", stream=stream),
            Request(prompt_ids=(1, 2, 3), max_tokens=4, logprobs=2, request_id="logprobs", stream=stream)]


def same_reading(completion, read: dict) -> None:
    """The adapter's Completion and the script reader's answer agree on what both compare."""
    assert read["ids"] == list(completion.token_ids)
    assert read["text"] == completion.text and read["finish"] == completion.finish_reason
    assert read["usage"] == completion.usage_completion_tokens
    if completion.logprobs is not None:
        assert read["logprobs"] == [t.logprob for t in completion.logprobs]


@pytest.mark.parametrize("ids", [[5, 6, 7, 8], [5]])   # a length finish, a stop finish
@pytest.mark.parametrize("kind, build", [("openai", vllm_body), ("sglang", sglang_body), ("llama-cpp", llama_body)])
def test_an_answer_reads_alike_in_the_adapter_and_the_script(kind, build, ids):
    adapter = route(kind)
    for req in requests():
        body = build(ids, req)
        same_reading(adapter.parse_completion(body, req), answer(body))


@pytest.mark.parametrize("ids", [[5, 6, 7, 8], [5]])
def test_a_chat_answer_reads_alike(ids):
    adapter = route("openai")
    for req in requests():
        body = chat_body(ids, req)
        same_reading(adapter._parse_chat(body, req, require_ids=True, latency_s=0.0), answer(body))


@pytest.mark.parametrize("kind, build, events_of", [("openai", vllm_body, vllm_events),
                                                     ("llama-cpp", llama_body, llama_events)])
def test_a_stream_folds_alike(kind, build, events_of):
    adapter = route(kind)
    for req in requests(stream=True):
        events = events_of(build([5, 6, 7, 8], req))
        same_reading(adapter.fold_stream(events, req), fold(events))


def test_llama_cpp_draft_counts_read_alike_in_its_flavour_and_the_script():
    """An answer without draft_n drafted nothing, for the flavour's per-answer evidence and the script alike."""
    from spec_route_suite.routes.flavours import by_name
    llama = by_name("llama.cpp")
    for timings in ({"predicted_n": 4, "draft_n": 6, "draft_n_accepted": 3}, {"predicted_n": 4}):
        body = {"content": "", "tokens": [], "stop_type": "eos", "timings": timings}
        assert answer(body)["drafted"] == llama.per_response(body).draft_tokens


@pytest.mark.parametrize("source", [runtime_source(), WIRE_HELPERS], ids=["repro", "replay"])
def test_the_scripts_carry_the_reader_and_import_nothing_of_the_suite(source):
    tree = ast.parse(source)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= SCRIPT_IMPORTS, imported
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {"answer", "fold", "native_finish", "sglang_finish", "llama_cpp_drafts"} <= defined
    assert source.count("def answer(") == 1
