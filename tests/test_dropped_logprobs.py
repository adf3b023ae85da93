"""Dropped logprobs are judged against the baseline, never skipped (issue #34 item 1), over real HTTP.

The planted fault: a speculative engine whose answers to logprobs requests lose the logprob entries of the tokens
its drafts got accepted for (llama.cpp's /v1 on draft-simple: stream chunks carry entries only for tokens sampled
outside draft verification), or lose their logprobs altogether (`logprobs: null`). The reference engine with that
fault, and without it, is served by the in-process OpenAI server in llama.cpp's id mode (ids only inside logprob
entries) and in vLLM's (token_ids beside the logprobs), so the OpenAI adapter's own paths run: the entries'
id gap, and "requested logprobs but the server returned none". The baseline is the target alone, served the same
way. The logprobs check must fail the faulty candidate with a finding that quotes the baseline's answer to the
same request, and pass the correct one on the same prompts; the streaming check likewise for streams whose ids
(logprob entries) the candidate alone drops.
"""
from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

import spec_route_suite.equivalence.test_logprobs as logprob_suite
from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.routes.base import Completion, Request, RouteWrapper, unwrap
from spec_route_suite.routes.errors import CapabilityMissing
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import EMBEDDED_MODELS, parse_route_uri
from spec_route_suite.servers.inprocess import Engine, make_server
from tests.test_greedy_routes import (FixedCalibration, Sink, fitted_prompts, handle, hf_route, prompts,
                                      reference_route, suite_config)
from tests.test_greedy_streaming import run_stream

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
FLOOR = calib.Calibration(route="baseline", tau=calib.TAU_FLOOR, logprob_tol=calib.TOL_FLOOR, noise=1e-5)
SHAPES = {"llama.cpp": "logprobs", "vllm": "all"}   # the answer shape -> the in-process server's id mode


def accepted_positions(blocks) -> set[int]:
    """Output positions of accepted draft tokens: every token of a verified block but its last (the target's own)."""
    positions, start = set(), 0
    for size in blocks:
        positions.update(range(start, start + size - 1))
        start += size
    return positions


class LogprobsDroppedOnAccept(RouteWrapper):
    """Answers to logprobs requests in which drafts were accepted lose the entries of those tokens (`whole`: every
    logprob, the answer says `logprobs: null`); `streams_only`: streamed answers only."""

    def __init__(self, inner, *, whole: bool = False, streams_only: bool = False):
        super().__init__(inner)
        self.whole, self.streams_only = whole, streams_only
        self.hit = 0   # answers damaged: the fault did fire

    async def generate(self, req: Request) -> Completion:
        answer = await self.inner.generate(req)
        accepted = accepted_positions(answer.blocks)
        if req.logprobs is None or answer.logprobs is None or not accepted or (self.streams_only and not req.stream):
            return answer
        self.hit += 1
        if self.whole:
            return replace(answer, logprobs=None)
        return replace(answer, logprobs=tuple(e for i, e in enumerate(answer.logprobs) if i not in accepted))


class Served:
    """Routes served over HTTP in one id mode; `handle(name)` is the suite's RouteHandle on the OpenAI adapter."""

    def __init__(self, token_ids: str):
        self.token_ids, self.stops, self.routes = token_ids, [], {}

    def handle(self, name: str, route):
        engine = Engine(route, spec=unwrap(route).spec, model_name="tiny", token_ids=self.token_ids)
        httpd = make_server(engine)
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.stops.append(lambda: (httpd.shutdown(), httpd.server_close(), engine.loop.close()))
        uri = f"openai:http://127.0.0.1:{httpd.server_address[1]}/v1?model=tiny&tokenizer={TARGET}&timeout=120"
        return handle(build_route(parse_route_uri(name, uri, base=ROOT)), name)

    def close(self) -> None:
        for stop in self.stops:
            stop()


@pytest.fixture(scope="module")
def engines():
    made = {"correct": reference_route("candidate")}
    yield made
    for route in made.values():
        route.batcher.close()


@pytest.fixture(scope="module", params=sorted(SHAPES))
def served(request, engines):
    shape = request.param
    servers = Served(SHAPES[shape])
    fault = LogprobsDroppedOnAccept(engines["correct"], whole=shape == "vllm")
    stream_fault = LogprobsDroppedOnAccept(engines["correct"], streams_only=True)
    yield shape, fault, stream_fault, {
        "baseline": servers.handle("baseline", hf_route("baseline", False)),
        "correct": servers.handle("candidate", engines["correct"]),
        "faulty": servers.handle("candidate", fault),
        "stream-faulty": servers.handle("candidate", stream_fault)}
    servers.close()


def run_check(test, prompt, candidate, baseline):
    """(outcome, message, sink) of a logprobs test function: outcome is passed, failed or skipped (a skip here is
    what the old code did with a dropped answer: it must never happen where the baseline delivers)."""
    sink = Sink()
    extra = {"calibration": FixedCalibration(FLOOR)} if test is logprob_suite.test_logprobs_match_baseline else {}
    try:
        test(lean_prompt=prompt, baseline=baseline, candidate=candidate, fitted_prompts=fitted_prompts(),
             suite_config=suite_config(), findings=sink, **extra)
    except pytest.fail.Exception as failure:
        return "failed", str(failure), sink
    except pytest.skip.Exception as skip:
        return "skipped", str(skip), sink
    except CapabilityMissing as exc:   # left to the plugin, which skips it
        return "skipped", exc.describe(), sink
    return "passed", "", sink


def run_logprobs(prompt, candidate, baseline):
    return run_check(logprob_suite.test_logprobs_match_baseline, prompt, candidate, baseline)


LEAN = ("math", "chat")


def test_a_candidate_dropping_logprobs_on_accepted_drafts_fails_where_the_correct_one_passes(served):
    shape, fault, _, routes = served
    for prompt in prompts(LEAN, 1):
        outcome, message, sink = run_logprobs(prompt, routes["correct"], routes["baseline"])
        assert outcome == "passed" and sink.items == [], f"{shape} correct, {prompt.id}: {message}"
    runs = [(p.id, *run_logprobs(p, routes["faulty"], routes["baseline"])) for p in prompts(LEAN, 1)]
    assert fault.hit, "the planted fault never fired: no answer had accepted drafts"
    assert [outcome for _, outcome, _, _ in runs] == ["failed"] * len(runs), [r[:3] for r in runs]
    _, _, failure, sink = runs[0]
    (finding,) = sink.items
    assert finding.severity == "bug" and finding.check == "logprobs" and finding.route == "candidate"
    assert "returned no logprobs" in failure and "baseline 'baseline' delivers them on the same request" in failure
    assert finding.details["rule"] == "logprob_entries"
    assert finding.details["baseline_control"]["tokens"], finding.details["baseline_control"]
    assert finding.details["repro"]["judge"] == "logprobs" and finding.details["repro"]["case"]["mode"] == "missing"


def test_sampled_logprobs_dropped_on_accepted_drafts_fail_too(served):
    """The sampled-logprobs test sends its own logprobs request: the same rule, not a skip."""
    shape, _, _, routes = served
    prompt = prompts(("chat",), 1)[0]
    test = logprob_suite.test_sampled_logprobs_are_not_all_zero
    outcome, message, _ = run_check(test, prompt, routes["faulty"], routes["baseline"])
    assert outcome == "failed" and "returned no logprobs" in message, (shape, outcome, message)
    outcome, message, sink = run_check(test, prompt, routes["correct"], routes["baseline"])
    assert outcome == "passed" and sink.items == [], (shape, outcome, message)


def test_the_same_drop_on_the_baseline_is_an_engine_note_not_a_finding(served):
    """Both routes drop alike (the baseline is the faulty engine too): engine behaviour, the rule's part not
    verified, the check skipped; never a finding about the candidate."""
    shape, _, _, routes = served
    sink = Sink()
    with pytest.raises(pytest.skip.Exception, match="not verified"):
        logprob_suite.test_logprobs_match_baseline(
            lean_prompt=prompts(("math",), 1)[0], baseline=routes["faulty"], candidate=routes["faulty"],
            fitted_prompts=fitted_prompts(), suite_config=suite_config(), calibration=FixedCalibration(FLOOR),
            findings=sink)
    assert [f.severity for f in sink.items] == ["engine"], sink.items
    parts = [m for kind, m in sink.measurements if kind == "coverage" and m.get("part") == "logprob_entries"]
    assert parts and parts[0]["verified"] is False and "does not honour logprobs" in parts[0]["reason"]


@pytest.mark.parametrize("served", ["llama.cpp"], indirect=True)   # the id mode whose stream ids ride on entries
def test_a_stream_dropping_logprob_entries_only_on_the_candidate_fails(served):
    """Streams in llama.cpp's id mode: the candidate's stream lacks ids (entries) the baseline's stream of the same
    request carries: a finding, not "ids not verified"; the correct engine's stream passes."""
    _, _, stream_fault, routes = served
    prompt = prompts(("math",), 1)[0]
    failure, found = run_stream(prompt, routes["correct"], baseline=routes["baseline"])
    assert failure is None and found == [], failure
    failure, found = run_stream(prompt, routes["stream-faulty"], baseline=routes["baseline"])
    assert stream_fault.hit and failure and "token ids are incomplete" in failure
    (finding,) = [f for f in found if f.severity == "bug"]
    assert finding.check == "streaming" and finding.details["rule"] == "ids"
    assert finding.details["repro"]["case"]["mode"] == "missing"


class TextKeyed(RouteWrapper):
    """A route whose adapter finds, on an answer, that its server cannot give comparable logprobs at all (keyed by
    text): it turns its logprobs capability off and raises, as the OpenAI adapter does."""

    def __init__(self, inner):
        super().__init__(inner)
        self.caps = inner.capabilities

    @property
    def capabilities(self):
        return self.caps

    async def generate(self, req: Request) -> Completion:
        if req.logprobs is None:
            return await self.inner.generate(req)
        self.caps = replace(self.caps, logprobs=0)
        raise CapabilityMissing("logprobs", route=self.name, why="top_logprobs key 'a' maps to 2 token ids")


def test_a_route_that_cannot_give_comparable_logprobs_is_not_verified_not_a_finding(engines):
    """A route-wide inability (the adapter turned the capability off) is no dropped answer: not verified."""
    outcome, message, sink = run_logprobs(prompts(("math",), 1)[0], handle(TextKeyed(engines["correct"]), "candidate"),
                                          handle(hf_route("baseline", False), "baseline"))
    assert outcome == "skipped" and "lacks comparable logprobs" in message and sink.items == [], (outcome, message)
