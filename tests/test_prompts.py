"""Self-tests of the prompt sets: committed fixtures and the benchmark loaders (offline)."""
from __future__ import annotations

import json
import re

import datasets
import pytest
from transformers import AutoTokenizer

from spec_route_suite.embedded import TARGET_DIR
from spec_route_suite.embedded.corpus import render_chat
from spec_route_suite.prompts import build
from spec_route_suite.prompts.loaders import (gsm8k_final_answer, load_gsm8k, load_humaneval, load_mbpp,
                                      load_mt_bench)
from spec_route_suite.prompts.records import CATEGORIES, DATA_DIR, PromptRecord, load_prompt_set, read_jsonl


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(TARGET_DIR))


@pytest.fixture(scope="module")
def prompts():
    return load_prompt_set()


def test_all_categories_present(prompts):
    counts = {c: sum(r.category == c for r in prompts) for c in CATEGORIES}
    assert all(12 <= n <= 16 for n in counts.values()), counts
    assert len({r.id for r in prompts}) == len(prompts)
    assert [r.category for r in load_prompt_set(["json"])] == ["json"] * counts["json"]


def test_unknown_category_rejected():
    with pytest.raises(ValueError, match="unknown prompt categories"):
        load_prompt_set(["poetry"])


def test_record_round_trip(prompts):
    for r in prompts:
        assert PromptRecord.from_dict(json.loads(json.dumps(r.to_dict()))) == r


def test_committed_files_match_build(tok):
    """The JSONL is reproducible from the seed: regenerate and compare."""
    for cat, recs in build.build(tok).items():
        assert read_jsonl(DATA_DIR / f"{cat}.jsonl") == recs


def test_answers_and_messages(prompts, tok):
    for r in prompts:
        assert r.text.startswith("<s>")
        if r.category == "math":
            assert r.answer is not None and r.answer.isdigit()
        if r.category in ("chat", "long"):
            assert r.messages is not None and r.answer
            assert r.text == render_chat(r.messages, add_generation_prompt=True)
            assert r.text == tok.apply_chat_template(r.chat_messages(), tokenize=False,
                                                     add_generation_prompt=True)
            assert r.answer in r.messages[1][1] or any(r.answer in c for _, c in r.messages)
    recalled = [r.answer for r in prompts if r.category in ("chat", "long")]
    assert len(set(recalled)) == len(recalled)  # distinct facts make leakage attributable


def test_long_prompts_fit(prompts, tok):
    for r in prompts:
        n = len(tok(r.text, add_special_tokens=False)["input_ids"])
        if r.category == "long":
            assert 400 <= n
        assert n + 64 <= 512


# ---- loaders on local files in each dataset's real column layout (no network)
def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gsm8k_local_jsonl(tmp_path):
    rows = [{"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = <<3+2=5>>5\n#### 5"},
            {"question": "A shop sells 1,200 pens a day. How many in 2 days?",
             "answer": "1200 * 2 = 2400\n#### 2,400"}]
    recs = load_gsm8k(_jsonl(tmp_path / "test.jsonl", rows))
    assert [r.answer for r in recs] == ["5", "2400"]
    assert recs[0].text == "<s>Question: Tom has 3 apples and buys 2. How many?\nAnswer:"
    assert {(r.category, r.source) for r in recs} == {("math", "gsm8k")}
    assert gsm8k_final_answer("no marker") is None


def test_mt_bench_local_jsonl(tmp_path, tok):
    rows = [{"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now rhyme it."]},
            {"question_id": 82, "category": "math", "turns": ["What is 2+2?", "And 3+3?"],
             "reference": ["4", "6"]}]
    path = _jsonl(tmp_path / "question.jsonl", rows)
    recs = load_mt_bench(path)
    assert [r.id for r in recs] == ["mt_bench-81", "mt_bench-82"]
    assert recs[0].messages == (("user", "Write a haiku."),) and recs[0].followups == ("Now rhyme it.",)
    assert recs[0].text == "<s><|user|>\nWrite a haiku.\n<|assistant|>\n"
    from spec_route_suite.prompts.encode import native_text
    assert native_text(tok, recs[0]) == recs[0].text, "the route tokenizer's own template renders it alike"


def test_humaneval_local_parquet(tmp_path):
    rows = [{"task_id": "HumanEval/0", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n",
             "canonical_solution": "    return a + b\n", "test": "def check(f):\n    assert f(1, 2) == 3\n",
             "entry_point": "add"}]
    path = tmp_path / "test-00000-of-00001.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    (rec,) = load_humaneval(path)
    assert (rec.id, rec.category, rec.source) == ("humaneval-0", "code", "humaneval")
    assert rec.text == "<s>" + rows[0]["prompt"] and rec.answer == rows[0]["canonical_solution"]
    assert rec.tests == rows[0]["test"] + "\n\ncheck(add)\n"


def test_mbpp_local_dir(tmp_path):
    rows = [{"task_id": 11, "text": "Write a function to remove a character.",
             "code": "def remove_Occ(s, ch):\n    return s.replace(ch, '')",
             "test_list": ["assert remove_Occ('hello', 'l') == 'heo'", "assert remove_Occ('ab', 'a') == 'b'"],
             "test_setup_code": "", "challenge_test_list": []}]
    _jsonl(tmp_path / "mbpp.jsonl", rows)
    (rec,) = load_mbpp(tmp_path)  # a directory of files works too
    assert rec.id == "mbpp-11" and rec.category == "code"
    assert "remove a character" in rec.text
    assert re.search(r"assert remove_Occ\('ab', 'a'\) == 'b'", rec.text)


@pytest.mark.parametrize("shape", ["math", "code", "json", "chat", "long"])
def test_prompt_ends_on_token_boundary(tok, shape):
    """A prompt must tokenize as a prefix of its training document, or the model sees
    a token sequence it never trained on (e.g. a trailing "\\n" merged with indentation)."""
    import random

    from spec_route_suite.embedded.corpus import MAKERS

    rng = random.Random(11)
    for _ in range(20):
        s = MAKERS[shape](rng, "heldout")
        prompt_ids = tok(s.prompt, add_special_tokens=False)["input_ids"]
        full_ids = tok(s.text, add_special_tokens=False)["input_ids"]
        assert full_ids[: len(prompt_ids)] == prompt_ids


def test_records_render_in_the_route_tokenizers_own_format(prompts):
    """The first pair gets the stored texts unchanged; the second pair (ChatML, its own template) gets the stored
    plain texts and its own rendering of the chats; a tokenizer with another chat template and BOS gets its own."""
    from spec_route_suite.embedded import PAIR2_DIR, chatml
    from spec_route_suite.prompts.encode import encode_record, native_text
    from spec_route_suite.tokenizers import encode_prompt
    records = list(prompts)
    ours = AutoTokenizer.from_pretrained(str(TARGET_DIR))
    assert all(native_text(ours, r) == r.text for r in records)
    assert all(encode_record(ours, r) == encode_prompt(ours, r.text) for r in records[:10])
    second = AutoTokenizer.from_pretrained(str(PAIR2_DIR / "target"))
    for r in records:
        want = (chatml.render([{"role": a, "content": b} for a, b in r.messages], add_generation_prompt=True)
                if r.messages else r.text)
        assert native_text(second, r) == want, r.id
    foreign = AutoTokenizer.from_pretrained(str(TARGET_DIR))
    foreign.chat_template = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
                             "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}<|start_header_id|>assistant<|end_header_id|>\n\n")
    foreign.bos_token = "<|begin_of_text|>"
    chat = next(r for r in records if r.messages)
    plain = next(r for r in records if not r.messages)
    rendered = native_text(foreign, chat)
    assert rendered.startswith("<|begin_of_text|><|start_header_id|>") and "<|user|>" not in rendered
    assert rendered.rstrip("\n").endswith("<|start_header_id|>assistant<|end_header_id|>")
    assert native_text(foreign, plain) == "<|begin_of_text|>" + plain.text[len("<s>"):]
    foreign.chat_template = None
    assert native_text(foreign, chat) == chat.text.replace("<s>", "<|begin_of_text|>", 1)
    foreign.chat_template = "{{ raise_exception('System role not supported') }}"   # as some real templates do
    assert native_text(foreign, chat) == chat.text.replace("<s>", "<|begin_of_text|>", 1)
