"""Well-formed but suspicious answers are findings, each proven both ways on a real model over real HTTP.

The fault server (tests/fault_server.py) serves the embedded target; a plan switch makes it
answer one empty "stop" token to requests that arrive while others are in flight (vllm#50021),
or report every logprob as exactly 0.0 (vllm#17876). The detectors the route suite uses
(stressors/suspicious.py early_stops, equivalence/logprobs.py all_zero_logprobs) must stay quiet
on the clean server and fire on the planted one, at the same budget. usage.completion_tokens above
max_tokens is the adapter's own check, proven in tests/test_hostile_parsers.py.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spec_route_suite.equivalence.logprobs import all_zero_logprobs
from spec_route_suite.fixtures.prompts.encode import encode_prompt
from spec_route_suite.fixtures.prompts.records import load_prompt_set
from spec_route_suite.fixtures.routes.base import Request
from spec_route_suite.fixtures.routes.hf import load_tokenizer
from spec_route_suite.fixtures.routes.registry import build_route
from spec_route_suite.fixtures.routes.spec import EMBEDDED_MODELS, parse_route_uri
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


def against(server, work, **switches):
    """Run `work(route)` over HTTP against the served target with the plan's `switches` set."""
    base_url, fault_plan = server
    for name, value in switches.items():
        setattr(fault_plan, name, value)
    route = build_route(parse_route_uri("candidate", f"openai:{base_url}?model=hostile", base=ROOT))

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
    return against(server, work, collapse_under_load=collapse, zero_logprobs=False)


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
    return against(server, work, zero_logprobs=zero, collapse_under_load=False)


def test_all_zero_sampled_logprobs_are_found_only_when_planted(server, prompts):
    clean = sampled_logprobs(server, False, prompts)
    planted = sampled_logprobs(server, True, prompts)
    for honest, zeroed in zip(clean, planted):
        assert honest.token_ids == zeroed.token_ids  # same seed, same tokens: only the logprobs differ
        assert all_zero_logprobs(honest, honest.logprobs) is None
        problem = all_zero_logprobs(zeroed, honest.logprobs)
        assert problem is not None and "exactly 0.0" in problem
