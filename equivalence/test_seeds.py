"""Seeded sampling is reproducible on the candidate: the same seed twice, serially, gives the same tokens.

Speculation consumes random numbers for drafting and acceptance; an engine that does not
roll its RNG state with the request (vllm#6038, vllm#13196) answers the same seeded request
differently. Serial only here; stressors/test_batch_invariance.py repeats it under load.
Routes without seed support are skipped and reported "not verified".
Identical answers prove seeding only where answers could differ: on a near-deterministic prompt a route that
ignores seeds answers alike too. So before "same seed, same answer" counts, a positive control asks the same
prompt and settings with other seeds until one answer differs (at most seeds.CONTROL_SEEDS); when none does, the
check is "not verified (the prompt is near-deterministic: k different seeds gave one answer)".
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.equivalence.seeds import first_split, positive_control, seed_finding, seeding_reason
from spec_route_suite.routes.base import Request

pytestmark = pytest.mark.check("seeds")

TOKENS = 24
TEMPERATURE = 1.0
REPEATS = 8   # a confident model samples alike by chance: without seeds, the embedded pair's 2 lean prompts gave 4
# identical runs on both in 2 of 19 runs of tests/test_repro_kinds.py (one in CI): 8 runs, not 4


def test_same_seed_same_tokens(lean_prompt, candidate, baseline, fitted_prompts, suite_config, findings):
    candidate.require("seed")
    # ignore_eos: every token is sampled, so a short confident answer (math-00 ends alike in 23 of 24 seeds) does not
    # make the prompt near-deterministic
    req = Request(prompt_ids=fitted_prompts.ids(lean_prompt),
                  max_tokens=min(TOKENS, suite_config.max_new_tokens), temperature=TEMPERATURE, ignore_eos=True,
                  seed=suite_config.seed + 1234, request_id=f"seed-{lean_prompt.id}")
    first, *others = [candidate.generate(replace(req, request_id=f"{req.request_id}-run{n}"))
                      for n in range(1, REPEATS + 1)]
    seeding = str((candidate.inventory().extra or {}).get("seeding", "the engine's (as far as the route says)"))
    own = not seeding.startswith("adapter")
    split = first_split(first, others)
    if split is not None:
        findings.add(seed_finding(req, first, split, candidate=candidate, baseline=baseline, prompt_id=lean_prompt.id,
                                  times=REPEATS))
        pytest.fail(f"prompt {lean_prompt.id}: candidate '{candidate.name}' does not honour seed={req.seed}: run 1 and "
                    f"run {split.run} of the same request differ at token {split.position}\n{split.detail}",
                    pytrace=False)
    tried, differs = positive_control(candidate, req, first) if own else (0, False)
    findings.cover("seeds", candidate.name, verified=own and differs,
                   ran={"seeded requests": REPEATS, "other seeds tried": tried, "other seeds answered differently":
                        int(differs)},
                   could_detect="an RNG state that does not follow the request's seed",
                   reason=seeding_reason(own=own, seeding=seeding, tried=tried, differs=differs))
