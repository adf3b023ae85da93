"""Seeded sampling is reproducible on the candidate: the same seed twice, serially, gives the same tokens.

Speculation consumes random numbers for drafting and acceptance; an engine that does not
roll its RNG state with the request (vllm#6038, vllm#13196) answers the same seeded request
differently. Serial only here; stressors/test_batch_invariance.py repeats it under load.
Routes without seed support are skipped and reported "not verified".
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.routes.base import Request
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import repeat_repro

pytestmark = pytest.mark.check("seeds")

TOKENS = 24
TEMPERATURE = 1.0
REPEATS = 8   # a confident model samples alike by chance: without seeds, the embedded pair's 2 lean prompts gave 4
# identical runs on both in 2 of 19 runs of tests/test_repro_kinds.py (one in CI): 8 runs, not 4


def test_same_seed_same_tokens(lean_prompt, candidate, baseline, fitted_prompts, suite_config, findings):
    candidate.require("seed")
    req = Request(prompt_ids=fitted_prompts.ids(lean_prompt),
                  max_tokens=min(TOKENS, suite_config.max_new_tokens), temperature=TEMPERATURE,
                  seed=suite_config.seed + 1234, request_id=f"seed-{lean_prompt.id}")
    first, *others = [candidate.generate(replace(req, request_id=f"{req.request_id}-run{n}"))
                      for n in range(1, REPEATS + 1)]
    seeding = str((candidate.inventory().extra or {}).get("seeding", "the engine's (as far as the route says)"))
    own = not seeding.startswith("adapter")
    findings.cover("seeds", candidate.name, verified=own, ran={"seeded requests": REPEATS},
                   could_detect="an RNG state that does not follow the request's seed",
                   reason=f"circular on this route: seeding is done by the {seeding}, so the check cannot fail")
    for n, other in enumerate(others, start=2):
        at = first_divergence(baseline=first.token_ids, candidate=other.token_ids)
        if at is None and other.finish_reason == first.finish_reason:
            continue
        position = at if at is not None else len(first.token_ids)
        detail = (f"run 1:  {first.text[:120]!r} (finish={first.finish_reason})\n"
                  f"run {n}: {other.text[:120]!r} (finish={other.finish_reason})")
        findings.add(Finding(
            check="seeds", severity="bug", route=candidate.name, prompt_id=lean_prompt.id,
            title=(f"candidate '{candidate.name}' does not honour seeds: the same seeded request differs "
                   f"at token {position}"),
            details={"diff": detail, "seed": req.seed, "temperature": req.temperature, "max_tokens": req.max_tokens,
                     "prompt_ids": list(req.prompt_ids), "run_1_tokens": list(first.token_ids),
                     f"run_{n}_tokens": list(other.token_ids),
                     "repro": repeat_repro(req, candidate=candidate, baseline=baseline, times=REPEATS)}))
        pytest.fail(f"prompt {lean_prompt.id}: candidate '{candidate.name}' does not honour seed={req.seed}: run 1 and "
                    f"run {n} of the same request differ at token {position}\n{detail}", pytrace=False)
