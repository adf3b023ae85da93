"""Speculation per request family: logprobs, penalties, chat, n > 1 and json requests must speculate like plain ones.

equivalence/spec_path.py says why and how. Per family, REQUESTS greedy requests of that family and as many
plain ones go to the candidate (the prompts cycled when the run has fewer, each send its own request); each answer
states how many tokens were drafted for it (where the engine says so per answer). The shares that speculated are
compared by Fisher's exact test at the run's alpha: a family that speculates less fails with "speculation silently
off for X", and the parity rows of that feature are recorded "not verified on the speculative path"; the coverage
row says the smallest share it could tell from the plain one. A family the route refuses (400, a documented
refusal) is "not supported" and skipped; a route that states no per-answer drafting is "not verified".
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.spec_path import (BY_NAME, FAMILIES, DropVerdict, Share, off_finding,
                                                    parity_unverified, unjudged, unseen)
from spec_route_suite.equivalence.spec_path_requests import family_answers, family_requests

pytestmark = pytest.mark.check("spec-path")


@pytest.mark.parametrize("family_name", [f.name for f in FAMILIES])
def test_speculation_runs_for_every_request_family(family_name, candidate, baseline, tokenizer, fitted_prompts,
                                                   suite_config, findings):
    family = BY_NAME[family_name]
    if why := unseen(family, candidate):
        pytest.skip(why)
    plain_reqs, family_reqs = family_requests(family, candidate, tokenizer, fitted_prompts, suite_config)
    if not family_reqs:
        pytest.skip(f"not verified: no {family.name} prompt of the run's prompt set (--categories) fits the "
                    f"context as '{candidate.name}' renders it ({fitted_prompts.fit.describe()})")
    plain = Share.of([candidate.generate(r) for r in plain_reqs])
    answers = family_answers(findings, family, candidate, family_reqs)   # a refusal: covered, then skipped
    share = Share.of(answers)
    findings.measure("speculation_share", route=candidate.name, family=family.name, answers=share.answers,
                     stated=share.stated, speculated=share.speculated, plain_stated=plain.stated,
                     plain_speculated=plain.speculated, draft_tokens=[a.draft_tokens for a in answers])
    if why := unjudged(family, candidate.name, share, plain):
        pytest.skip(why)
    drop = DropVerdict.of(share, plain, alpha=suite_config.alpha)
    findings.cover("spec-path", candidate.name, **drop.coverage(family.name))
    if not drop.off:
        return
    for check, row in parity_unverified(family, drop, route=candidate.name):
        findings.cover(check, candidate.name, **row)
    finding = off_finding(family, drop, plain_reqs, family_reqs, answers, candidate=candidate, baseline=baseline)
    findings.add(finding)
    pytest.fail(f"'{candidate.name}': {finding.title}", pytrace=False)
