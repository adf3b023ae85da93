"""Routes and stand-ins for the greedy-rigor self-tests, and proof that each wrapper plants what it says.

The self-tests call the route-suite test functions themselves (equivalence/test_*.py)
with real RouteHandles, so what is proven is the check a user runs, not a copy of it.
Faults come from the reference engine where it has them (`reference:?fault=...`, sharing
one loaded model pair) and from `Rewired`, a small wrapper, for the rest (streams that
drop a token, seeds ignored, logprobs zeroed, no teacher forcing).
"""
from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest
import torch

from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.config import PROMPT_CATEGORIES
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Completion, Request, RouteWrapper
from spec_route_suite.routes.errors import CapabilityMissing
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.spec import EMBEDDED_MODELS, RouteSpec
from spec_route_suite.session import RouteHandle

MODELS = EMBEDDED_MODELS
TIMEOUT_S = 120.0


class Sink:
    """Stands in for the `findings` fixture: keeps findings and measurements for assertions."""

    def __init__(self):
        self.items = []
        self.measurements = []

    def add(self, finding):
        self.items.append(finding)
        return finding

    def measure(self, kind: str, **data) -> None:
        self.measurements.append((kind, data))

    def cover(self, check: str, route: str, **data) -> None:
        self.measurements.append(("coverage", {"check": check, "route": route, **data}))


class FixedCalibration:
    """Stands in for the `calibration` fixture with a known result."""

    def __init__(self, value: calib.Calibration, records=()):
        self.value = value
        self.records = list(records)

    def get(self) -> calib.Calibration:
        return self.value


def suite_config(**overrides) -> SimpleNamespace:
    values = dict(greedy_policy="strict", max_new_tokens=48, alpha=0.01, seed=0, categories=PROMPT_CATEGORIES,
                  prompt_sources=(), prompt_limit=None)
    values.update(overrides)
    return SimpleNamespace(**values)


class Rewired(RouteWrapper):
    """Delegates to `inner`, rewriting requests and/or completions and optionally capabilities."""

    def __init__(self, inner, *, request: Callable[[Request], Request] | None = None,
                 completion: Callable[[Request, Completion], Completion] | None = None,
                 capabilities=None, score_missing: bool = False):
        super().__init__(inner)
        self._capabilities = capabilities
        self._request = request or (lambda r: r)
        self._completion = completion or (lambda r, c: c)
        self._score_missing = score_missing

    @property
    def capabilities(self):
        return self._capabilities or self.inner.capabilities

    async def generate(self, req: Request) -> Completion:
        return self._completion(req, await self.inner.generate(self._request(req)))

    async def score(self, prompt_ids, continuation_ids, top_k):
        if self._score_missing:
            raise CapabilityMissing("prompt_logprobs", route=self.name, why="planted: no teacher forcing")
        return await self.inner.score(prompt_ids, continuation_ids, top_k)


@lru_cache(maxsize=1)
def loop() -> BackgroundLoop:
    return BackgroundLoop()


@lru_cache(maxsize=1)
def tokenizer():
    from spec_route_suite.tokenizers import load_tokenizer
    return load_tokenizer(str(MODELS / "target"))


@lru_cache(maxsize=1)
def fitted_prompts():
    """What the plugin's fitted_prompts fixture gives for the embedded pair: prompts sized into 512 positions."""
    from spec_route_suite.prompts.fit import ContextFit, FittedPrompts, RouteContext
    fit = ContextFit((RouteContext("baseline", 512, "embedded model"), RouteContext("candidate", 512, "embedded model")))
    return FittedPrompts(tokenizer(), fit, max_tokens=suite_config().max_new_tokens)


@lru_cache(maxsize=1)
def model_pair():
    from spec_route_suite.reference.route import load_model
    torch.set_num_threads(1)
    return load_model(str(MODELS / "target")), load_model(str(MODELS / "draft"))


def handle(route, name: str | None = None) -> RouteHandle:
    spec = getattr(route, "spec", None) or RouteSpec(name=name or route.name, kind="hf")
    return RouteHandle(route, replace(spec, name=name or route.name), loop(), TIMEOUT_S)


@lru_cache(maxsize=None)
def hf_route(name: str, draft: bool):
    from spec_route_suite.routes.wire.hf import HFRoute
    torch.set_num_threads(1)
    spec = RouteSpec(name=name, kind="hf", model=str(MODELS / "target"), tokenizer=str(MODELS / "target"),
                     draft=str(MODELS / "draft") if draft else None, num_assistant_tokens=4 if draft else None)
    return HFRoute(spec)


def reference_route(name: str, **options: str):
    """A reference engine route sharing the loaded pair; options as in `reference:?fault=...`."""
    from spec_route_suite.reference import ReferenceRoute
    spec = RouteSpec(name=name, kind="reference", model=str(MODELS / "target"), tokenizer=str(MODELS / "target"),
                     draft=str(MODELS / "draft"), num_assistant_tokens=4,
                     options=tuple(sorted((k, str(v)) for k, v in options.items())))
    return ReferenceRoute(spec, models=model_pair())


class ReferenceHandles:
    """Candidate handles on the reference engine by planted fault (None: correct), with the same engine `options`
    (a prefill chunk, a KV pool); made on first use, sharing one model pair, closed together."""

    def __init__(self, **options: str):
        self.options = options
        self.made: dict[str | None, RouteHandle] = {}

    def __call__(self, fault: str | None = None) -> RouteHandle:
        if fault not in self.made:
            route = reference_route("candidate", **self.options, **({"fault": fault} if fault else {}))
            self.made[fault] = handle(route, "candidate")
        return self.made[fault]

    def close(self) -> None:
        for made in self.made.values():
            made.route.batcher.close()


def baseline_handle() -> RouteHandle:
    return handle(hf_route("baseline", False))


def prompts(categories=("math", "chat", "json"), per_category: int = 2):
    chosen = []
    for category in categories:
        chosen += load_prompt_set([category])[:per_category]
    return chosen


def run_async(coro):
    return asyncio.run(coro)


# ---- the wrappers do what they claim -------------------------------------------------------

@pytest.fixture(scope="module")
def math_ids():
    return encode_prompt(tokenizer(), prompts(("math",), 1)[0].text)


def test_rewired_rewrites_requests_and_completions(math_ids):
    inner = hf_route("baseline", False)
    seen = []
    route = Rewired(inner, request=lambda r: seen.append(r) or replace(r, max_tokens=2),
                    completion=lambda r, c: replace(c, finish_reason="planted"))
    out = run_async(route.generate(Request(prompt_ids=math_ids, max_tokens=6)))
    assert len(out.token_ids) <= 2 and out.finish_reason == "planted" and seen[0].max_tokens == 6


def test_rewired_can_withdraw_teacher_forcing(math_ids):
    inner = hf_route("baseline", False)
    route = Rewired(inner, capabilities=replace(inner.capabilities, prompt_logprobs=False), score_missing=True)
    assert not route.capabilities.prompt_logprobs
    with pytest.raises(CapabilityMissing):
        run_async(route.score(math_ids, (5,), 3))


def test_reference_routes_share_one_model_pair():
    a, b = reference_route("a"), reference_route("b", fault="kv_no_rollback")
    assert a.engine.target is b.engine.target and b.fault == "kv_no_rollback" and a.fault is None
    for route in (a, b):
        route.batcher.close()
