"""Self-tests of the user's prompt sources (--prompts, [prompts]): parsing, the datasets' own layouts, sampling,
and a malformed row or bad source ending the run with exit 4 naming the file and row. Offline: every file is
generated here (spec_route_suite/prompts/samples.py), nothing is downloaded."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spec_route_suite.config import suite_config_from_options
from spec_route_suite.embedded.corpus import render_chat
from spec_route_suite.prompts.loaders import load, source_records
from spec_route_suite.prompts.prompt_set import build_prompt_set, chat_picks, lean_picks, prompt_set
from spec_route_suite.prompts.rows import MalformedRow
from spec_route_suite.prompts.samples import write_samples
from spec_route_suite.prompts.sources import parse_source, sources_from_table
from spec_route_suite.routes.spec import ConfigError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict[str, Path]:
    return write_samples(tmp_path_factory.mktemp("samples"), per_set=12)


def source(text: str, base: Path = Path("/")):
    return parse_source(text, base=base, field_name="prompts[0]")


# ---- parsing: every bad value names its field
def test_sources_parse_kinds_keys_and_hub_ids(samples):
    s = source(f"gsm8k:{samples['gsm8k']}?limit=5&per_category=2&max_tokens=200&shape=chat")
    assert (s.kind, s.local, s.name, s.limit, s.per_category, s.max_tokens, s.shape) == (
        "gsm8k", True, "gsm8k", 5, 2, 200, "chat")
    assert source("gsm8k").location == "openai/gsm8k" and not source("gsm8k").local
    assert source("mbpp:google-research-datasets/mbpp?split=validation").split_name == "validation"
    assert source(f"jsonl:{samples['jsonl']}?limit=all&name=support").limit is None
    assert source(f"jsonl:{samples['jsonl']}").name == "traffic"
    relative = parse_source("jsonl:traffic.jsonl", base=samples["jsonl"].parent, field_name="prompts[0]")
    assert relative.location == str(samples["jsonl"])


@pytest.mark.parametrize("text, field, words", [
    ("poetry:x.jsonl", "prompts[0]", "unknown prompt source 'poetry'"),
    ("jsonl", "prompts[0]", "jsonl needs a path"),
    ("jsonl:/no/such/file.jsonl", "prompts[0]", "no such file"),
    ("gsm8k?limit=0", "prompts[0].limit", "positive integer"),
    ("gsm8k?limit=many", "prompts[0].limit", "or all"),
    ("gsm8k?colour=red", "prompts[0].colour", "unknown key"),
    ("gsm8k?shape=poem", "prompts[0].shape", "text, chat"),
    ("mt_bench?shape=text", "prompts[0].shape", "multi-turn"),
    ("gsm8k?execute=maybe", "prompts[0].execute", "true or false"),
    ("gsm8k?name=a b", "prompts[0].name", "letters"),
])
def test_bad_sources_name_their_field(text, field, words):
    with pytest.raises(ConfigError) as caught:
        source(text)
    assert caught.value.field == field and words in str(caught.value)


def test_routes_file_table_and_duplicate_names(samples):
    base = samples["jsonl"].parent
    table = {"sources": ["gsm8k:gsm8k", {"kind": "jsonl", "path": "traffic.jsonl", "per_category": 1}],
             "limit": 7, "per_category": 3}
    gsm8k, traffic = sources_from_table(table, base=base)
    assert (gsm8k.limit, gsm8k.per_category, traffic.per_category, traffic.location) == (
        7, 3, 1, str(samples["jsonl"]))
    with pytest.raises(ConfigError, match=r"prompts.sources\[1\].limit"):
        sources_from_table({"sources": ["gsm8k", {"kind": "jsonl", "path": "traffic.jsonl", "limit": -1}]}, base=base)
    with pytest.raises(ConfigError, match=r"prompts.sources\[1\].name: a second source named 'gsm8k'"):
        sources_from_table({"sources": ["gsm8k", "gsm8k:gsm8k"]}, base=base)
    routes = base / "routes.toml"
    routes.write_text(f'[baseline]\nkind = "reference"\n[candidate]\nkind = "reference"\n'
                      f'[prompts]\nsources = ["jsonl:traffic.jsonl?limit=3"]\n')
    suite = suite_config_from_options({"routes": str(routes)}, invocation_dir=ROOT)
    assert [s.location for s in suite.prompt_sources] == [str(samples["jsonl"])]
    assert suite.public_dict()["prompts"][0]["limit"] == 3 and suite.categories == ()
    cli = suite_config_from_options({"routes": str(routes), "prompts": [f"gsm8k:{samples['gsm8k']}"]},
                                    invocation_dir=ROOT)
    assert [s.kind for s in cli.prompt_sources] == ["gsm8k"], "--prompts replaces the file's [prompts]"


# ---- the datasets' own layouts
def test_layouts_map_to_records_in_the_prompt_set_convention(samples):
    gsm8k = load("gsm8k", samples["gsm8k"])
    assert len(gsm8k) == 12, "the folder's test split of the main config, not train"
    first = gsm8k[0]
    assert first.text.startswith("<s>Question: ") and first.text.endswith("\nAnswer:") and first.scorer == "number"
    assert first.answer.isdigit() and first.id == "gsm8k-0" and first.group == ("gsm8k", "math")
    chat_gsm8k = load("gsm8k", samples["gsm8k"], shape="chat")[0]
    assert chat_gsm8k.messages == (("user", first.text[len("<s>Question: "):-len("\nAnswer:")]),)

    mt = load("mt_bench", samples["mt_bench"])
    assert mt[0].id == "mt_bench-81" and mt[0].category == "writing" and mt[0].scorer == "parity"
    assert len(mt[0].messages) == 1 and len(mt[0].followups) == 1
    assert mt[0].text == render_chat(mt[0].messages, add_generation_prompt=True)

    humaneval = load("humaneval", samples["humaneval"])[0]
    assert humaneval.id == "humaneval-0" and humaneval.scorer == "code" and "check(" in humaneval.tests
    assert humaneval.text.startswith("<s># ") and humaneval.messages is None
    mbpp = load("mbpp", samples["mbpp"])[0]
    assert mbpp.id == "mbpp-11" and "Your code should pass these tests" in mbpp.text and mbpp.tests.count("assert")

    traffic = {r.category: r for r in load("jsonl", samples["jsonl"])}
    assert traffic["extraction"].max_tokens == 40 and traffic["extraction"].stop == ("}",)
    assert traffic["support"].messages[-1][0] == "user" and traffic["support"].scorer == "contains"
    assert traffic["math"].scorer == "number" and traffic["code"].scorer == "parity"
    assert traffic["code"].text.startswith("<s>") and traffic["code"].id.startswith("traffic-t")
    assert load("jsonl", samples["jsonl"], max_tokens=99)[1].max_tokens == 99, "the source's default budget"


def test_a_dataset_saved_by_datasets_loads_too(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"question": "Ann has 2 cups. Ann buys 3 more. How many cups does Ann have now?",
             "answer": "2 + 3 = 5\n#### 5"}]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    (record,) = load("gsm8k", tmp_path / "saved")
    assert record.answer == "5" and "Ann has 2 cups" in record.text


# ---- malformed rows: exit 4 naming the file and the row
def _jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("kind, rows, words", [
    ("jsonl", [{"id": 1, "text": "a"}, "{not json"], "row 2: not JSON"),
    ("jsonl", [{"id": 1, "text": "a"}, [1, 2]], "row 2: expected a JSON object"),
    ("jsonl", [{"id": 1}], "row 1: missing column 'text' or 'messages'"),
    ("jsonl", [{"id": 1, "text": "a", "messages": [{"role": "user", "content": "b"}]}], "both 'text' and 'messages'"),
    ("jsonl", [{"id": 1, "messages": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]}],
     "the last message must be the user's"),
    ("jsonl", [{"id": 1, "text": "a", "max_tokens": -3}], "'max_tokens' must be a positive integer"),
    ("jsonl", [{"id": 1, "text": "a"}, {"id": 1, "text": "b"}], "row 2: id 'x-1' repeats"),
    ("gsm8k", [{"question": "q", "answer": "no final answer"}], "row 1: column 'answer' has no final answer"),
    ("mt_bench", [{"question_id": 1, "category": "writing", "turns": []}], "'turns' must be a non-empty list"),
    ("mbpp", [{"task_id": 3, "text": "t", "code": "c", "test_list": "assert f()", "test_setup_code": 5}],
     "'test_setup_code' must be a string"),
])
def test_malformed_rows_name_file_and_row(tmp_path, kind, rows, words):
    path = _jsonl(tmp_path / "x.jsonl", rows)
    with pytest.raises(MalformedRow) as caught:
        source_records(source(f"{kind}:{path}"))
    assert str(path) in str(caught.value) and words in str(caught.value), str(caught.value)
    assert caught.value.field == "prompts[0]"


def test_a_broken_parquet_file_is_named(tmp_path):
    path = tmp_path / "test-00000-of-00001.parquet"
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(MalformedRow, match="not a readable Parquet file"):
        source_records(source(f"parquet:{path}"))


def test_the_suite_exits_4_naming_the_bad_row(tmp_path):
    bad = _jsonl(tmp_path / "traffic.jsonl", [{"id": "a", "text": "fine"}, {"id": "b", "txt": "typo"}])
    done = subprocess.run([sys.executable, "-m", "spec_route_suite", "--collect-only", "-q", "-p", "no:xdist",
                           "--prompts", f"jsonl:{bad}", "--report-dir", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"prompts[0]: {bad} row 2: missing column 'text' or 'messages'" in done.stderr


# ---- sampling and selection
def test_sampling_is_seeded_per_source_and_category(samples):
    traffic = source(f"jsonl:{samples['jsonl']}?per_category=1")
    gsm8k = source(f"gsm8k:{samples['gsm8k']}?limit=4")

    def ids(seed, categories=()):
        return [r.id for r in build_prompt_set((gsm8k, traffic), seed=seed, categories=categories,
                                               prompt_limit=None).records]
    assert ids(0) == ids(0) and ids(0) != ids(1)
    chosen = build_prompt_set((gsm8k, traffic), seed=0, categories=(), prompt_limit=None)
    assert [r.category for r in chosen.records].count("math") == 5, "4 GSM8K rows + 1 traffic math row"
    assert "4 of 12 rows drawn with seed 0" in chosen.notes[0]
    assert {r.category for r in build_prompt_set((gsm8k, traffic), seed=0, categories=("support",),
                                                 prompt_limit=None).records} == {"support"}
    with pytest.raises(ConfigError, match="no prompt of category 'poetry'.*their categories: math, "):
        build_prompt_set((gsm8k, traffic), seed=0, categories=("poetry",), prompt_limit=None)
    lean = [r.group for r in lean_picks(chosen.records, 6)]
    assert [source for source, _ in lean] == ["gsm8k", "traffic"] * 3, "each source in turn"
    assert len(set(lean[1::2])) == 3, "and within a source each category in turn"
    assert [r.id for r in chat_picks(chosen.records, 2, user=True)] == [r.id for r in chosen.records if r.messages]


def test_no_sources_keeps_the_fixture_prompts():
    suite = suite_config_from_options({"prompt_limit": "2"}, invocation_dir=ROOT)
    fixture = prompt_set(suite)
    assert not fixture.user and len(fixture.records) == 10 and len(fixture.pool) == 70
    assert {r.source for r in fixture.records} == {"fixture"}


def test_row_ids_are_safe_in_test_ids_and_file_names(tmp_path):
    path = _jsonl(tmp_path / "t.jsonl", [{"id": "a b/[1]", "text": "x"}])
    assert [r.id for r in source_records(source(f"jsonl:{path}"))] == ["t-a_b__1_"]
