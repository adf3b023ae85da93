"""The route suite on the second embedded pair: nothing in the checks may lean on the first pair.

The second pair (fixtures/models/pair2) differs from the first wherever a check could silently
depend on it: tokenizer family (sentencepiece BPE: word-start marker, one token per digit, byte
fallback), special-token ids (its EOS <|im_end|> is 3, not 2), vocabulary size, architecture (Mistral with
grouped-query attention, head_dim 64), prompt lengths in tokens, and its chat template (ChatML with
Hermes tool calls and <think> reasoning, spec_route_suite/embedded/chatml.py: chat prompts render unlike the
stored prompt texts, and answers open with a thought the servers' parsers split out). The suite runs on it as a user
runs it (a pytest subprocess writing a run folder): in process (transformers AR vs assisted
generation with the pair's own draft), and over HTTP through the in-process OpenAI-compatible
server (transformers AR vs the reference speculative engine). In each run one candidate is correct
and must pass with no route error, and one has a planted greedy divergence that must be caught,
at the same budget.
"""
from __future__ import annotations

import contextlib
import json
import random
import re
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoTokenizer

from spec_route_suite.embedded import DRAFT_DIR, PAIR2_DIR, TARGET_DIR, chatml
from spec_route_suite.training import evaluate as ev
from spec_route_suite.embedded.chatml_corpus import MAKERS
from spec_route_suite.training.tokenizer import SP_SPECIAL_TOKENS
from spec_route_suite.prompts.encode import encode_record
from spec_route_suite.prompts.records import CATEGORIES, load_prompt_set
from spec_route_suite.routes.wire.chat_output import parse_whole
from spec_route_suite.servers.inprocess import serve_in_thread
from tests.test_suite_end_to_end import run_suite

TARGET, DRAFT = PAIR2_DIR / "target", PAIR2_DIR / "draft"
MAX_BYTES = 5 * 1024 * 1024
PLANT_AT = 3
LEAN = ("-n", "2", "--prompt-limit", "1", "--categories", "math,chat", "--max-new-tokens", "16", "-q",
        "-k", "not near_tie", "--concurrency", "4", "--stress-requests", "16")


def test_second_pair_differs_where_checks_could_lean():
    """The premise of this module: the pairs really differ in tokenizer, special ids and architecture."""
    first, second = AutoTokenizer.from_pretrained(str(TARGET_DIR)), AutoTokenizer.from_pretrained(str(TARGET))
    assert second.eos_token_id != first.eos_token_id and len(second) != len(first)
    text = "<s>Question: Ann has 12 cups.\nAnswer:"
    assert second.convert_ids_to_tokens(second(text)["input_ids"]) != first.convert_ids_to_tokens(first(text)["input_ids"])
    assert second.decode(second(text)["input_ids"]) == text
    configs = [AutoConfig.from_pretrained(str(d)) for d in (TARGET_DIR, TARGET, DRAFT)]
    assert configs[0].model_type == "llama" and {c.model_type for c in configs[1:]} == {"mistral"}
    assert configs[1].eos_token_id == configs[2].eos_token_id == second.eos_token_id
    assert AutoConfig.from_pretrained(str(DRAFT_DIR)).model_type == "llama"


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return ev.load_pair(PAIR2_DIR)


@pytest.mark.parametrize("shape", sorted(MAKERS))
def test_tokenizer_round_trips_and_matches_its_sentencepiece_model(pair, shape):
    """tokenizer.json (what transformers and vLLM use) segments exactly like tokenizer.model (what llama.cpp reads)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(TARGET / "tokenizer.model"))
    tok = pair.tokenizer
    text = MAKERS[shape](random.Random(3), "heldout").text
    ids = ev.encode(tok, text)
    assert tok.decode(ids) == text and ids[0] == tok.bos_token_id
    assert tok(text, add_special_tokens=True)["input_ids"] == ids
    specials = "(" + "|".join(re.escape(t) for t in SP_SPECIAL_TOKENS) + ")"
    expected = [i for part in re.split(specials, text) if part
                for i in ([sp.piece_to_id(part)] if part in SP_SPECIAL_TOKENS else sp.encode(part))]
    assert ids == expected


def test_chat_template_is_chatml_not_the_prompt_sets_format(pair):
    """The pair's own template renders the prompt set's chats (stored in the first pair's markup) as ChatML, with
    the generation prompt opening a thought; plain prompts are sent as stored."""
    chat = next(r for r in load_prompt_set(["chat"]) if r.messages)
    msgs = [{"role": r, "content": c} for r, c in chat.messages]
    rendered = pair.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert rendered == chatml.render(msgs, add_generation_prompt=True) != chat.text
    assert rendered.startswith("<s><|im_start|>") and rendered.endswith("<|im_start|>assistant\n<think>\n")
    assert encode_record(pair.tokenizer, chat) == tuple(ev.encode(pair.tokenizer, rendered))


def test_model_configs_fit_every_engine_and_the_size_budget(pair):
    for model in (pair.target, pair.draft):
        c = model.config
        assert c.head_dim == 64 and c.num_attention_heads * c.head_dim == c.hidden_size  # never 16 (vLLM CPU)
        assert c.max_position_embeddings >= 512 and c.vocab_size == len(pair.tokenizer) == 1024
        assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (pair.tokenizer.bos_token_id,
                                                                   pair.tokenizer.eos_token_id, pair.tokenizer.pad_token_id)
    assert pair.draft.num_parameters() < pair.target.num_parameters()
    assert pair.target.config.num_key_value_heads < pair.target.config.num_attention_heads  # grouped-query
    assert (TARGET / "tokenizer.json").read_bytes() == (DRAFT / "tokenizer.json").read_bytes()
    total = sum(f.stat().st_size for d in (TARGET, DRAFT) for f in d.rglob("*") if f.is_file())
    assert total <= MAX_BYTES
    info = json.loads((TARGET / "training.json").read_text())
    assert info["pair"] == "pair2" and info["role"] == "target"


# What a sensible answer looks like per category: the pair trains in minutes, so it answers in the
# corpus's form (a worked sum, a well-formed record, a reply naming what was asked) though mostly
# not with the right value; the suite compares routes with each other, never with the answer.
# A chat answer opens with a brief thought (closed by </think>) before the reply.
ANSWER_FORMS = {
    "math": r" \d+ [+-] \d+ = \d+\. The answer is \d+\.",
    "json": r' \{"(name|item)": "\w+", "(age|color)": \S+, "(city|price)": \S+\}',
    "chat": r"Your? [\w ,-]+\.",
}


def test_target_answers_in_form_and_the_draft_drafts(pair):
    """Sensible greedy answers on the fixture prompts (chats in the pair's own template), and drafts the target
    accepts."""
    for r in [r for c in ANSWER_FORMS for r in load_prompt_set([c])[:4]]:
        out = ev.greedy(pair.target, list(encode_record(pair.tokenizer, r)), 48)
        text = pair.tokenizer.decode(out, skip_special_tokens=True)
        assert out[-1] == pair.tokenizer.eos_token_id, (r.id, text)
        if r.category == "chat":
            thought, text, _ = parse_whole(text, open_thought=True, tools=False)
            assert thought and thought.strip() and text.startswith("\n\n"), (r.id, thought, text)
            text = text.strip()
        assert re.fullmatch(ANSWER_FORMS[r.category], text), (r.id, text)
    subset = [r for c in CATEGORIES for r in load_prompt_set([c])[:1]]
    assert ev.mean_acceptance(pair, subset)["overall"] >= ev.GATES["pair2"].acceptance


def routes_file(path: Path, baseline: str, candidates: dict[str, str]) -> Path:
    """[baseline] and [candidates.NAME] tables from TOML bodies, with pair 2's tokenizer everywhere."""
    tables = [f"[baseline]\n{baseline}"] + [f"[candidates.{name}]\n{body}" for name, body in candidates.items()]
    path.write_text("\n\n".join(tables) + "\n")
    return path


def served(base_url: str, **options: str) -> str:
    extra = "".join(f'\noptions = {{ {k} = "{v}" }}' for k, v in options.items())
    return (f'kind = "openai"\nbase_url = "{base_url}"\nmodel = "pair2"\ntokenizer = "{TARGET}"\n'
            f"timeouts = {{ connect = 10, request = 120 }}{extra}")


def params(nodeid: str) -> list[str]:
    """The dash-separated parameters of a test id, e.g. [chat-00-planted-plain] (route names have no dash)."""
    return nodeid.partition("[")[2].rstrip("]").split("-")


def assert_judged(result, report: dict, *, planted: str, correct: tuple[str, ...]) -> None:
    """Every correct candidate passes all it ran; every finding is the planted one's divergence."""
    out = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 1, out
    assert report["complete"] and not report["crashed_workers"], out
    assert report["findings_accounting"]["lost"] == 0
    assert [f for f in report["findings"] if f["severity"] == "error"] == [], "a route error caused by our requests"
    flagged = [f for f in report["findings"] if f["severity"] in ("bug", "error", "warning")]
    assert {f["route"] for f in flagged} == {planted}, out
    greedy = [f for f in flagged if f["check"] == "greedy"]
    assert {f["details"]["divergence"]["position"] for f in greedy} == {PLANT_AT}
    failed = [t["nodeid"] for t in report["tests"] if t["outcome"] in ("failed", "error")]
    assert failed and all(planted in params(nodeid) for nodeid in failed), failed
    for name in correct:
        judged = {t["check"] for t in report["tests"] if t["outcome"] == "passed" and name in params(t["nodeid"])}
        assert judged >= {"greedy", "streaming", "mixing"}, (name, judged)
        assert report["acceptance"][name]["mean_acceptance_length"] > 1.0


def test_suite_judges_the_second_pair_in_process_and_served(tmp_path):
    """One run against an in-process AR baseline: transformers' assisted generation (in process) and the
    reference speculative engine served over HTTP must pass; the served engine with a planted greedy
    divergence must be caught at that position, at the same budget."""
    assisted = f'kind = "hf"\nmodel = "{TARGET}"\ndraft = "{DRAFT}"\nnum_assistant_tokens = 4'
    engine = f"reference:{TARGET}?draft={DRAFT}"
    with contextlib.ExitStack() as servers:
        urls = {}
        for name, uri in {"reference": engine, "planted": f"{engine}&plant=divergence@{PLANT_AT}"}.items():
            urls[name], stop = serve_in_thread(uri, model_name="pair2")
            servers.callback(stop)
        routes = routes_file(tmp_path / "routes.toml", f'kind = "hf"\nmodel = "{TARGET}"', {
            "assisted": assisted, "reference": served(urls["reference"]), "planted": served(urls["planted"])})
        result, report = run_suite(tmp_path, "--routes", str(routes), *LEAN,
                                   paths=("equivalence/test_greedy.py", "equivalence/test_streaming.py",
                                          "stressors/test_mixing.py"))
    assert_judged(result, report, planted="planted", correct=("assisted", "reference"))
