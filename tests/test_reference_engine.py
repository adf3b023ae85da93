"""The reference engine: greedy equals the target's AR output, the serving contract holds, each fault bites.

Greedy equality is exact (float32, token for token, finish reason too) against the hf
route's plain AR generation on every fixture prompt, alone and inside a concurrent batch
whose composition changes as rows finish and others join. The contract (stop strings,
stop ids, EOS, ignore_eos, max_tokens, logprobs, teacher forcing, seeds, acceptance
counters, timeouts) is checked against the hf route where it defines the answer. Each
non-statistical fault must change behaviour the way its bug class does; the statistical
faults are proven in test_reference_sampling.py.
"""
from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import torch

from spec_route_suite.embedded import DRAFT_DIR, TARGET_DIR
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import RouteTimeout
from spec_route_suite.routes.spec import ConfigError, RouteSpec, parse_route_uri

K = 4
MAX_TOKENS = 64



@pytest.fixture(scope="module")
def models():
    from spec_route_suite.reference.route import load_model
    torch.set_num_threads(1)
    return load_model(str(TARGET_DIR)), load_model(str(DRAFT_DIR))


def spec_of(name: str = "candidate", **options) -> RouteSpec:
    return RouteSpec(name=name, kind="reference", model=str(TARGET_DIR), tokenizer=str(TARGET_DIR),
                     draft=str(DRAFT_DIR), num_assistant_tokens=options.pop("k", K),
                     options=tuple(sorted((k, str(v)) for k, v in options.items())))


@pytest.fixture(scope="module")
def make(models, loop):
    """make(**options) -> a ReferenceRoute sharing the loaded pair (closed at module end)."""
    from spec_route_suite.reference import ReferenceRoute
    built = []

    def build(**options):
        route = ReferenceRoute(spec_of(**options), models=models)
        built.append(route)
        return route
    yield build
    for route in built:
        loop.run(route.aclose(), timeout=30)


@pytest.fixture(scope="module")
def ref(make):
    return make()


@pytest.fixture(scope="module")
def ar(loop):
    from spec_route_suite.routes.wire.hf import HFRoute
    return HFRoute(parse_route_uri("baseline", f"hf:{TARGET_DIR}", base=TARGET_DIR))


@pytest.fixture(scope="module")
def prompt_ids(ref):
    return {p.id: encode_prompt(ref.tokenizer, p.text) for p in load_prompt_set()}


def greedy(ids, max_tokens: int = MAX_TOKENS, **kw) -> Request:
    return Request(prompt_ids=tuple(ids), max_tokens=max_tokens, temperature=0.0, **kw)


def serially(loop, route, requests):
    async def go():
        return [await route.generate(r) for r in requests]
    return loop.run(go(), timeout=600)


def together(loop, route, requests):
    async def go():
        return list(await asyncio.gather(*(route.generate(r) for r in requests)))
    return loop.run(go(), timeout=600)


@pytest.fixture(scope="module")
def ar_outputs(loop, ar, prompt_ids):
    names = list(prompt_ids)
    outs = serially(loop, ar, [greedy(prompt_ids[n]) for n in names])
    return dict(zip(names, outs))


def same(a, b) -> bool:
    return (a.token_ids, a.finish_reason) == (b.token_ids, b.finish_reason)


def truncated(out, max_tokens: int, eos: int):
    """The AR output a request with a smaller max_tokens must return (greedy outputs are prefix-closed)."""
    tokens = out.token_ids[:max_tokens]
    finish = "stop" if tokens and tokens[-1] == eos else ("length" if len(tokens) == max_tokens else out.finish_reason)
    return tokens, finish


# -- greedy equality --------------------------------------------------------------------------
def test_greedy_equals_target_ar_alone_on_every_fixture_prompt(loop, ref, prompt_ids, ar_outputs):
    names = list(prompt_ids)
    outs = serially(loop, ref, [greedy(prompt_ids[n], request_id=n) for n in names])
    bad = [n for n, out in zip(names, outs) if not same(out, ar_outputs[n])]
    assert not bad, f"greedy differs from AR alone on {len(bad)}/{len(names)} prompts: {bad[:8]}"


def test_greedy_equals_target_ar_in_a_changing_concurrent_batch(loop, ref, prompt_ids, ar_outputs):
    """All prompts at once (max_batch 32: later ones join as rows finish), max_tokens mixed 8..64."""
    eos = ref.tokenizer.eos_token_id
    names = list(prompt_ids)
    limits = [(8, 24, 64, 40)[i % 4] for i in range(len(names))]
    steps = ref.batcher.steps
    outs = together(loop, ref, [greedy(prompt_ids[n], m, request_id=n) for n, m in zip(names, limits)])
    bad = [n for n, m, out in zip(names, limits, outs)
           if (out.token_ids, out.finish_reason) != truncated(ar_outputs[n], m, eos)]
    assert not bad, f"greedy differs from AR inside a batch on {len(bad)}/{len(names)} prompts: {bad[:8]}"
    assert ref.batcher.max_rows_seen >= min(32, len(names))
    assert ref.batcher.joined_mid_flight > 0, "no request joined a batch already in flight"
    assert ref.batcher.steps > steps


@pytest.mark.parametrize("drafter, k", [("argmax", 2), ("ngram", 3), ("model", 7), ("none", 4)])
def test_other_drafters_and_k_keep_greedy_exact(loop, make, prompt_ids, ar_outputs, drafter, k):
    route = make(drafter=drafter, k=k)
    names = [n for i, n in enumerate(prompt_ids) if i % 5 == 0]
    outs = together(loop, route, [greedy(prompt_ids[n]) for n in names])
    bad = [n for n, out in zip(names, outs) if not same(out, ar_outputs[n])]
    assert not bad, f"drafter={drafter} k={k}: greedy differs from AR on {bad}"
    assert all(out.draft_tokens == 0 for out in outs) == (drafter == "none")   # none: the engine's own AR twin


def test_the_prompt_cache_serves_the_next_turn_and_keeps_greedy_exact(loop, make, ar, prompt_ids, ar_outputs):
    """prefix_cache=on: turn 2 (turn 1's prompt + answer + more) takes turn 1 from the cache and states it; a prompt
    sent again is served from the cache up to its last token; every answer equals the AR route's, alone or in
    company."""
    route = make(prefix_cache="on")
    names = subset(prompt_ids, 10)
    first = serially(loop, route, [greedy(prompt_ids[n]) for n in names])
    assert [same(out, ar_outputs[n]) for n, out in zip(names, first)] == [True] * len(names)
    uncached = serially(loop, make(), [greedy(prompt_ids[names[0]])])[0]
    assert first[0].cached_tokens == 0 and uncached.cached_tokens is None   # no prompt cache: nothing stated
    turns = [greedy(prompt_ids[n] + out.token_ids + (9, 10), 16) for n, out in zip(names, first)]
    for n, (turn, out) in enumerate(zip(turns, first)):
        served = serially(loop, route, [greedy(prompt_ids[names[n]]), turn])
        assert served[1].cached_tokens >= len(prompt_ids[names[n]]) + len(out.token_ids) - 1, served[1]
        assert same(served[1], serially(loop, ar, [turn])[0])
    again = together(loop, route, [greedy(prompt_ids[n]) for n in names])
    assert [same(out, ar_outputs[n]) for n, out in zip(names, again)] == [True] * len(names)
    assert serially(loop, route, [greedy(prompt_ids[names[0]])] * 2)[1].cached_tokens == len(prompt_ids[names[0]]) - 1


# -- the serving contract ---------------------------------------------------------------------
def contract_cases(prompt_ids, tokenizer):
    ids = prompt_ids["math-00"]
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    cases = []
    for m in range(1, K + 3):
        cases += [greedy(ids, m), greedy(ids, m, ignore_eos=True), greedy(ids, m, stop_token_ids=tuple(newline))]
    cases += [greedy(ids, 64, stop=(" =",)), greedy(ids, 64, stop=("\n", "+")), greedy(ids, 64, ignore_eos=True),
              greedy(prompt_ids["chat-00"], 64, stop=(".",))]
    return cases


def test_stops_and_lengths_match_the_ar_route(loop, ref, ar, prompt_ids):
    cases = contract_cases(prompt_ids, ref.tokenizer)
    expected = serially(loop, ar, cases)
    got = together(loop, ref, cases)
    for req, want, out in zip(cases, expected, got):
        assert len(out.token_ids) <= req.max_tokens and out.usage_completion_tokens == len(out.token_ids)
        assert (out.token_ids, out.finish_reason, out.text) == (want.token_ids, want.finish_reason, want.text), req


def test_logprobs_and_scores_are_the_targets(loop, ref, ar, prompt_ids):
    req = greedy(prompt_ids["chat-01"], 24, logprobs=5)
    want, out = serially(loop, ar, [req])[0], serially(loop, ref, [req])[0]
    assert out.token_ids == want.token_ids and len(out.logprobs) == len(out.token_ids)
    for a, b in zip(out.logprobs, want.logprobs):
        assert a.token_id == b.token_id and abs(a.logprob - b.logprob) < 1e-4
        assert [t for t, _ in a.top] == [t for t, _ in b.top] and a.top[0][0] == a.token_id
    scored = loop.run(ref.score(req.prompt_ids, out.token_ids, 5), timeout=60)
    assert [round(s.logprob, 4) for s in scored] == [round(x.logprob, 4) for x in out.logprobs]


def test_streamed_requests_return_the_same_tokens(loop, ref, prompt_ids):
    req = greedy(prompt_ids["code-00"], 40)
    plain, streamed = serially(loop, ref, [req, replace(req, stream=True)])
    assert plain.token_ids == streamed.token_ids and plain.stream_events is None
    assert 1 <= streamed.stream_events <= len(streamed.token_ids)


def test_seeded_samples_do_not_depend_on_the_batch(loop, ref, prompt_ids):
    sampled = Request(prompt_ids=prompt_ids["chat-02"], max_tokens=32, temperature=1.0, top_p=0.95, seed=1234,
                      ignore_eos=True)
    alone = serially(loop, ref, [sampled, sampled])
    noise = [Request(prompt_ids=prompt_ids[n], max_tokens=m, temperature=0.8, seed=i)
             for i, (n, m) in enumerate([("math-01", 20), ("json-00", 48), ("long-00", 12), ("code-01", 30)])]
    crowd = together(loop, ref, [noise[0], noise[1], sampled, noise[2], noise[3]])
    other_seed = serially(loop, ref, [replace(sampled, seed=99)])[0]
    assert alone[0].token_ids == alone[1].token_ids == crowd[2].token_ids
    assert other_seed.token_ids != alone[0].token_ids


def test_acceptance_counters_are_consistent_and_speculation_ran(loop, make, prompt_ids):
    route = make()
    before = loop.run(route.acceptance(), timeout=10)
    together(loop, route, [greedy(prompt_ids[n]) for n in list(prompt_ids)[:12]])
    snap = loop.run(route.acceptance(), timeout=10).minus(before)
    per_pos = list(snap.accepted_per_pos)
    assert len(per_pos) == K and sum(per_pos) == snap.accepted and snap.draft_tokens == K * snap.drafts
    assert all(a >= b for a, b in zip(per_pos, per_pos[1:])), per_pos
    assert snap.mean_acceptance_length > 1.5, "speculation did not run (acceptance length ~1)"
    from spec_route_suite.routes.speculation.metrics import acceptance_from_metrics
    scraped = acceptance_from_metrics(route.engine.counters.prometheus())
    own = loop.run(route.acceptance(), timeout=10)
    # The same counters read two ways: scraped from /metrics they are the server's, read off the route its own.
    assert (scraped.scope, own.scope) == ("server", "route")
    assert replace(scraped, scope="route") == own


def test_timeout_and_cancel_leave_the_engine_healthy(loop, ref, prompt_ids, ar_outputs):
    with pytest.raises(RouteTimeout):
        loop.run(ref.generate(greedy(prompt_ids["long-01"], 64, ignore_eos=True, timeout_s=0.001)), timeout=60)
    assert loop.run(ref.health(), timeout=10)
    assert same(serially(loop, ref, [greedy(prompt_ids["math-02"])])[0], ar_outputs["math-02"])


def test_inventory_names_engine_draft_k_and_fault(loop, make):
    inv = loop.run(make(fault="kv_no_rollback", k=3).inventory(), timeout=10)
    assert inv.engine == "reference" and inv.draft == "draft" and inv.speculation["num_speculative_tokens"] == 3
    assert inv.speculation["fault"] == "kv_no_rollback" and inv.extra["fault"] == "kv_no_rollback"


@pytest.mark.parametrize("uri, field", [("reference:?fault=nope", "candidate.fault"),
                                        ("reference:?drafter=beam", "candidate.drafter"),
                                        ("reference:?mix_rate=2", "candidate.mix_rate"),
                                        ("reference:?max_batch=0", "candidate.max_batch"),
                                        ("reference:?noise=-1", "candidate.noise"),
                                        ("reference:?prefix_cache=yes", "candidate.prefix_cache"),
                                        ("reference:?fualt=kv_no_rollback", "candidate.fualt")])
def test_bad_options_name_their_field(uri, field):
    from spec_route_suite.reference import engine_config_from_spec
    with pytest.raises(ConfigError) as err:
        engine_config_from_spec(parse_route_uri("candidate", uri, base=TARGET_DIR))
    assert err.value.field == field


# -- each fault bites the way its bug class does ----------------------------------------------
def subset(prompt_ids, every: int = 5):
    return [n for i, n in enumerate(prompt_ids) if i % every == 0]


@pytest.mark.parametrize("fault", ["kv_no_rollback", "accept_count_off_by_one"])
def test_greedy_faults_diverge_from_ar(loop, make, prompt_ids, ar_outputs, fault):
    route = make(fault=fault)
    names = subset(prompt_ids)
    outs = serially(loop, route, [greedy(prompt_ids[n]) for n in names])
    diverged = [n for n, out in zip(names, outs) if not same(out, ar_outputs[n])]
    assert len(diverged) >= len(names) // 4, f"{fault}: only {diverged} of {len(names)} diverged"


def test_max_tokens_overshoot_returns_the_whole_block(loop, make, prompt_ids):
    route = make(fault="max_tokens_overshoot")
    cases = [greedy(prompt_ids[n], m, ignore_eos=True) for n in subset(prompt_ids, 7) for m in range(1, K + 3)]
    outs = together(loop, route, cases)
    over = [len(o.token_ids) - r.max_tokens for r, o in zip(cases, outs)]
    assert max(over) > 0 and max(over) <= K, over


def test_tokens_after_stop_keeps_tokens_past_eos(loop, make, prompt_ids, ar_outputs):
    eos = make().tokenizer.eos_token_id
    route = make(fault="tokens_after_stop")
    names = [n for n in prompt_ids if ar_outputs[n].finish_reason == "stop"][:24]
    outs = together(loop, route, [greedy(prompt_ids[n]) for n in names])
    leaked = [n for n, o in zip(names, outs) if eos in o.token_ids[:-1]]
    assert leaked, f"no output kept tokens after EOS on {len(names)} prompts that end with EOS"


def test_logprobs_from_draft_are_not_the_targets(loop, make, ref, prompt_ids):
    req = greedy(prompt_ids["chat-01"], 24, logprobs=5)
    right = serially(loop, ref, [req])[0]
    wrong = serially(loop, make(fault="logprobs_from_draft"), [req])[0]
    assert wrong.token_ids == right.token_ids
    gap = max(abs(a.logprob - b.logprob) for a, b in zip(wrong.logprobs, right.logprobs))
    assert gap > 0.05, f"draft logprobs within {gap:.3g} of the target's"


def test_cross_context_mixing_answers_in_another_conversation(loop, make, ref, prompt_ids, ar_outputs):
    route = make(fault="cross_context_mixing", mix_rate=1.0, seed=3)
    names = [n for n in prompt_ids if n.startswith("chat-")][:4]
    alone = serially(loop, route, [greedy(prompt_ids[n], request_id=n) for n in names])
    assert route.fault_log == [] and all(same(o, ar_outputs[n]) for n, o in zip(names, alone)), "mixed while alone"
    outs = together(loop, route, [greedy(prompt_ids[n], request_id=n) for n in names])
    log = route.fault_log
    assert log and all(v in names and s in names and v != s for v, s in log)
    for victim, source in log:
        v_ids, s_ids = list(prompt_ids[victim]), list(prompt_ids[source])
        user = route.engine.user_id
        cut_v = len(v_ids) - 1 - v_ids[::-1].index(user)
        cut_s = len(s_ids) - 1 - s_ids[::-1].index(user)
        mixed = serially(loop, ref, [greedy(s_ids[:cut_s] + v_ids[cut_v:])])[0]
        assert outs[names.index(victim)].token_ids == mixed.token_ids
    assert any(not same(outs[names.index(v)], ar_outputs[v]) for v, _ in log)


def test_kv_slot_swap_corrupts_rows_only_in_company(loop, make, prompt_ids, ar_outputs):
    route = make(fault="kv_slot_swap", mix_rate=1.0, seed=5)
    names = subset(prompt_ids, 9)[:6]
    alone = serially(loop, route, [greedy(prompt_ids[n], request_id=n) for n in names])
    assert route.fault_log == [] and all(same(o, ar_outputs[n]) for n, o in zip(names, alone))
    outs = together(loop, route, [greedy(prompt_ids[n], request_id=n) for n in names])
    assert route.fault_log, "no swap happened in a batch of 6"
    assert any(not same(o, ar_outputs[n]) for n, o in zip(names, outs))


def test_logit_noise_splits_only_at_near_ties(loop, make, prompt_ids, ar_outputs):
    from spec_route_suite.reference.faults import FaultConfig
    noise = FaultConfig().noise
    route = make(fault="logit_noise", seed=1)
    names = list(prompt_ids)
    outs = together(loop, route, [greedy(prompt_ids[n]) for n in names])
    margins = []
    for n, out in zip(names, outs):
        want = ar_outputs[n].token_ids
        split = next((i for i, (a, b) in enumerate(zip(want, out.token_ids)) if a != b), None)
        if split is None:
            continue
        scored = loop.run(route.score(prompt_ids[n], out.token_ids[:split + 1], 2), timeout=60)[-1]
        margins.append(scored.top[0][1] - scored.logprob)
    assert margins, f"noise {noise} split no greedy output on {len(names)} prompts"
    bound = 4 * 2 ** 0.5 * noise  # 4 sigma of the difference of two noisy logits
    assert max(margins) <= bound, f"a split at margin {max(margins):.3g}: not a near-tie at noise {noise}"


def test_rows_reading_one_shared_prompt_copy_compute_what_copied_rows_compute():
    """sample_n's rows read one copy of their prompt's KV (shared_prefix.py) instead of one each: through forwards,
    rollbacks, rows leaving, a padded prompt of another length and a late copy into the rows (materialize, as a
    kv_slot_swap needs), their logits are the copied rows' to float rounding."""
    from transformers import AutoModelForCausalLM
    from spec_route_suite.reference.prefill import prefilled
    model = AutoModelForCausalLM.from_pretrained(str(TARGET_DIR), dtype=torch.float32).eval()
    contexts = [[1, 5, 9, 14, 20, 33, 7], [1, 8, 8, 3, 12]] * 3 + [[1, 5, 9, 14, 20, 33, 7]]
    with torch.inference_mode():
        copied, shared = (prefilled(model, contexts, chunk=3, share=s) for s in (False, True))
        assert shared.shared is not None and copied.shared is None and shared.known(0) == copied.known(0) == 6

        def both(step) -> None:
            a, b = step(copied), step(shared)
            assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
            assert [copied.known(r) for r in range(copied.rows)] == [shared.known(r) for r in range(shared.rows)]

        both(lambda kv: kv.forward([[c[-1], 40 + r] for r, c in enumerate(contexts)]))
        for kv in (copied, shared):
            kv.rollback(2, kv.known(2) - 1)   # a rejected draft
            kv.drop([0, 4])
        assert shared.shared is not None and shared.rows == 5
        both(lambda kv: kv.forward([[50 + r] * (1 + r % 2) for r in range(kv.rows)]))
        for kv in (copied, shared):
            kv.swap_rows(1, 3)
            kv.swap_rows(1, 3)
        assert shared.shared is None   # copied into the rows before their columns moved
        both(lambda kv: kv.forward([[60 + r] for r in range(kv.rows)]))
