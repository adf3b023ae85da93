"""The second pair's chat format and the in-process servers' parsers (no model runs).

Why: the agentic checks compare what servers parse out of answers, so the suite's own engines must
parse as vLLM's hermes and deepseek_r1 parsers do, and the pair's files must be what the real engines'
parsers and llama.cpp's converter expect. Proven here: the Jinja template equals its Python twin on every
shape the corpus and the checks render; the markup tokens are single, non-special tokens (kept in decoded
text, marked USER_DEFINED by llama.cpp's converter) and `<|im_end|>` is the EOS; a whole parse and a
block-by-block parse agree on a correct engine whatever the blocks; each planted parser fault changes an
answer only when blocks hold several tokens (a speculative route), never one token at a time (AR);
and the OpenAI reader reassembles streamed call pieces and reads reasoning under both names.
"""
from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from transformers import AutoTokenizer

from spec_route_suite.embedded import PAIR2_DIR, chatml, chatml_corpus, tools
from spec_route_suite.prompts.agentic import parity_prompts
from spec_route_suite.routes.chat import chat_request
from spec_route_suite.routes.base import Completion
from spec_route_suite.routes.wire.chat_output import (PARSER_FAULTS, Markers, ParserFaults, ParserPool,
                                                           parse_answer, parse_whole)
from spec_route_suite.routes.wire.openai_chat import folded_stream, reasoning_of, tool_calls_of

TARGET = PAIR2_DIR / "target"


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(TARGET))


def _shapes():
    rng = random.Random(5)
    conversations = [(chatml_corpus.session_start(rng) + [{"role": "user", "content": "Hi."}],
                      chatml_corpus.offered_tools(rng, None)) for _ in range(6)]
    conversations += [(list(p.messages), list(p.tools)) for p in parity_prompts()]
    odd = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
           {"role": "assistant", "content": "A", "reasoning_content": "R"},
           {"role": "assistant", "content": "x", "tool_calls": [
               {"id": "1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
               {"type": "function", "function": {"name": "g", "arguments": '{"b": 2}'}}]},
           {"role": "tool", "content": "{}"}]
    return conversations + [(odd, None), (odd, [tools.TOOLS["add_numbers"].definition]), (odd[1:], None)]


def test_template_is_the_python_twin_and_is_committed(tok):
    assert json.loads((TARGET / "tokenizer_config.json").read_text())["chat_template"] == chatml.TEMPLATE
    for messages, offered in _shapes():
        for generation in (True, False):
            for thinking in (True, False):
                ours = chatml.render(messages, offered, add_generation_prompt=generation, enable_thinking=thinking)
                assert tok.apply_chat_template(messages, tools=offered, tokenize=False, enable_thinking=thinking,
                                               add_generation_prompt=generation) == ours
    assert tok.apply_chat_template([{"role": "user", "content": "Hi."}], tokenize=False,
                                   add_generation_prompt=True).endswith("<|im_start|>assistant\n<think>\n")


def test_markup_tokens_are_single_non_special_tokens(tok):
    """What vLLM's parsers look up (vocab ids of <think>, </think>, <tool_call>, </tool_call>) and keep in the text,
    and what llama.cpp's converter marks USER_DEFINED (added_tokens_decoder with special false)."""
    config = json.loads((TARGET / "tokenizer_config.json").read_text())
    decoder = {v["content"]: v for v in config["added_tokens_decoder"].values()}
    assert tok.eos_token == chatml.IM_END and tok.eos_token_id == 3 and config["eos_token"] == chatml.IM_END
    for token in chatml.MARKUP_TOKENS:
        ids = tok(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and ids[0] not in tok.all_special_ids, token
        assert tok.decode(ids, skip_special_tokens=True) == token and decoder[token]["special"] is False
    for token in (chatml.IM_START, chatml.IM_END):
        assert decoder[token]["special"] is True and token in tok.all_special_tokens
    markers = Markers.of(tok)
    assert markers.reasoning and markers.tools


def _completion(tok, text: str, blocks=()) -> Completion:
    ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
    return Completion(token_ids=ids, text=tok.decode(list(ids), skip_special_tokens=True), finish_reason="stop",
                      route="r", blocks=tuple(blocks))


def _request(tok, *, stream: bool):
    prompt = parity_prompts()[0]
    return chat_request(tok, prompt.messages, max_tokens=64, request_id="r", tools=prompt.tools, stream=stream)


ANSWERS = (chatml.answer_text("I need the weather in Oslo.", chatml.tool_call_text("get_weather", {"city": "Oslo"})),
           chatml.answer_text("The tool answered.", "It is sunny and 21 degrees in Oslo."),
           chatml.answer_text("I need to add 4 and 5.", chatml.tool_call_text("add_numbers", {"a": 4, "b": 5})))


def _splits(n: int):
    rng = random.Random(n)
    yield [1] * n
    yield [4] * n
    for _ in range(4):
        yield [rng.randint(1, 5) for _ in range(n)]


def test_whole_and_block_parses_agree_on_a_correct_engine(tok):
    for text in ANSWERS:
        whole = parse_answer(_completion(tok, text), _request(tok, stream=False), tok, ParserPool())
        assert whole.reasoning and whole.reasoning.endswith(".\n")
        assert bool(whole.tool_calls) == ("<tool_call>" in text)
        assert whole.finish_reason == ("tool_calls" if whole.tool_calls else "stop")
        for blocks in _splits(len(whole.token_ids)):
            streamed = parse_answer(_completion(tok, text, blocks), _request(tok, stream=True), tok, ParserPool())
            assert (streamed.reasoning, streamed.finish_reason) == (whole.reasoning, whole.finish_reason)
            assert [(c.name, json.loads(c.arguments)) for c in streamed.tool_calls] == \
                   [(c.name, json.loads(c.arguments)) for c in whole.tool_calls]
            # vLLM streams the blank content before a call that its plain message leaves out
            assert streamed.text == whole.text or (whole.tool_calls and not streamed.text.strip() and not whole.text)
            assert tuple(t for d in streamed.chat_deltas for t in d.token_ids) == whole.token_ids


def _parsed(tok, fault: str | None, blocks, texts=ANSWERS):
    pool = ParserPool(ParserFaults(fault))
    out = []
    for text in texts:
        c = parse_answer(_completion(tok, text, blocks(len(tok(text, add_special_tokens=False)["input_ids"]))),
                         _request(tok, stream=True), tok, pool)
        out.append((c.text, c.reasoning, [(t.name, t.arguments) for t in c.tool_calls], c.finish_reason))
    return out


@pytest.mark.parametrize("fault", PARSER_FAULTS)
def test_parser_faults_act_only_on_multi_token_blocks(tok, fault):
    one = lambda n: [1] * n  # noqa: E731
    assert _parsed(tok, fault, one) == _parsed(tok, None, one), "a fault that shows without speculation"
    differs = [blocks for blocks in ((lambda n: [2] * n), (lambda n: [3] * n), (lambda n: [5] * n))
               if _parsed(tok, fault, blocks) != _parsed(tok, None, blocks)]
    assert differs, f"{fault} never changed an answer served in blocks of 2, 3 or 5 tokens"


def test_whole_parse_follows_vllm():
    call = chatml.tool_call_text("get_price", {"item": "lamp"})
    assert parse_whole(f"Hm.\n</think>\n\nSure. {call}", open_thought=True, tools=True)[1] == "\n\nSure. "
    broken = "r\n</think>\n\n<tool_call>\n{\"name\": \"get_price\", \"arguments\": {\"item\"\n</tool_call>"
    assert parse_whole(broken, open_thought=True, tools=True) == ("r\n", "\n\n" + broken.split("\n\n", 1)[1], ())
    assert parse_whole("never closed", open_thought=True, tools=True) == ("never closed", None, ())
    assert parse_whole("no thought", open_thought=False, tools=False) == (None, "no thought", ())
    assert parse_whole(f"x\n</think>\n\n{call}", open_thought=True, tools=False)[2] == ()   # no tools offered


def test_openai_reader_reassembles_stream_pieces():
    deltas = [{"role": "assistant", "content": ""}, {"reasoning": "I need "}, {"reasoning_content": "it."},
              {"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "get_price"}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '{"item": '}}]},
              {"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "add_numbers", "arguments": "{}"}}]},
              {"tool_calls": [{"index": 0, "function": {"arguments": '"lamp"}'}}]}]
    reasoning, calls = folded_stream(deltas)
    assert reasoning == "I need it."
    assert [(c.id, c.name, c.arguments) for c in calls] == [("c0", "get_price", '{"item": "lamp"}'),
                                                            ("c1", "add_numbers", "{}")]
    assert folded_stream([{"content": "x"}]) == (None, ())
    assert reasoning_of({"reasoning": None, "reasoning_content": "r"}) == "r"
    message = {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": {"x": 1}}}]}
    assert tool_calls_of(message)[0].arguments == '{"x": 1}'
    with pytest.raises(ValueError):
        tool_calls_of({"tool_calls": [{"function": {}}]})
    with pytest.raises(ValueError):
        folded_stream([{"tool_calls": [{"function": {"name": "f"}}]}])


def test_faults_are_agentic_faults_of_the_reference_engine():
    from spec_route_suite.reference.faults import FAULTS
    assert {name for name, f in FAULTS.items() if f.family == "agentic"} == set(PARSER_FAULTS)
    assert replace(ParserFaults(), name=None).on("parser_state_carried") is False
