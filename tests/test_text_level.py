"""Servers that return no token ids: the route suite judges them at text level, over real HTTP.

The in-process OpenAI server (spec_route_suite.servers.inprocess) strips token ids from its answers
(`token_ids="none"`, like a gateway or hosted API) or gives them only inside logprobs entries
(`token_ids="logprobs"`, like llama.cpp). Each detector is proven both ways at one budget: a
correct engine passes the greedy, boundary and streaming checks at text level and says so; a
planted greedy divergence fails them, the finding saying the comparison was text-level; the
reference engine's cross-context mixing fault is still caught and attributed on text, and the
correct engine passes the same mixing run. Ids found in logprobs entries keep the route at
token level.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from spec_route_suite.equivalence.greedy import compare_greedy
from spec_route_suite.equivalence.streaming import accounting_problems, delivery_differences
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.wire.openai import OpenAIRoute
from spec_route_suite.routes.spec import EMBEDDED_MODELS, parse_route_uri
from spec_route_suite.routes.textlevel import BLIND, TEXT_LEVEL, aligned, describe, retokenize
from spec_route_suite.servers.inprocess import serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
MODEL = "tiny-target"
EQUIVALENCE = ("equivalence/test_greedy.py", "equivalence/test_boundaries.py", "equivalence/test_streaming.py")
EQUIVALENCE_ARGS = ("-k", "not near_tie", "--prompt-limit", "1", "--categories", "math,chat", "-n", "2")
MIXING_REQUESTS = 100
MIXING_ARGS = ("stressors/test_mixing.py", "--concurrency", "8", "--stress-requests", str(MIXING_REQUESTS))
MIXING_FAULT = "reference:?fault=cross_context_mixing&mix_rate=0.1"
PLANTED_AT = 3
REQUEST_TIMEOUT_S = 300   # the in-process engine shares 2 cores with everything else running


def candidate_uri(base_url: str, *extra: str) -> str:
    return "&".join([f"openai:{base_url}?model={MODEL}", f"tokenizer={TARGET}", f"timeout={REQUEST_TIMEOUT_S}",
                     *extra])


def run_suite(tmp_path: Path, name: str, served: str, *args: str, plant: str | None = None,
              token_ids: str = "none") -> tuple[int, dict, str]:
    """Serve `served` without token ids and run the route suite against it (hf baseline); (exit, report, output)."""
    base_url, stop = serve_in_thread(served, model_name=MODEL, token_ids=token_ids)
    try:
        candidate = candidate_uri(base_url, *([f"plant={plant}"] if plant else []))
        done = subprocess.run([sys.executable, "-m", "pytest", *args, "--baseline", f"hf:{TARGET}",
                               "--candidate", candidate, "--report-dir", str(tmp_path / name),
                               "-p", "no:cacheprovider", "-q"],
                              cwd=ROOT, capture_output=True, text=True, timeout=1800)
    finally:
        stop()
    report = json.loads(next((tmp_path / name).glob("*/report.json")).read_text())
    return done.returncode, report, done.stdout[-3000:] + done.stderr[-2000:]


def comparisons(report: dict) -> list[dict]:
    return report.get("measurements", {}).get("comparison", [])


def suite_caused_errors(report: dict) -> list[str]:
    """Every route error, timeouts included (REQUEST_TIMEOUT_S is generous even on a loaded 2-core machine): a
    refused request, an answer the adapter could not read, a capability the suite wrongly assumed, a hang."""
    return [f["title"] for f in report["findings"] if f["severity"] == "error"]


def test_correct_engine_without_token_ids_passes_greedy_boundaries_and_streaming_at_text_level(tmp_path):
    code, report, output = run_suite(tmp_path, "correct", "reference:", *EQUIVALENCE, *EQUIVALENCE_ARGS)
    assert code == 0, output
    assert not suite_caused_errors(report) and "lacks capability 'token_ids'" not in output
    for check in ("greedy", "boundary", "streaming"):
        assert report["checks"][check].get("passed", 0) > 0, (check, report["checks"])
        levels = [m for m in comparisons(report) if m["check"] == check]
        assert levels and all(m["comparison"] == TEXT_LEVEL and "tokenization" in m["text_level_blind"]
                              for m in levels), (check, comparisons(report))


def test_planted_divergence_without_token_ids_is_caught_and_called_text_level(tmp_path):
    code, report, output = run_suite(tmp_path, "planted", "reference:", *EQUIVALENCE, *EQUIVALENCE_ARGS,
                                     plant=f"divergence@{PLANTED_AT}")
    assert code == 1, output
    assert not suite_caused_errors(report), suite_caused_errors(report)
    greedy = [f for f in report["findings"] if f["check"] == "greedy" and f["severity"] == "bug"]
    assert len(greedy) == 2, output   # one per prompt (math, chat), at the planted position
    for finding in greedy:
        assert "text-level" in finding["title"] and finding["details"]["comparison"] == TEXT_LEVEL
        assert finding["details"]["divergence"]["position"] <= PLANTED_AT
    boundary = [f for f in report["findings"] if f["check"] == "boundary" and f["severity"] == "bug"]
    assert boundary and all(f["details"]["comparison"] == TEXT_LEVEL for f in boundary)
    assert report["checks"]["streaming"].get("failed", 0) == 0  # stream and plain carry the same plant


@pytest.mark.parametrize("served,expected", [("reference:", 0), (MIXING_FAULT, 1)], ids=["correct", "mixing"])
def test_mixing_without_token_ids_is_caught_on_text(tmp_path, served, expected):
    code, report, output = run_mixing(tmp_path, served)
    assert code == expected, output
    assert not suite_caused_errors(report), suite_caused_errors(report)
    mixing = [f for f in report["findings"] if f["check"] == "mixing"]
    assert mixing and all(f["details"].get("comparison") == TEXT_LEVEL for f in mixing if "budget" in f["details"])
    checked = [f["details"]["requests_checked"] for f in mixing if f["severity"] == "info"
               and "requests_checked" in f["details"]]
    assert checked and checked[0] >= MIXING_REQUESTS, (checked, output)   # every request of the budget was judged
    contaminated = [f for f in mixing if f["severity"] == "bug" and "another request's context" in f["title"]]
    assert bool(contaminated) == bool(expected), [f["title"] for f in mixing]
    if contaminated:
        assert "text-level" in contaminated[0]["title"] and contaminated[0]["details"]["contamination_matrix"]


@pytest.mark.parametrize("served,expected", [("reference:", 0), ("reference:?fault=penalty_bonus_only", 1)],
                         ids=["correct", "penalty_bonus_only"])
def test_request_features_without_token_ids_are_judged_on_text(tmp_path, served, expected):
    """Parity under a feature compares both texts re-tokenized, and min_tokens reads the server's count: the
    correct engine passes (before, re-tokenized ids against the engine's own gave three false findings), a
    penalty applied to the bonus token only is still caught."""
    code, report, output = run_suite(tmp_path, "features", served, "equivalence/test_features.py",
                                     "-k", "penalty or logit_bias or min_tokens", "-n", "2")
    assert code == expected, output
    assert not suite_caused_errors(report), suite_caused_errors(report)
    bugs = [f for f in report["findings"] if f["check"] == "features" and f["severity"] == "bug"]
    passed = {t["nodeid"].split("[")[1].rstrip("]") for t in report["tests"] if t["outcome"] == "passed"}
    if expected:
        assert bugs and all("penalty" in f["title"] for f in bugs), [f["title"] for f in bugs]
    else:
        assert not bugs and {"candidate-repetition_penalty", "candidate-ban", "candidate-boost", "candidate"} <= passed, \
            ([f["title"] for f in bugs], passed)


def run_mixing(tmp_path: Path, served: str) -> tuple[int, dict, str]:
    return run_suite(tmp_path, "mixing", served, *MIXING_ARGS)


# ---- ids from logprobs entries (llama.cpp's OpenAI endpoint) ----

@pytest.fixture(scope="module")
def prompts():
    tokenizer = load_tokenizer(str(TARGET))
    return [encode_prompt(tokenizer, r.text) for r in load_prompt_set(("math", "chat"))[:3]]


def generate_all(base_url: str, prompts, *, stream: bool, sampled: bool = False) -> tuple[list, OpenAIRoute]:
    route = OpenAIRoute(parse_route_uri("candidate", candidate_uri(base_url), base=ROOT))

    async def main():
        try:
            return [await route.generate(Request(prompt_ids=ids, max_tokens=16, stream=stream, request_id=f"r{i}",
                                                 temperature=1.0 if sampled else 0.0, seed=7 if sampled else None))
                    for i, ids in enumerate(prompts)]
        finally:
            await route.aclose()
    return asyncio.run(main()), route


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_ids_in_logprobs_entries_keep_the_route_at_token_level(prompts, stream):
    outputs = {}
    for mode in ("all", "logprobs", "none"):
        base_url, stop = serve_in_thread("reference:", model_name=MODEL, token_ids=mode)
        try:
            outputs[mode] = generate_all(base_url, prompts, stream=stream)
        finally:
            stop()
    (with_ids, _), (from_logprobs, route), (stripped, text_route) = outputs["all"], outputs["logprobs"], outputs["none"]
    assert [c.token_ids for c in from_logprobs] == [c.token_ids for c in with_ids]
    assert not any(c.text_level or c.logprobs for c in from_logprobs)
    assert not route.capabilities.text_level and route.capabilities.token_ids
    assert [c.text for c in stripped] == [c.text for c in with_ids] and all(c.text_level for c in stripped)
    assert text_route.capabilities.text_level and not text_route.capabilities.token_ids


# ---- what a text-level comparison sees and what it cannot ----

def test_text_level_comparison_sees_text_and_is_blind_to_token_boundaries():
    tokenizer = load_tokenizer(str(TARGET))
    text = " 5 + 10 = 15. The answer is 15."
    canonical = retokenize(tokenizer, text)
    by_character = tuple(t for ch in text for t in retokenize(tokenizer, ch))
    assert by_character != canonical and tokenizer.decode(by_character) == text
    engine = Completion(token_ids=by_character, text=text, finish_reason="length", route="baseline",
                        usage_completion_tokens=len(by_character))
    same_text = Completion(token_ids=canonical, text=text, finish_reason="length", route="candidate",
                           usage_completion_tokens=len(by_character), text_level=True)
    other_text = replace(same_text, text=text.replace("is 15", "is 16"),
                         token_ids=retokenize(tokenizer, text.replace("is 15", "is 16")))
    # token level sees the boundary difference; text level cannot, and says so
    assert compare_greedy(baseline=engine, candidate=replace(same_text, text_level=False),
                          decode=tokenizer.decode) is not None
    assert compare_greedy(**dict(zip(("baseline", "candidate"), aligned(engine, same_text, tokenizer))),
                          decode=tokenizer.decode) is None
    # a different text is seen, at its position in the re-tokenized text
    expected, actual = aligned(engine, other_text, tokenizer)
    divergence = compare_greedy(baseline=expected, candidate=actual, decode=tokenizer.decode)
    assert divergence is not None and "15" in divergence.baseline_tail_text and "16" in divergence.candidate_tail_text
    assert describe(expected, actual)["comparison"] == TEXT_LEVEL and "tokenization" in BLIND
    # streaming: text differences count, the re-derived token count is not held against usage
    assert delivery_differences(plain=same_text, streamed=other_text) and not delivery_differences(
        plain=same_text, streamed=replace(same_text, token_ids=by_character))
    assert not accounting_problems(plain=same_text, streamed=same_text)
    assert accounting_problems(plain=engine, streamed=replace(engine, usage_completion_tokens=len(by_character) + 1))
