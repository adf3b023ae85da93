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

import dataclasses
import itertools

import pytest

from spec_route_suite.equivalence import chat
from spec_route_suite.equivalence.delivery import is_dropped
from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.equivalence.spec_path import BY_NAME, FAMILIES, MAX_TOKENS, REQUESTS, DropVerdict, Share
from spec_route_suite.routes.chat import chat_request
from spec_route_suite.prompts.prompt_set import prompt_pool
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import CapabilityMissing, FeatureUnsupported
from spec_route_suite.reports.findings import Finding
from spec_route_suite.reports.repro_spec import spec_path_repro

pytestmark = pytest.mark.check("spec-path")
CHAT_CHOICES = 4   # chat prompts tried per one sent: those the server renders longer than the context are left out


def _requests(family, candidate, tokenizer, fitted_prompts, suite_config) -> tuple[list[Request], list[Request]]:
    """(plain requests, the family's requests), greedy, on a few varied prompts. Chat requests are the first chat
    prompts that fit whole as the candidate's server renders them (its template may be longer than ours): a
    request it must refuse is never sent."""
    if family.name == "chat":
        sized = (chat_request(tokenizer, r.messages, max_tokens=MAX_TOKENS, request_id=f"spec-chat-{r.id}")
                 for r in chat.chat_records(suite_config, REQUESTS * CHAT_CHOICES))
        fitting = list(itertools.islice((r for r in sized if not fitted_prompts.fit.misfit(r, (candidate,))),
                                        REQUESTS))
        family_reqs = [dataclasses.replace(r, request_id=f"spec-chat-{n}-{r.request_id.removeprefix('spec-chat-')}")
                       for n, r in enumerate(_cycled(fitting))]
        plain = [Request(prompt_ids=r.prompt_ids, max_tokens=MAX_TOKENS, request_id=f"spec-plain-chat-{n}")
                 for n, r in enumerate(family_reqs)]
        return plain, family_reqs
    records = _cycled(pick_lean(prompt_pool(suite_config), REQUESTS))
    plain = [Request(prompt_ids=fitted_prompts.ids(r, max_tokens=MAX_TOKENS), max_tokens=MAX_TOKENS,
                     request_id=f"spec-plain-{n}-{r.id}") for n, r in enumerate(records)]
    return plain, [family.make(p) for p in plain]


def _cycled(records: list) -> list:
    """REQUESTS records, the run's own cycled when it has fewer (each send is its own request: a distinct id)."""
    return [records[n % len(records)] for n in range(REQUESTS)] if records else []


@pytest.mark.parametrize("family_name", [f.name for f in FAMILIES])
def test_speculation_runs_for_every_request_family(family_name, candidate, baseline, tokenizer, fitted_prompts,
                                                   suite_config, findings):
    family = BY_NAME[family_name]
    could = f"speculation silently off for {family.name} requests (parity checks then never test its speculative path)"
    if family.capability and not candidate.capabilities.has(family.capability):
        pytest.skip(f"not verified: '{candidate.name}' lacks {family.capability}, so {family.name} requests are "
                    f"not sent")
    if (candidate.inventory().extra or {}).get("per_response_evidence") is False:
        pytest.skip(f"not verified: '{candidate.name}' states no drafting per answer (its server counts drafts only "
                    f"server-wide), so whether {family.name} requests speculate cannot be seen")
    plain_reqs, family_reqs = _requests(family, candidate, tokenizer, fitted_prompts, suite_config)
    if not family_reqs:
        pytest.skip(f"not verified: no {family.name} prompt of the run's prompt set (--categories) fits the "
                    f"context as '{candidate.name}' renders it ({fitted_prompts.fit.describe()})")
    plain = Share.of([candidate.generate(r) for r in plain_reqs])
    try:
        answers = [candidate.generate(r) for r in family_reqs]
    except (FeatureUnsupported, CapabilityMissing) as exc:
        if is_dropped(exc):   # an answer without its logprobs is no refusal: the logprobs check judges the drop
            why = (f"an answer to a {family.name} request came back without what it asked for, so its drafting was "
                   f"not read ({exc.describe()[:200]})")
            findings.cover("spec-path", candidate.name, verified=False, could_detect=could, reason=why)
            pytest.skip(f"not verified: '{candidate.name}': {why}")
        findings.cover("spec-path", candidate.name, verified=False, supported=False, could_detect=could,
                       reason=f"the route refuses {family.name} requests: {exc.describe()[:200]}")
        pytest.skip(f"not verified: '{candidate.name}' refuses {family.name} requests ({exc.describe()[:200]})")
    share = Share.of(answers)
    findings.measure("speculation_share", route=candidate.name, family=family.name, answers=share.answers,
                     stated=share.stated, speculated=share.speculated, plain_stated=plain.stated,
                     plain_speculated=plain.speculated, draft_tokens=[a.draft_tokens for a in answers])
    if not share.stated or not plain.stated:
        pytest.skip(f"not verified: '{candidate.name}' states no drafting per answer, so whether {family.name} "
                    f"requests speculate cannot be seen")
    if not plain.speculated:
        pytest.skip(f"not verified: plain requests did not speculate on '{candidate.name}' either ({plain.phrase()}): "
                    f"the speculation status of the run says why")
    drop = DropVerdict.of(share, plain, alpha=suite_config.alpha)
    findings.cover("spec-path", candidate.name, verified=drop.powered, could_detect=drop.could_detect(family.name),
                   ran={"family answers": share.stated, "answers that speculated": share.speculated,
                        "plain answers": plain.stated, "plain answers that speculated": plain.speculated},
                   reason=drop.shortfall(family.name))
    if not drop.off:
        return
    for check, part in family.parity:
        findings.cover(check, candidate.name, verified=False, part=part, could_detect=f"{check} on speculated answers",
                       reason=f"not verified on the speculative path: speculation is silently off for "
                              f"{family.name} requests on '{candidate.name}' ({share.phrase()}; plain: "
                              f"{plain.phrase()})")
    title = (f"speculation silently off for {family.name} requests: {share.phrase()}, while plain requests did "
             f"({plain.phrase()}; Fisher p={drop.p_value:.2g})")
    findings.add(Finding(check="spec-path", severity="bug", route=candidate.name, title=title,
                         details={"family": family.name, "family_share": share.phrase(), "plain_share": plain.phrase(),
                                  "p_value": drop.p_value, "alpha": suite_config.alpha,
                                  "could_detect": drop.could_detect(family.name),
                                  "parity_rows_not_verified": [f"{c}: {p}" for c, p in family.parity],
                                  "requests": [r.request_id for r in family_reqs],
                                  "draft_tokens": [a.draft_tokens for a in answers],
                                  "why": "answers stay correct, so every parity check of this feature passes "
                                         "without exercising the speculative path (vllm#34497, llama.cpp#19231)",
                                  "repro": spec_path_repro(plain_reqs, family_reqs, family_name=family.name,
                                                           candidate=candidate, baseline=baseline)}))
    pytest.fail(f"'{candidate.name}': {title}", pytrace=False)
