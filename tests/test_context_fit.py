"""Context limits: prompts sized into the routes' context, canary workloads for any tokenizer, exit 4 when too small.

The end-to-end proof serves the reference engine with max_context=192 through the in-process
OpenAI server, which refuses over-long requests the way vLLM does and records each refusal;
the control shows that it does refuse one, the run shows the suite sent none and says what it trimmed.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from spec_route_suite.embedded import TARGET_DIR, corpus
from spec_route_suite.training.tokenizer import SPECIAL_TOKENS, train_tokenizer
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.fit import (SCORING_RESERVE, ContextFit, ContextTooSmall, FittedPrompts,
                                                   RouteContext, route_context, suite_prompts)
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.spec import ConfigError, parse_route_uri, spec_from_table
from spec_route_suite.servers.inprocess import build_engine, make_server
from spec_route_suite.stressors.canary import (FILLERS, SHARED_TURNS, WorkloadDoesNotFit, build_workload,
                                               longest_question, renderer)
from spec_route_suite.stressors.mixing.detect import context_probe_request

ROOT = Path(__file__).resolve().parent.parent
SMALL_CONTEXT = 192
POOL = 96  # the batched budget's pool: the size that ran out of canary values before


@pytest.fixture(scope="module")
def ours():
    return load_tokenizer(str(TARGET_DIR))


@pytest.fixture(scope="module")
def byte_level():
    """A byte-level BPE with no merges to speak of: about one token per character of our corpus."""
    texts = [corpus.render_chat([("user", q), ("assistant", a)]) for q, a in FILLERS]
    return train_tokenizer(texts, vocab_size=len(SPECIAL_TOKENS) + 256)


# ---- configuration ----
def test_max_context_from_route_file_and_uri():
    table = spec_from_table("candidate", {"kind": "reference", "max_context": 256}, base=ROOT, environ={})
    uri = parse_route_uri("baseline", "openai:http://127.0.0.1:8000/v1?model=m&tokenizer=fixtures/models/target&max_context=300", base=ROOT, environ={})
    assert (table.max_context, uri.max_context) == (256, 300)
    assert table.public_dict()["max_context"] == 256
    assert parse_route_uri("baseline", "reference:", base=ROOT, environ={}).max_context is None


@pytest.mark.parametrize("value", [0, -5, "many", True, 1.5])
def test_bad_max_context_names_the_field(value):
    with pytest.raises(ConfigError) as excinfo:
        spec_from_table("candidate", {"kind": "reference", "max_context": value}, base=ROOT, environ={})
    assert excinfo.value.field == "candidate.max_context"


# ---- the fitting rule ----
def test_route_context_takes_the_smaller_and_says_where_it_came_from():
    spec = parse_route_uri("candidate", "reference:?max_context=192", base=ROOT, environ={})
    assert route_context(spec, 512) == RouteContext("candidate", 192, "max_context; the route reports 512")
    assert route_context(spec, 128).tokens == 128
    plain = parse_route_uri("baseline", "reference:", base=ROOT, environ={})
    assert route_context(plain, 512).source == "reported by the route"
    assert route_context(plain, None).tokens is None


def test_trim_keeps_bos_and_the_end_and_fits():
    fit = ContextFit((RouteContext("baseline", 512, "x"), RouteContext("candidate", 100, "y")))
    assert fit.limit == 100 and fit.room(20) == 100 - 20 - SCORING_RESERVE
    ids = tuple(range(1, 201))
    trimmed = fit.trim(ids, 20, keep_first=True)
    assert len(trimmed) == fit.room(20) and trimmed[0] == 1 and trimmed[-1] == 200
    assert trimmed[1:] == ids[-(len(trimmed) - 1):]
    assert fit.trim(ids[:50], 20, keep_first=True) == ids[:50]
    assert ContextFit((RouteContext("b", None, "?"),)).trim(ids, 20, keep_first=True) == ids


def test_fitted_prompts_note_what_they_trim(ours):
    fit = ContextFit((RouteContext("baseline", 512, "reported by the route"),
                      RouteContext("candidate", SMALL_CONTEXT, "max_context")))
    fitted = FittedPrompts(ours, fit, max_tokens=64)
    records = suite_prompts(("math", "long"), None)
    assert all(len(fitted.ids(r)) + 64 + SCORING_RESERVE <= SMALL_CONTEXT for r in records)
    long = [r for r in records if r.category == "long"]
    assert all(len(fitted.full(r)) > len(fitted.ids(r)) for r in long)
    assert all(fitted.ids(r) == encode_prompt(ours, r.text) for r in records if r.category == "math")
    note = fitted.note(records)
    assert f"context {SMALL_CONTEXT} tokens" in note and f"{len(long)} long" in note and "math" not in note
    assert FittedPrompts(ours, ContextFit((RouteContext("b", 512, "r"),)), max_tokens=64).note(records) is None


def test_no_room_for_a_prompt_is_a_config_error_naming_the_route(ours):
    fit = ContextFit((RouteContext("baseline", 512, "r"), RouteContext("candidate", 64, "max_context")))
    with pytest.raises(ContextTooSmall) as excinfo:
        FittedPrompts(ours, fit, max_tokens=64)
    assert excinfo.value.field == "candidate.max_context" and "context 64 tokens" in str(excinfo.value)


# ---- canary workloads for any tokenizer and context ----
def assert_fits(workload, tokenizer, room: int) -> None:
    render = renderer(tokenizer)
    assert len(workload.items) == POOL
    assert all(len(item.prompt_ids) <= room for item in workload.items)
    recall = list(workload.recall())
    rng = random.Random(0)
    for victim, neighbour in (rng.sample(recall, 2) for _ in range(150)):  # mixing's context probes fit too
        probe = context_probe_request(victim=victim, neighbour=neighbour, render=render, max_tokens=1)
        assert len(probe.prompt_ids) <= room


@pytest.mark.parametrize("room", [463, 400])
def test_workload_builds_for_a_much_less_efficient_tokenizer(byte_level, ours, room):
    """The bug: long conversations were discarded with their canary values taken, until the values ran out."""
    sample = "Good morning to you too."
    assert len(encode_prompt(byte_level, sample)) > 3 * len(encode_prompt(ours, sample))
    workload = build_workload(byte_level, size=POOL, seed=0, max_prompt_tokens=room)
    assert_fits(workload, byte_level, room)
    assert workload.cut and workload.dropped_fillers > 0
    assert {i.length for i in workload.recall()} == {"short", "medium", "long"}


def test_workload_for_our_tokenizer_is_left_whole(ours):
    workload = build_workload(ours, size=POOL, seed=0, max_prompt_tokens=463)
    assert_fits(workload, ours, 463)
    assert not workload.cut and workload.shared_turns == len(SHARED_TURNS)


def test_workload_for_a_tiny_context_shortens_the_shared_prefix(ours):
    room = SMALL_CONTEXT - 48 - SCORING_RESERVE
    workload = build_workload(ours, size=POOL, seed=0, max_prompt_tokens=room)
    assert_fits(workload, ours, room)
    assert 0 <= workload.shared_turns < len(SHARED_TURNS) and workload.prefix_tokens > 0
    assert f"room of {room}" in workload.sizing()


def test_workload_too_large_for_the_context_says_how_much_it_needs(ours, byte_level):
    with pytest.raises(WorkloadDoesNotFit) as excinfo:
        build_workload(byte_level, size=POOL, seed=0, max_prompt_tokens=120)
    assert excinfo.value.needed > 120 and excinfo.value.room == 120
    assert len(encode_prompt(byte_level, longest_question(byte_level))) >= len(
        encode_prompt(byte_level, "What is my name?"))


# ---- the suite against a server with a small context ----
def run_suite(tmp_path: Path, *args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict | None]:
    report_dir = tmp_path / "out"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--report-dir", str(report_dir), *args]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    runs = sorted(report_dir.glob("*/report.json"))
    return result, json.loads(runs[0].read_text()) if runs else None


@pytest.fixture(scope="module")
def small_server():
    """The reference engine served with max_model_len 192; `engine.refused` lists what it refused."""
    engine = build_engine(f"reference:?max_context={SMALL_CONTEXT}", model_name="tiny", base=ROOT)
    servers = [make_server(engine) for _ in range(2)]   # two endpoints: a candidate may not be the baseline's own
    for httpd in servers:
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield engine, *(f"openai:http://127.0.0.1:{httpd.server_address[1]}/v1?model=tiny&tokenizer=fixtures/models/target" for httpd in servers)
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()
    engine.close()


def test_server_refuses_and_records_an_over_long_request(small_server, ours):
    """Control: without fitting, a long prompt is refused (HTTP 400) and recorded."""
    engine, uri, _ = small_server
    prompt = encode_prompt(ours, suite_prompts(("long",), 1)[0].text)
    base_url = uri.removeprefix("openai:").split("?")[0]
    answer = httpx.post(f"{base_url}/completions", json={"model": "tiny", "prompt": list(prompt), "max_tokens": 64,
                                                          "temperature": 0}, timeout=60)
    assert answer.status_code == 400 and "maximum context length is 192" in answer.text
    assert len(engine.refused) == 1
    assert httpx.get(f"{base_url}/models", timeout=10).json()["data"][0]["max_model_len"] == SMALL_CONTEXT
    engine.refused.clear()


def test_small_context_route_gets_no_request_it_must_refuse(tmp_path, small_server):
    engine, uri, other_uri = small_server
    result, report = run_suite(
        tmp_path, "-n", "2", "equivalence/test_greedy.py", "equivalence/test_boundaries.py",
        "equivalence/test_logprobs.py", "stressors/test_mixing.py",
        "--baseline", uri, "--candidate", other_uri, "--categories", "long,chat", "--prompt-limit", "2",
        "--concurrency", "1,4", "--stress-requests", "24")
    assert engine.refused == [], engine.refused[:3]
    assert report is not None, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, result.stdout[-3000:]
    assert not [f for f in report["findings"] if f["severity"] in ("error", "bug")]
    assert report["checks"]["greedy"]["passed"] == 4 and report["checks"]["mixing"]["passed"] == 1
    trimmed = [n for n in report["notes"] if f"context {SMALL_CONTEXT} tokens" in n and "trimmed" in n]
    assert trimmed and "2 long" in trimmed[0], report["notes"]
    assert any(n.startswith("stressors: canary workload sized") for n in report["notes"]), report["notes"]
    summary = next((tmp_path / "out").glob("*/summary.md")).read_text()
    assert trimmed[0] in summary, summary


@pytest.mark.parametrize("workers, selection, max_context, words", [
    (("-n", "2"), "stressors/test_mixing.py", 100, "the stressors' canary conversations"),
    (("-p", "no:xdist"), "equivalence/test_greedy.py", 64, "--max-new-tokens 64"),
])
def test_context_too_small_exits_4_with_one_line(tmp_path, workers, selection, max_context, words):
    result, _ = run_suite(tmp_path, *workers, selection, "--categories", "math", "--prompt-limit", "1",
                          "--candidate", f"reference:?max_context={max_context}", "--stress-requests", "16",
                          timeout=600)
    assert result.returncode == 4, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("ERROR: bad configuration:")]
    assert len(lines) == 1 and f"candidate.max_context: context {max_context} tokens" in lines[0]
    assert words in lines[0]
    assert "Traceback" not in result.stdout + result.stderr


def test_mixing_is_still_caught_with_a_workload_cut_to_a_small_context(tmp_path):
    """The sized workload (shorter prefix, fewer fillers) still names the leak: the planted fault's twin of the
    passing small-context run above."""
    candidate = f"reference:?fault=cross_context_mixing&mix_rate=0.5&max_context={SMALL_CONTEXT}"
    result, report = run_suite(tmp_path, "-p", "no:xdist", "stressors/test_mixing.py", "--candidate", candidate,
                               "--concurrency", "1,4", "--stress-requests", "24")
    assert result.returncode == 1, result.stdout[-3000:]
    assert any(n.startswith("stressors: canary workload sized") and "shared prefix cut" in n for n in report["notes"])
    bugs = [f for f in report["findings"] if f["check"] == "mixing" and f["severity"] == "bug"]
    assert bugs and bugs[0]["title"].startswith("cross-request mixing:")


@pytest.fixture(scope="module")
def silent_server():
    """The same engine with max_model_len 192 that does not state it in /v1/models: only its refusals say."""
    engine = build_engine(f"reference:?max_context={SMALL_CONTEXT}", model_name="tiny", base=ROOT,
                          state_context=False)
    httpd = make_server(engine)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield engine, f"openai:http://127.0.0.1:{httpd.server_address[1]}/v1?model=tiny&tokenizer=fixtures/models/target"
    httpd.shutdown()
    httpd.server_close()
    engine.close()


def test_a_limit_stated_only_in_a_refusal_is_learned_once_and_the_tests_re_planned(tmp_path, silent_server):
    """The first over-long request is refused with the limit in the server's words: the route learns 192, the
    test runs once more with its prompts sized to it, and every later test is planned for it (a note, never a
    route error per prompt)."""
    engine, uri = silent_server
    result, report = run_suite(tmp_path, "-p", "no:xdist", "equivalence/test_greedy.py", "-k", "greedy_matches",
                               "--candidate", uri, "--categories", "long", "--prompt-limit", "3")
    assert report is not None, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, result.stdout[-3000:]
    assert len(engine.refused) == 1, engine.refused   # the first long prompt, once: its re-planned run fits
    assert not [f for f in report["findings"] if f["severity"] in ("error", "bug")], report["findings"]
    assert report["checks"]["greedy"]["passed"] == 3, report["checks"]
    assert any("stated its context limit" in n and str(SMALL_CONTEXT) in n for n in report["notes"]), report["notes"]
    engine.refused.clear()
