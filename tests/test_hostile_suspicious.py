"""Well-formed but suspicious answers are findings, each proven both ways on a real model over real HTTP.

The fault server (tests/fault_server.py) serves the embedded target; a plan switch makes it
answer one empty "stop" token to requests that arrive while others are in flight (vllm#50021),
or report every logprob as exactly 0.0 (vllm#17876), or bill more completion tokens than max_tokens
on a share of its answers. The detectors the route suite uses (stressors/suspicious.py early_stops,
equivalence/logprobs.py all_zero_logprobs, and the adapter's usage check, whose RouteMalformed every
check turns into a route-error finding: tests/test_hostile_suite.py) must stay quiet on the clean
server and fire on the planted one, at the same budget.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spec_route_suite.equivalence.logprobs import all_zero_logprobs
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.errors import RouteError, RouteMalformed
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import EMBEDDED_MODELS, parse_route_uri
from spec_route_suite.stressors.driver import drive, plan
from spec_route_suite.stressors.suspicious import early_stops
from tests.fault_server import FaultPlan, serve_faults

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
PROMPTS = 3
MAX_TOKENS = 8
CONCURRENCY = 4


@pytest.fixture(scope="module")
def prompts() -> dict[str, tuple[int, ...]]:
    tokenizer = load_tokenizer(str(TARGET))
    return {r.id: tuple(encode_prompt(tokenizer, r.text)) for r in load_prompt_set(("chat",))[:PROMPTS]}


@pytest.fixture(scope="module")
def server():
    """One served target for every proof; each proof sets the plan's switches it needs."""
    fault_plan = FaultPlan(share=0.0, stream_share=0.0)
    base_url, stop = serve_faults(f"hf:{TARGET}", fault_plan, base=ROOT)
    yield base_url, fault_plan
    stop()


CLEAN = {"collapse_under_load": False, "zero_logprobs": False, "over_report_usage": 0.0}


def against(server, work, **switches):
    """Run `work(route)` over HTTP against the served target with the plan's `switches` set (the others clean)."""
    base_url, fault_plan = server
    for name, value in {**CLEAN, **switches}.items():
        setattr(fault_plan, name, value)
    route = build_route(parse_route_uri("candidate", f"openai:{base_url}?model=hostile&tokenizer=fixtures/models/target", base=ROOT))

    async def main():
        try:
            return await work(route)
        finally:
            await route.aclose()
    return asyncio.run(main())


def early_stops_under_load(server, collapse: bool, prompts) -> list[str]:
    async def work(route):
        reqs = {key: Request(prompt_ids=ids, max_tokens=MAX_TOKENS, ignore_eos=True, request_id=f"serial-{key}")
                for key, ids in prompts.items()}
        references = {key: await route.generate(req) for key, req in reqs.items()}
        pairs = [(key, reqs[key]) for key in list(prompts) * 2]
        run = await drive(route, plan(pairs, offsets=[0.0] * len(pairs), tag="load"), concurrency=CONCURRENCY,
                          request_timeout_s=60, deadline_s=120)
        assert not run.failed, run.describe()
        return early_stops(run.outcomes, references)
    return against(server, work, collapse_under_load=collapse)


def test_early_stop_under_load_is_found_only_when_planted(server, prompts):
    assert early_stops_under_load(server, False, prompts) == []
    found = early_stops_under_load(server, True, prompts)
    assert found and all("finish_reason 'stop'" in line and "serial run wrote 8 tokens" in line for line in found)


def sampled_logprobs(server, zero: bool, prompts):
    async def work(route):
        out = []
        for key, ids in prompts.items():
            req = Request(prompt_ids=ids, max_tokens=MAX_TOKENS, temperature=1.0, seed=7, logprobs=1,
                          ignore_eos=True, request_id=f"sampled-{key}")
            out.append(await route.generate(req))
        return out
    return against(server, work, zero_logprobs=zero)


def test_all_zero_sampled_logprobs_are_found_only_when_planted(server, prompts):
    clean = sampled_logprobs(server, False, prompts)
    planted = sampled_logprobs(server, True, prompts)
    for honest, zeroed in zip(clean, planted):
        assert honest.token_ids == zeroed.token_ids  # same seed, same tokens: only the logprobs differ
        assert all_zero_logprobs(honest, honest.logprobs) is None
        problem = all_zero_logprobs(zeroed, honest.logprobs)
        assert problem is not None and "exactly 0.0" in problem


def usage_answers(server, share: float, prompts) -> tuple[dict[str, Completion | RouteError], list[str]]:
    """Each prompt asked plainly and streamed, max_tokens answered in full: (answer or error per request id,
    the request ids the server billed above max_tokens)."""
    async def work(route):
        out: dict[str, Completion | RouteError] = {}
        for key, ids in prompts.items():
            for stream in (False, True):
                req = Request(prompt_ids=ids, max_tokens=MAX_TOKENS, ignore_eos=True, stream=stream,
                              request_id=f"usage-{key}-{'sse' if stream else 'plain'}")
                try:
                    out[req.request_id] = await route.generate(req)
                except RouteError as exc:
                    out[req.request_id] = exc
        return out
    _, fault_plan = server
    fault_plan.over_reported.clear()
    answers = against(server, work, over_report_usage=share)
    return answers, list(fault_plan.over_reported)


def test_usage_above_max_tokens_is_found_only_when_planted(server, prompts):
    clean, none_planted = usage_answers(server, 0.0, prompts)
    assert none_planted == []
    for request_id, answer in clean.items():
        assert isinstance(answer, Completion), f"{request_id}: {answer}"
        assert answer.usage_completion_tokens == len(answer.token_ids) == MAX_TOKENS, (request_id, answer)
    planted, over = usage_answers(server, 2 / 3, prompts)  # 2 of every 3 answers, plain and streamed alike
    assert len(over) == len(planted) * 2 // 3 and {"plain", "sse"} == {rid.rsplit("-", 1)[1] for rid in over}, over
    assert {"plain", "sse"} == {rid.rsplit("-", 1)[1] for rid in set(planted) - set(over)}, over
    for request_id, answer in planted.items():
        if request_id not in over:  # the rest is judged as before: the same answer
            assert isinstance(answer, Completion) and answer.token_ids == clean[request_id].token_ids, answer
            continue
        assert isinstance(answer, RouteMalformed), f"{request_id} billed above max_tokens was accepted: {answer}"
        assert answer.request_id == request_id, answer.describe()
        assert f"usage.completion_tokens={MAX_TOKENS + 7} is above max_tokens={MAX_TOKENS}" in answer.describe()
