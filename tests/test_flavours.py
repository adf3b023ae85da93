"""Engine flavours: detection from what a server's GET endpoints answer, the facts each flavour reads, what
one answer states, and the refusals that state a fact. The answers are the engines' own shapes (the llama.cpp
ones as its server wrote them here; SGLang and TGI from their documented fields, as recorded fixtures)."""
from __future__ import annotations

import pytest

from spec_route_suite.routes.base import AcceptanceSnapshot, Capabilities
from spec_route_suite.routes.speculation.evidence import SpeculationTally
from spec_route_suite.routes.flavours import Probes, ResponseEvidence, by_name, detect
from tests.http_fakes import recorded

LLAMA_PROPS = {"default_generation_settings": {"n_ctx": 512, "params": {"speculative.types": "none"}},
               "total_slots": 4, "model_alias": "tiny-target", "model_path": "/c/tiny.gguf", "build_info": "b1-0c1e570",
               "endpoint_metrics": False, "endpoint_slots": True}
LLAMA_MODELS = {"object": "list", "data": [{"id": "tiny-target", "owned_by": "llamacpp", "meta": {"n_ctx": 512}}]}
LLAMA_TIMINGS = {"cache_n": 3, "prompt_n": 6, "predicted_n": 8, "draft_n": 14, "draft_n_accepted": 2}


def probes(bodies: dict, model: str = "tiny-target") -> Probes:
    return Probes(bodies=bodies, notes={p: "ok" for p in bodies}, model=model)


def llama(slot_speculative: bool | None) -> Probes:
    slots = [{"id": i, "n_ctx": 512, "speculative": slot_speculative, "is_processing": False} for i in range(4)]
    return probes({"/props": LLAMA_PROPS, "/v1/models": LLAMA_MODELS,
                   **({"/slots": slots} if slot_speculative is not None else {})})


@pytest.mark.parametrize("bodies,expected", [
    ({"/props": LLAMA_PROPS}, "llama.cpp"),
    ({"/v1/models": LLAMA_MODELS}, "llama.cpp"),
    ({"/version": {"version": "0.32.0"}}, "vllm"),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 2048}]}}, "vllm"),
    ({"/get_server_info": recorded("sglang_server_info.json")["get_server_info"]}, "sglang"),
    ({"/server_info?config_format=json": {"context_length": 512, "speculative_algorithm": None}}, "sglang"),
    ({"/info": {"model_id": "m", "max_total_tokens": 2048, "router": "text-generation-router"}}, "tgi"),
    ({"/v1/models": {"data": [{"id": "m", "owned_by": "someone"}]}}, "generic"),
    ({}, "generic"),
])
def test_the_flavour_is_detected_from_what_the_server_answers(bodies, expected):
    assert detect(probes(bodies, model="m")).name == expected


def test_vllm_dev_config_is_not_mistaken_for_sglang():
    vllm_config = {"/server_info?config_format=json": recorded("vllm_live.json")["server_info"],
                   "/version": {"version": "0.32.0"}}
    assert detect(probes(vllm_config, model="tiny-target")).name == "vllm"


def test_llama_cpp_states_its_slot_context_slots_and_whether_it_speculates():
    drafting, plain, silent = (by_name("llama.cpp").facts(llama(s)) for s in (True, False, None))
    assert (drafting.context_per_request, drafting.slots, drafting.speculative) == (512, 4, True)
    assert drafting.per_response_evidence and drafting.version == "b1-0c1e570"
    assert plain.speculative is False and "does not speculate" in plain.speculative_why
    assert silent.speculative is None and "/slots" in silent.speculative_why   # --no-slots: it does not say
    assert drafting.extra["endpoint_metrics"] is False


def test_llama_cpp_states_its_draft_depth_by_its_per_position_counter():
    """This build's /slots names the speculative types but no n_max; the per-position acceptance counter has one
    series per draft position (sized to the drafter's n_max), so a DFlash server drafting 7 a step says 7."""
    per_pos = "".join(f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {7 - i}\n'
                      for i in range(7))
    metrics = ("llamacpp:spec_decode_num_draft_tokens_total 21\nllamacpp:spec_decode_num_accepted_tokens_total 28\n"
               "llamacpp:spec_decode_num_drafts_total 7\n" + per_pos)
    slots = [{"id": 0, "n_ctx": 512, "speculative": True, "is_processing": False,
              "params": {"speculative.types": "none,draft-dflash"}}]
    facts = by_name("llama.cpp").facts(probes({"/props": LLAMA_PROPS, "/slots": slots, "/metrics": metrics}))
    assert facts.speculative and facts.speculation["types"] == "draft-dflash" and facts.draft_depth == 7
    before = by_name("llama.cpp").facts(probes({"/props": LLAMA_PROPS, "/slots": slots}))
    assert before.draft_depth is None, "nothing drafted yet and no n_max: the server has not said"
    stated = [{**slots[0], "params": {"speculative.types": "draft-simple", "speculative.n_max": 4}}]
    assert by_name("llama.cpp").facts(probes({"/props": LLAMA_PROPS, "/slots": stated, "/metrics": metrics})
                                      ).draft_depth == 4, "a stated n_max wins"


def test_llama_cpp_answers_state_their_drafts_and_cache_hits():
    flavour = by_name("llama.cpp")
    drafted = flavour.per_response({"timings": LLAMA_TIMINGS})
    assert (drafted.draft_tokens, drafted.accepted, drafted.steps, drafted.cached_tokens) == (14, 2, 6, 3)
    nothing = flavour.per_response({"timings": {"cache_n": 0, "predicted_n": 8}})   # no draft_n: none drafted
    assert (nothing.draft_tokens, nothing.accepted, nothing.steps) == (0, 0, 0) and nothing.speculation_stated
    assert not flavour.per_response({"choices": []}).speculation_stated   # an answer without timings says nothing


def test_the_tally_sums_answers_into_a_route_scoped_snapshot():
    tally = SpeculationTally()
    assert tally.snapshot() is None
    flavour = by_name("llama.cpp")
    for body in ({"timings": LLAMA_TIMINGS}, {"timings": {"predicted_n": 5}}, {"usage": {}}):
        tally.add(flavour.per_response(body))
    snap = tally.snapshot()
    assert (snap.drafts, snap.draft_tokens, snap.accepted, snap.scope) == (6, 14, 2, "route")
    assert tally.answers == 2 and tally.drafting_answers == 1
    sglang = SpeculationTally()
    sglang.add(by_name("sglang").per_response({"meta_info": {"spec_verify_ct": 4, "completion_tokens": 10,
                                                               "spec_accept_histogram": [1, 1, 2]}}))
    snap = sglang.snapshot(draft_depth=3)
    assert (snap.drafts, snap.accepted, snap.draft_tokens, snap.accepted_per_pos) == (4, 6, 12, (3, 2))


def test_vllm_states_its_context_and_that_it_does_not_speculate():
    entry = {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 512, "root": "/models/m"}]}
    plain = by_name("vllm").facts(probes({"/v1/models": entry, "/metrics": "vllm:num_requests_running 0\n"},
                                         model="m"))
    assert (plain.context_per_request, plain.speculative, plain.model) == (512, False, "/models/m")
    unreachable = by_name("vllm").facts(probes({"/v1/models": entry}, model="m"))
    assert unreachable.speculative is None


def test_vllm_max_logprobs_narrows_the_capability():
    facts = by_name("vllm").facts(probes({"/server_info?config_format=json": recorded("vllm_live.json")["server_info"]},
                                         model="tiny-target"))
    caps = by_name("vllm").capabilities(facts, Capabilities(logprobs=20))
    assert caps.logprobs == facts.extra["engine_config"]["max_logprobs"]


def test_llama_cpp_logprobs_cover_a_small_vocabulary_whole():
    """llama.cpp's n_probs has no cap: a vocabulary its /v1/models states, up to WHOLE_VOCABULARY tokens, is the
    route's logprobs capability (every sampling setting scored exactly); a larger or unstated one keeps 20."""
    def caps_for(meta: dict) -> Capabilities:
        models = {"object": "list", "data": [{"id": "tiny-target", "owned_by": "llamacpp", "meta": meta}]}
        facts = by_name("llama.cpp").facts(probes({"/props": LLAMA_PROPS, "/v1/models": models}))
        return by_name("llama.cpp").capabilities(facts, Capabilities(logprobs=20, prompt_logprobs=True))
    assert caps_for({"n_ctx": 512, "n_vocab": 512}).logprobs == 512
    assert caps_for({"n_ctx": 512, "n_vocab": 151_936}).logprobs == 20
    assert caps_for({"n_ctx": 512}).logprobs == 20
    assert not caps_for({"n_vocab": 512}).prompt_logprobs


def test_sglang_and_tgi_state_context_and_speculation():
    info = recorded("sglang_server_info.json")["get_server_info"]
    sglang = by_name("sglang").facts(probes({"/get_server_info": info}, model="toy"))
    assert (sglang.context_per_request, sglang.speculative, sglang.draft_depth) == (512, True, 3)
    assert sglang.prefix_cache is True and sglang.draft == "/models/toy-eagle"
    tgi = by_name("tgi").facts(probes({"/info": {"model_id": "m", "max_total_tokens": 4096, "speculate": 2,
                                                 "router": "text-generation-router", "version": "3.1"}}))
    assert (tgi.context_per_request, tgi.speculative, tgi.draft_depth, tgi.version) == (4096, True, 2, "3.1")


@pytest.mark.parametrize("message,limit,stated", [
    ("request (1038 tokens) exceeds the available context size (512 tokens), try increasing it", 512, 1038),
    ("input (700 tokens) is larger than the max context size (512 tokens). skipping", 512, 700),
    ("This model's maximum context length is 512 tokens. However, you requested 900 tokens (400 in the "
     "messages, 500 in the completion).", 512, 400),
    ("The input (600 tokens) is longer than the model's context length (512 tokens).", 512, 600),
])
def test_a_refusal_that_states_the_context_limit_is_read(message, limit, stated):
    refusal = by_name("generic").refusal(400, message)
    assert (refusal.kind, refusal.context_limit, refusal.prompt_tokens) == ("context", limit, stated)


def test_refusals_that_state_nothing_stay_errors():
    generic = by_name("generic")
    assert generic.refusal(400, "temperature must be positive") is None
    assert generic.refusal(500, "request (1038 tokens) exceeds the available context size (512 tokens)") is None
    chat = by_name("vllm").refusal(400, "As of transformers v4.44, default chat template is no longer allowed")
    assert chat is not None and chat.kind == "chat"


def test_the_generic_flavour_reads_cumulative_counters_wherever_they_are():
    text = "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total 16\n" \
           "vllm:spec_decode_num_accepted_tokens_total 9\n"
    snap = by_name("generic").acceptance(text, "m")
    assert isinstance(snap, AcceptanceSnapshot) and (snap.drafts, snap.accepted, snap.scope) == (4, 9, "server")
    assert not by_name("sglang").cumulative_counters and by_name("llama.cpp").cumulative_counters
    assert ResponseEvidence().speculation_stated is False


def test_vllm_states_its_scheduler_limits_kv_pool_and_preemptions():
    edges = recorded("vllm_edges.json")
    metrics = "\n".join(edges["metrics_lines"]) + "\n"
    facts = by_name("vllm").facts(probes({"/server_info?config_format=json": edges["server_info"], "/metrics": metrics,
                                          "/version": {"version": "0.32.0"}}))
    assert facts.boundaries == {"chunked_prefill_tokens": 64, "draft_max_len": 256}
    assert (facts.slots, facts.kv_capacity) == (16, 12 * 128)
    assert facts.extra["engine_config"]["async_scheduling"] is False
    assert by_name("vllm").preemptions(metrics, "tiny-target") == 37
    plain = by_name("vllm").facts(probes({"/server_info?config_format=json": recorded("vllm_live.json")["server_info"]}))
    assert plain.boundaries == {} and plain.kv_capacity is None   # the trimmed live config states neither
    whole = {"vllm_config": {"scheduler_config": {"max_num_batched_tokens": 2048, "enable_chunked_prefill": False},
                             "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}}
    assert by_name("vllm").facts(probes({"/server_info?config_format=json": whole})).boundaries == {
        "chunked_prefill_tokens": 0, "draft_max_len": 0}


def test_engines_without_a_preemption_counter_state_none():
    llama_metrics = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 5\n"
    assert by_name("llama.cpp").preemptions(llama_metrics, "tiny-target") is None
    info = {**recorded("sglang_server_info.json")["get_server_info"], "chunked_prefill_size": -1,
            "max_running_requests": 8, "max_total_num_tokens": 4096}
    facts = by_name("sglang").facts(probes({"/get_server_info": info}))
    assert (facts.boundaries, facts.slots, facts.kv_capacity) == ({"chunked_prefill_tokens": 0}, 8, 4096)


LLAMA_SAMPLER_DEFAULTS = {"top_k": 40, "top_p": 0.95, "min_p": 0.05, "typical_p": 1.0, "top_n_sigma": -1.0,
                          "xtc_probability": 0.0, "repeat_penalty": 1.0, "mirostat": 0,
                          "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                                       "temperature"]}   # llama.cpp's own /props, common/common.h defaults


def test_llama_cpp_requests_switch_off_the_samplers_its_server_runs_by_default(tmp_path):
    """A llama.cpp server samples with top-k 40 and min-p 0.05 unless told otherwise, and applies top-p before
    temperature: an OpenAI request that names none of them would sample from a chain the scoring test does not
    compute. Whatever the wire, a llama.cpp route sends them off and the suite's order; a request's own values
    win; a generic server never sees those fields; the facts say which defaults were overridden."""
    from spec_route_suite.routes.base import Request
    from spec_route_suite.routes.registry import build_route
    from spec_route_suite.routes.spec import EMBEDDED_MODELS, spec_from_table
    props = {**LLAMA_PROPS, "default_generation_settings": {"n_ctx": 512, "params": LLAMA_SAMPLER_DEFAULTS}}
    facts = by_name("llama.cpp").facts(probes({"/props": props, "/v1/models": LLAMA_MODELS}))
    assert facts.extra["sampler_defaults_switched_off"] == {
        "top_k": 40, "min_p": 0.05, "samplers": LLAMA_SAMPLER_DEFAULTS["samplers"]}
    order = ["top_k", "temperature", "top_p", "min_p"]
    for kind in ("openai", "llama-cpp"):
        route = build_route(spec_from_table("c", {"kind": kind, "base_url": "http://127.0.0.1:18200", "model": "m",
                                                  "tokenizer": str(EMBEDDED_MODELS / "target")}, base=tmp_path))
        route.flavour = by_name("llama.cpp")   # what server_facts detects on a llama.cpp server
        plain = Request(prompt_ids=(1, 2), max_tokens=3, temperature=1.0, top_p=0.9)
        payload = route.completion_payload(plain)
        assert (payload["top_k"], payload["min_p"], payload["top_p"], payload["samplers"]) == (0, 0.0, 0.9, order), kind
        named = route.completion_payload(Request(prompt_ids=(1, 2), max_tokens=3, temperature=1.0, top_k=20, min_p=0.1))
        assert (named["top_k"], named["min_p"]) == (20, 0.1), kind
    route = build_route(spec_from_table("c", {"kind": "openai", "base_url": "http://127.0.0.1:18200", "model": "m",
                                              "tokenizer": str(EMBEDDED_MODELS / "target")}, base=tmp_path))
    route.flavour = by_name("llama.cpp")
    chat = route.chat_payload([("user", "hi")], plain)
    assert (chat["top_k"], chat["min_p"], chat["samplers"]) == (0, 0.0, order)
    for name in ("generic", "vllm"):
        route.flavour = by_name(name)
        payload = route.completion_payload(plain)
        assert not {"top_k", "min_p", "samplers", "typical_p"} & set(payload), name
    assert by_name("llama.cpp").facts(llama(True)).extra["sampler_defaults_switched_off"] == {}   # /props says none
