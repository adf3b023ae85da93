"""The in-process transformers adapter on the embedded tiny pair."""
from __future__ import annotations

import asyncio

import pytest

from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.wire.hf import HFRoute
from spec_route_suite.routes.spec import EMBEDDED_MODELS, default_baseline, default_candidate, parse_route_uri


@pytest.fixture(scope="module")
def ar():
    return HFRoute(default_baseline())


@pytest.fixture(scope="module")
def assisted():
    return HFRoute(default_candidate())


@pytest.fixture(scope="module")
def math_prompt(ar):
    prompt = load_prompt_set(["math"])[0]
    return encode_prompt(ar.tokenizer, prompt.text)


def test_assisted_greedy_equals_ar_and_speculation_ran(ar, assisted, math_prompt):
    req = Request(prompt_ids=math_prompt, max_tokens=40)
    plain = asyncio.run(ar.generate(req))
    fast = asyncio.run(assisted.generate(req))
    assert plain.token_ids == fast.token_ids and plain.finish_reason == fast.finish_reason
    snapshot = asyncio.run(assisted.acceptance())
    assert snapshot is not None and snapshot.drafts > 0 and snapshot.mean_acceptance_length > 1.0
    idle = asyncio.run(ar.acceptance())
    assert idle is not None and idle.drafts == 0, "plain decoding drafts nothing (target passes are not drafts)"


def test_eos_ends_with_stop_and_max_tokens_with_length(ar, math_prompt):
    full = asyncio.run(ar.generate(Request(prompt_ids=math_prompt, max_tokens=120)))
    assert full.finish_reason == "stop" and full.token_ids[-1] == ar.tokenizer.eos_token_id
    short = asyncio.run(ar.generate(Request(prompt_ids=math_prompt, max_tokens=3)))
    assert short.finish_reason == "length" and short.token_ids == full.token_ids[:3]
    ignored = asyncio.run(ar.generate(Request(prompt_ids=math_prompt, max_tokens=len(full.token_ids) + 5,
                                              ignore_eos=True)))
    assert len(ignored.token_ids) == len(full.token_ids) + 5


def test_stop_string_is_cut_from_text(ar, math_prompt):
    full = asyncio.run(ar.generate(Request(prompt_ids=math_prompt, max_tokens=60)))
    stop = full.text[5:8]
    cut = asyncio.run(ar.generate(Request(prompt_ids=math_prompt, max_tokens=60, stop=(stop,))))
    assert cut.finish_reason == "stop" and stop not in cut.text and full.text.startswith(cut.text)
    assert len(cut.token_ids) < len(full.token_ids)


def test_logprobs_match_teacher_forcing(ar, math_prompt):
    out = asyncio.run(ar.generate(Request(prompt_ids=math_prompt, max_tokens=8, logprobs=3)))
    scored = asyncio.run(ar.score(math_prompt, out.token_ids, 3))
    assert len(out.logprobs) == len(scored) == len(out.token_ids)
    for emitted, forced in zip(out.logprobs, scored):
        assert emitted.token_id == forced.token_id
        assert emitted.top[0][0] == emitted.token_id  # greedy: the emitted token is rank 1
        assert abs(emitted.logprob - forced.logprob) < 1e-4


def test_seeded_sampling_is_reproducible(assisted, math_prompt):
    req = Request(prompt_ids=math_prompt, max_tokens=16, temperature=1.0, seed=1234)
    first = asyncio.run(assisted.generate(req))
    again = asyncio.run(assisted.generate(req))
    assert first.token_ids == again.token_ids


def test_prompt_lookup_route_is_speculative(math_prompt):
    route = HFRoute(parse_route_uri("candidate", f"hf:{EMBEDDED_MODELS / 'target'}?prompt_lookup=3",
                                    base=EMBEDDED_MODELS, environ={}))
    out = asyncio.run(route.generate(Request(prompt_ids=math_prompt, max_tokens=20)))
    inventory = asyncio.run(route.inventory())
    assert out.token_ids and inventory.speculation["method"] == "prompt_lookup"


def test_sampling_without_top_k_keeps_the_whole_vocabulary(ar, math_prompt):
    """Regression: a request without top_k must not be cut to transformers' default top-50."""
    import torch
    with torch.inference_mode():
        logits = ar.model(torch.tensor([list(math_prompt)])).logits[0, -1]
    probs = torch.softmax(logits / 3.0, dim=-1)
    top50 = set(torch.topk(probs, 50).indices.tolist())
    tail_mass = 1.0 - float(probs[list(top50)].sum())
    assert tail_mass > 0.05, "the check needs a prompt with real mass outside the top 50"
    n = 300
    outs = [asyncio.run(ar.generate(Request(prompt_ids=math_prompt, max_tokens=1, temperature=3.0, seed=i)))
            for i in range(n)]
    outside = sum(o.token_ids[0] not in top50 for o in outs)
    # Binomial(n, tail_mass): more than 4 standard deviations below the mean means truncation.
    assert outside >= n * tail_mass - 4 * (n * tail_mass * (1 - tail_mass)) ** 0.5, (outside, tail_mass)
