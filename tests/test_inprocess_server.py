"""In-process routes served over HTTP (spec_route_suite.servers.inprocess), and the httpx repros that target them.

Why: a finding against the reference or hf engine is only actionable when a maintainer
can replay it with a standalone python + httpx script. Each claim is proven both ways:
the served correct engine answers exactly as the in-process route (greedy, streamed,
acceptance counters), concurrent HTTP requests really share the engine's batch (the
mixing fault fires only under concurrency and never with the correct engine), and the
rendered repro exits 1 against the faulty server and 0 against the correct one.
"""
from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import httpx
import pytest

from spec_route_suite.embedded import TARGET_DIR
from spec_route_suite.tokenizers import encode_prompt
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import AcceptanceSnapshot, Capabilities, Request, Route, RouteInventory
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.tokenizers import load_tokenizer
from spec_route_suite.routes.speculation.metrics import acceptance_from_metrics
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.servers.inprocess import Engine, make_server, serve_in_thread
from spec_route_suite.reports.repro_spec import LOAD_ATTEMPTS, load_repro, parity_repro
from tests.repro_helpers import adapter_handle, script_for, served

ROOT = Path(__file__).resolve().parent.parent
FAULTY = "reference:?fault=cross_context_mixing&mix_rate=1.0"
MAX_TOKENS = 24
CONCURRENCY = 8



@pytest.fixture(scope="module")
def correct():
    base_url, stop = serve_in_thread("reference:", base=ROOT)
    yield base_url
    stop()


@pytest.fixture(scope="module")
def faulty():
    base_url, stop = serve_in_thread(FAULTY, base=ROOT)
    yield base_url
    stop()


@pytest.fixture(scope="module")
def prompts():
    """id -> token ids: 3 mixed-category prompts for parity, 8 chat prompts for mixing."""
    tokenizer = load_tokenizer(str(TARGET_DIR))
    return {r.id: encode_prompt(tokenizer, r.text) for r in load_prompt_set()}


def chat_ids(prompts) -> list[str]:
    return [name for name in prompts if name.startswith("chat-")][:CONCURRENCY]


def served_model(base_url: str) -> str:
    return httpx.get(f"{base_url}/models").json()["data"][0]["id"]


def payload(ids, model: str) -> dict:
    return {"model": model, "prompt": list(ids), "max_tokens": MAX_TOKENS, "temperature": 0.0,
            "return_token_ids": True}


def post_all(base_url: str, payloads: list[dict], concurrency: int) -> list[list[int]]:
    async def run() -> list[list[int]]:
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=120) as client:
            async def one(body):
                async with gate:
                    resp = await client.post(f"{base_url}/completions", json=body)
                    resp.raise_for_status()
                    return resp.json()["choices"][0]["token_ids"]
            return await asyncio.gather(*(one(p) for p in payloads))
    return asyncio.run(run())


# ---- 1. the served engine answers as the in-process route ----
def test_served_reference_matches_in_process_greedy_streamed_and_metrics(loop, correct, prompts):
    model = served_model(correct)
    adapter = build_route(parse_route_uri(
        "candidate", f"openai:{correct}?model={quote(model, safe='')}&tokenizer={TARGET_DIR}", base=ROOT))
    local = build_route(parse_route_uri("baseline", "reference:", base=ROOT))
    try:
        for name in ("math-00", "code-03", "chat-05"):
            req = Request(prompt_ids=prompts[name], max_tokens=MAX_TOKENS, request_id=name)
            want = loop.run(local.generate(req), timeout=120)
            got = loop.run(adapter.generate(req), timeout=120)
            streamed = loop.run(adapter.generate(Request(prompt_ids=prompts[name], max_tokens=MAX_TOKENS,
                                                         stream=True, request_id=f"{name}-s")), timeout=120)
            assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason, name
            assert got.text == want.text and got.usage_completion_tokens == len(want.token_ids)
            assert streamed.token_ids == got.token_ids and streamed.text == got.text, name
            assert streamed.finish_reason == got.finish_reason and streamed.stream_events > 1
        with_lp = Request(prompt_ids=prompts["math-00"], max_tokens=8, logprobs=3)
        want, got = loop.run(local.generate(with_lp), timeout=120), loop.run(adapter.generate(with_lp), timeout=120)
        assert [e.token_id for e in got.logprobs] == list(want.token_ids)
        assert max(abs(a.logprob - b.logprob) for a, b in zip(got.logprobs, want.logprobs)) < 1e-5
        snap = acceptance_from_metrics(httpx.get(correct.removesuffix("/v1") + "/metrics").text, model_name=model)
        assert snap is not None and snap.drafts > 0 and snap.accepted == sum(snap.accepted_per_pos)
        assert loop.run(adapter.acceptance(), timeout=30) == snap
        inventory = loop.run(adapter.inventory(), timeout=30)
        assert inventory.max_model_len == 512 and inventory.speculation["spec_decode_metrics"]
    finally:
        loop.run(adapter.aclose(), timeout=30)
        loop.run(local.aclose(), timeout=30)


def test_bad_requests_get_openai_style_errors(correct):
    url = f"{correct}/completions"
    bad_json = httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400 and "invalid JSON" in bad_json.json()["error"]["message"]
    assert httpx.post(url, json={"max_tokens": 4}).json()["error"]["param"] == "prompt"
    assert httpx.post(url, json={"prompt": [1, 2], "n": 65}).status_code == 400        # above the server's maximum
    assert httpx.post(url, json={"prompt": [1, 2], "n": 2, "stream": True}).status_code == 400
    assert httpx.post(url, json={"prompt": [1, 2], "max_tokens": "x"}).status_code == 400
    assert httpx.post(url, json={"prompt": [1, 2], "model": "nope"}).status_code == 404
    text = httpx.post(url, json={"prompt": "Hello", "max_tokens": 3, "temperature": 0})
    assert text.status_code == 200 and len(text.json()["choices"][0]["token_ids"]) == 3
    root = correct.removesuffix("/v1")
    assert httpx.get(f"{root}/health").status_code == 200 and "version" in httpx.get(f"{root}/version").json()


class FailingRoute(Route):
    """A route whose engine fails every request: the server must answer 500 with its message."""

    name = "broken"
    capabilities = Capabilities(logprobs=5)

    async def generate(self, req):
        raise RouteError("engine exploded on purpose", route=self.name, request_id=req.request_id)

    async def inventory(self):
        return RouteInventory(engine="test")

    async def acceptance(self):
        return AcceptanceSnapshot(drafts=2, draft_tokens=8, accepted=5, accepted_per_pos=(2, 2, 1, 0))

    async def aclose(self):
        return None


def test_route_error_is_500_and_metrics_round_trip():
    engine = Engine(FailingRoute(), spec=SimpleNamespace(model="m", tokenizer=None))
    httpd = make_server(engine)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    root = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        resp = httpx.post(f"{root}/v1/completions", json={"prompt": [1, 2]})
        assert resp.status_code == 500 and "exploded on purpose" in resp.json()["error"]["message"]
        assert httpx.post(f"{root}/v1/completions", json={"prompt": "text"}).status_code == 400  # no tokenizer
        snap = acceptance_from_metrics(httpx.get(f"{root}/metrics").text)
        assert snap == AcceptanceSnapshot(drafts=2, draft_tokens=8, accepted=5, accepted_per_pos=(2, 2, 1, 0),
                                          scope="server")
    finally:
        httpd.shutdown()
        httpd.server_close()
        engine.close()


# ---- 2. concurrent HTTP requests share the engine's batch ----
def test_concurrency_reaches_the_engine(correct, faulty, prompts):
    names = chat_ids(prompts)
    assert len(names) == CONCURRENCY and len({prompts[n] for n in names}) == CONCURRENCY
    model = served_model(correct)
    bodies = [payload(prompts[n], model) for n in names]
    serial = post_all(correct, bodies, concurrency=1)
    assert post_all(faulty, bodies, concurrency=1) == serial, "the mixing engine mixed requests sent one at a time"
    assert post_all(correct, bodies, concurrency=CONCURRENCY) == serial, "the correct engine is not batch-invariant"
    mixed = post_all(faulty, bodies, concurrency=CONCURRENCY)
    assert any(m != s for m, s in zip(mixed, serial)), "8 concurrent requests never met in one batch"


# ---- 3. the rendered repro needs only python + httpx and tells the engines apart ----
def mixing_repro(prompts, attempts: int) -> str:
    """The chat prompts sent together at concurrency 8, each compared with its answer alone (judge "load")."""
    steps = [(Request(prompt_ids=prompts[n], max_tokens=MAX_TOKENS, request_id=n), 0, None) for n in chat_ids(prompts)]
    block = load_repro(steps, candidate=served("candidate"), baseline=served("baseline"), concurrency=CONCURRENCY,
                       attempts=attempts)
    specs = [parse_route_uri(name, uri, base=ROOT).public_dict() for name, uri in (("baseline", "reference:"),
                                                                                  ("candidate", FAULTY))]
    script, curl, _ = script_for(block, specs=specs, route="candidate")
    assert curl.count("curl -s") == 2 * CONCURRENCY   # each request to the candidate, then to the baseline
    return script


def run_script(tmp_path: Path, script: str, candidate: str, baseline: str) -> subprocess.CompletedProcess:
    path = tmp_path / "repro.py"
    path.write_text(script)
    return subprocess.run([sys.executable, str(path), "--candidate-url", candidate, "--baseline-url", baseline],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})


def test_http_repro_reproduces_only_against_the_faulty_engine(tmp_path, correct, faulty, prompts):
    script = mixing_repro(prompts, attempts=3)
    assert not re.search(r"^\s*(import|from)\s+(fixtures|reports|equivalence|spec_route_suite)\b", script, re.M)
    assert '"attempts": 3' in script and '"concurrency": 8' in script and "import httpx" in script
    bad = run_script(tmp_path, script, faulty, correct)   # the correct engine is the control
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "REPRODUCED" in bad.stdout and "under load differs from its answer alone" in bad.stdout
    good = run_script(tmp_path, script, correct, correct)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "unchanged in 3 passes" in good.stdout
    down = run_script(tmp_path, script, "http://127.0.0.1:9/v1", correct)  # nothing listens: an error, not a repro
    assert down.returncode == 2, down.stdout + down.stderr


def test_http_repro_compares_text_when_the_server_returns_no_token_ids(tmp_path, prompts):
    """A gateway without token ids: the script judges the text (an id comparison would call every answer
    of a correct server a mismatch), and still tells the faulty engine from the correct one."""
    correct, stop_correct = serve_in_thread("reference:", base=ROOT, token_ids="none")
    faulty, stop_faulty = serve_in_thread(FAULTY, base=ROOT, token_ids="none")
    try:
        script = mixing_repro(prompts, attempts=3)
        good = run_script(tmp_path, script, correct, correct)
        assert good.returncode == 0 and "ids [" not in good.stdout, good.stdout + good.stderr
        bad = run_script(tmp_path, script, faulty, correct)
        assert bad.returncode == 1 and "REPRODUCED" in bad.stdout, bad.stdout + bad.stderr
    finally:
        stop_correct()
        stop_faulty()


def test_http_repro_resends_what_the_adapter_sent_to_the_engines_own_endpoint():
    """A llama.cpp route's repro posts the adapter's own /completion body, not an OpenAI payload."""
    req = Request(prompt_ids=(1, 2, 3), max_tokens=4, request_id="r1")
    specs = {name: parse_route_uri(name, uri, base=ROOT) for name, uri in (("baseline", "llama-cpp:http://h:2?model=m&tokenizer=fixtures/models/target"),
                                                                          ("candidate", "llama-cpp:http://h:3?model=m&tokenizer=fixtures/models/target"))}
    handles = {name: adapter_handle(build_route(spec), spec) for name, spec in specs.items()}
    block = parity_repro([req], candidate=handles["candidate"], baseline=handles["baseline"])
    script, curl, data = script_for(block, specs=[s.public_dict() for s in specs.values()], route="candidate")
    compile(script, "llama_repro.py", "exec")
    assert data["routes"]["candidate"]["base_url"] == "http://h:3" and data["cases"][0]["requests"][0]["baseline"] == "="
    assert '"$CANDIDATE_URL/completion"' in curl and '"n_predict": 4' in curl and '"return_tokens": true' in curl
    assert "from spec_route_suite" not in script


def test_repro_data_says_where_each_route_is_and_how_often_to_replay():
    """An in-process route is addressed as the in-process server serves it (the command that starts it in the
    script), an HTTP route at its own URL; a load schedule is replayed up to LOAD_ATTEMPTS times, a request once."""
    req = Request(prompt_ids=(1, 2), max_tokens=4, temperature=0.7, top_k=0)
    specs = [parse_route_uri("baseline", f"hf:{TARGET_DIR}", base=ROOT).public_dict(),
             parse_route_uri("candidate", FAULTY, base=ROOT).public_dict()]
    load = load_repro([(req, 0, None)] * 2, candidate=served("candidate"), baseline=served("baseline"), concurrency=2)
    script, _, data = script_for(load, specs=specs, route="candidate")
    assert data["attempts"] == LOAD_ATTEMPTS and "--port 8001" in data["routes"]["candidate"]["serve"]
    assert "fault=cross_context_mixing" in data["routes"]["candidate"]["serve"] and "start it:" in script
    assert data["routes"]["baseline"]["base_url"] == "http://127.0.0.1:8000/v1"
    body = data["cases"][0]["steps"][0]["request"]["candidate"]["body"]
    assert body["temperature"] == 0.7 and "top_k" not in body and "model" not in body
    once = parity_repro([req], candidate=served("candidate"), baseline=served("baseline"))
    openai = {"name": "candidate", "kind": "openai", "model": "m", "base_url": "http://h:2/v1"}
    _, curl, data = script_for(once, specs=[specs[0], openai], route="candidate")
    assert data["attempts"] == 1 and data["routes"]["candidate"] == {
        "name": "candidate", "kind": "openai", "api_key_env": None, "base_url": "http://h:2/v1"}
    assert curl.startswith("#!/bin/sh") and "CANDIDATE_URL=${CANDIDATE_URL:-http://h:2/v1}" in curl


# ---- the command line ----
def test_command_line_serves_and_stops_cleanly_on_sigterm():
    with httpx.Client() as probe:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "spec_route_suite.servers.inprocess", "--route", "reference:",
                                 "--port", str(port), "--model-name", "ref"], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={"OMP_NUM_THREADS": "1"})
        try:
            line = proc.stdout.readline().strip()
            assert line == f"serving reference: on http://127.0.0.1:{port}/v1"
            assert probe.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "ref"
            body = probe.post(f"http://127.0.0.1:{port}/v1/completions",
                              json={"model": "ref", "prompt": [1, 2, 3], "max_tokens": 2}).json()
            assert json.dumps(body["usage"]) and body["usage"]["completion_tokens"] == 2
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# a schema our hf JSON processor does not constrain (a nested object): the hf route refuses it
NESTED_SCHEMA = {"type": "json_schema", "json_schema": {"name": "n", "schema": {
    "type": "object", "properties": {"inner": {"type": "object", "properties": {"b": {"type": "string"}}}}}}}


def test_request_features_reach_the_route_or_are_refused(correct, prompts):
    """The in-process server never drops a feature it was sent: the reference engine applies logit_bias
    (the banned first greedy token never appears), and an hf route that cannot constrain a nested JSON schema
    makes the server answer 400 naming response_format (so the suite reports "not supported", not "ignored")."""
    model = httpx.get(f"{correct}/models", timeout=60).json()["data"][0]["id"]
    body = {"model": model, "prompt": list(prompts[chat_ids(prompts)[0]]), "max_tokens": 8, "temperature": 0,
            "return_token_ids": True}
    plain = httpx.post(f"{correct}/completions", json=body, timeout=300).json()["choices"][0]["token_ids"]
    banned = httpx.post(f"{correct}/completions", json={**body, "logit_bias": {str(plain[0]): -100}},
                        timeout=300).json()["choices"][0]["token_ids"]
    assert plain[0] not in banned and banned != plain
    base_url, stop = serve_in_thread(f"hf:{TARGET_DIR}", base=ROOT)
    try:
        refused = httpx.post(f"{base_url}/completions", json={**body, "model": httpx.get(
            f"{base_url}/models", timeout=60).json()["data"][0]["id"], "response_format": NESTED_SCHEMA}, timeout=300)
    finally:
        stop()
    assert refused.status_code == 400 and "response_format" in refused.text
