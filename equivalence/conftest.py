"""Fixtures shared by the equivalence checks: lean prompt picks and the A/A calibration.

Checks that are costly per prompt (boundary sweeps, logprobs, streaming, seeds) run on a
few "lean" prompts, one per category in order, instead of the whole prompt set, so the
default suite stays inside its time budget. Every check sends a record's `fitted_prompts`
ids (sized into the pair's context, fixtures/prompts/fit.py), never the record's text. The calibration runs once per run (shared
across xdist workers through a file lock) and only when a test first asks for it.
Environment: none (an xdist worker is recognised by its workerinput).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.fixtures.config import SUITE_CONFIG_KEY
from spec_route_suite.fixtures.prompts.records import PromptRecord, load_prompt_set

LEAN_PROMPTS = 2


def pick_lean(prompts: list[PromptRecord], n: int) -> list[PromptRecord]:
    """The first prompt of each category, round-robin, up to n: varied content at a fixed cost."""
    by_category: dict[str, list[PromptRecord]] = {}
    for prompt in prompts:
        by_category.setdefault(prompt.category, []).append(prompt)
    picked: list[PromptRecord] = []
    depth = 0
    while len(picked) < n and any(depth < len(v) for v in by_category.values()):
        picked.extend(v[depth] for v in by_category.values() if depth < len(v))
        depth += 1
    return picked[:n]


def _categories(config: pytest.Config) -> tuple[str, ...]:
    return config.stash[SUITE_CONFIG_KEY].categories


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lean_prompt" in metafunc.fixturenames:
        prompts = pick_lean(load_prompt_set(_categories(metafunc.config)), LEAN_PROMPTS)
        metafunc.parametrize("lean_prompt", prompts, ids=[p.id for p in prompts])


class LazyCalibration:
    """The baseline's A/A calibration, computed on the first `get()` and kept for the session."""

    def __init__(self, baseline, records: list[PromptRecord], prompts: list[tuple[int, ...]], max_tokens: int,
                 cache: Path | None, tau_override: float | None = None):
        self.records = records
        self._tau_override = tau_override
        self._baseline = baseline
        self._prompts = prompts
        self._max_tokens = max_tokens
        self._cache = cache
        self._value: calib.Calibration | None = None

    def get(self) -> calib.Calibration:
        if self._value is None:
            measured = calib.cached(self._cache, lambda: calib.calibrate(
                self._baseline, self._prompts, max_tokens=self._max_tokens))
            self._value = calib.with_override(measured, self._tau_override)
        return self._value


@pytest.fixture(scope="session")
def calibration(baseline, fitted_prompts, suite_config, tmp_path_factory, pytestconfig) -> LazyCalibration:
    prompts = pick_lean(load_prompt_set(suite_config.categories), calib.PROMPTS)
    ids = [fitted_prompts.ids(p) for p in prompts]
    max_tokens = min(calib.TOKENS, suite_config.max_new_tokens)
    cache = None
    if hasattr(pytestconfig, "workerinput"):
        key = hashlib.sha256(json.dumps([baseline.spec.public_dict(), ids, max_tokens, calib.SAFETY,
                                         calib.TAU_FLOOR], sort_keys=True, default=str).encode()).hexdigest()[:16]
        cache = tmp_path_factory.getbasetemp().parent / f"aa-calibration-{key}.json"
    return LazyCalibration(baseline, prompts, ids, max_tokens, cache, tau_override=suite_config.near_tie_tau)


@pytest.fixture(scope="session")
def eos_token_id(tokenizer) -> int | None:
    return getattr(tokenizer, "eos_token_id", None)
