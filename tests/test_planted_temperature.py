"""`?plant=temperature@F`: a sampler off by a few percent around any route, so the distribution check's smallest
fault can be planted on a real engine (docs/llama-cpp-findings.md shows the scoring test failing it on llama.cpp).
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spec_route_suite.routes.base import Capabilities, Completion, NotOffered, Request, Route
from spec_route_suite.routes.wrappers.planted import TEMPERATURE, parse_plant, planted
from spec_route_suite.routes.spec import ConfigError, parse_route_uri


def spec(uri: str):
    return parse_route_uri("cand", uri, base=Path.cwd(), environ={})


class Recording(Route):
    """A route that answers one token and keeps every request it was sent."""

    name = "rec"
    capabilities = Capabilities(n=True, concurrency=True)

    def __init__(self):
        self.sent: list[Request] = []

    async def generate(self, req: Request) -> Completion:
        self.sent.append(req)
        return Completion(token_ids=(1,), text="x", finish_reason="length", route=self.name)

    def sample_n(self, req, n):  # an in-process batch sampler: the planted route must not expose it
        raise AssertionError("sampled past the plant")


def test_sampled_requests_go_out_at_the_shifted_temperature_and_greedy_ones_unchanged():
    inner = Recording()
    route = planted(inner, parse_plant(spec("reference:?plant=temperature@0.95")))
    asyncio.run(route.generate(Request(prompt_ids=(1, 2), max_tokens=3, temperature=1.5, seed=7)))
    asyncio.run(route.generate(Request(prompt_ids=(1, 2), max_tokens=3, temperature=0.0)))
    assert [r.temperature for r in inner.sent] == [pytest.approx(1.425), 0.0]
    assert inner.sent[0].seed == 7
    assert inner.offers("sample_n") and not route.offers("sample_n"), "the batch sampler is hidden behind the plant"
    with pytest.raises(NotOffered):
        asyncio.run(route.sample_n(Request(prompt_ids=(1, 2), max_tokens=3, temperature=1.5), 4))
    assert route.name == "rec" and route.capabilities.has("n")


@pytest.mark.parametrize("value", ["temperature@1", "temperature@0", "temperature@hot", "temperature@12"])
def test_a_temperature_plant_that_changes_nothing_or_cannot_be_read_names_its_field(value):
    with pytest.raises(ConfigError, match="plant"):
        parse_plant(spec(f"reference:?plant={value}"))
    assert parse_plant(spec("reference:?plant=temperature@1.05")) == (TEMPERATURE, 1.05)
