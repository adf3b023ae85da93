"""Standalone repro scripts per finding: a maintainer runs them without installing this suite.

Tests put `details["repro"] = repro_block(...)` on a finding: the exact request(s), the
expected tokens (baseline / serial reference) and what the candidate returned. For
server routes the script is plain python + httpx (and a curl line); so is it for an
in-process route (reference, hf) whose repro block carries the `base_url` it was served at
(fixtures.servers.inprocess); otherwise in-process transformers routes get plain transformers.
A concurrent set is replayed up to ATTEMPTS times, since mixing under load is intermittent. API keys are read from the environment
variable the route names, never written into the script.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlencode

from spec_route_suite.fixtures.prompts.chat import as_openai
from spec_route_suite.fixtures.routes.base import Request
from spec_route_suite.fixtures.routes.spec import HTTP_KINDS

CONCURRENT_ATTEMPTS = 100


def repro_block(*, requests: Sequence[Request], expected: Sequence[Sequence[int]] | None,
                actual: Sequence[Sequence[int]] | None, concurrency: int = 1, note: str = "",
                base_url: str | None = None, model: str | None = None,
                attempts: int | None = None, wire: Sequence[tuple[str, dict] | None] | None = None,
                expected_text: Sequence[str] | None = None) -> dict[str, Any]:
    """What a repro script needs to resend the failing request(s) and judge the answer.

    `base_url` / `model`: where an in-process route was served over HTTP (its repro is then
    python + httpx); `attempts`: replays of the whole set (default 1, or CONCURRENT_ATTEMPTS when concurrent);
    `wire`: the (url, body) the route's adapter sent per request (RouteHandle.wire_request), so the script
    speaks the engine's own endpoint; `expected_text`: what the script compares when the server returns
    no token ids (a text-level route).
    """
    block = {
        "requests": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(r).items()} for r in requests],
        "expected": [list(t) for t in expected] if expected is not None else None,
        "actual": [list(t) for t in actual] if actual is not None else None,
        "concurrency": concurrency,
        "note": note,
    }
    if wire is not None and all(w is not None for w in wire):
        block["wire"] = [{"url": url, "body": body} for url, body in wire]   # type: ignore[misc]
    extra = {"base_url": base_url, "model": model, "attempts": attempts,
             "expected_text": list(expected_text) if expected_text is not None else None}
    return {**block, **{k: v for k, v in extra.items() if v is not None}}


def _openai_payload(req: dict[str, Any], model: str) -> dict[str, Any]:
    """The request as the suite sent it: token ids to /completions, or a chat request's messages (the server
    applies its chat template; `send` posts those to /chat/completions)."""
    prompt = ({"messages": as_openai(req["messages"])} if req.get("messages")
              else {"prompt": req["prompt_ids"]})
    payload = {"model": model, **prompt, "max_tokens": req["max_tokens"],
               "temperature": req["temperature"], "return_token_ids": True}
    if req.get("top_p", 1.0) < 1.0:
        payload["top_p"] = req["top_p"]
    if req.get("top_k"):
        payload["top_k"] = req["top_k"]
    for key in ("seed", "logprobs"):
        if req.get(key) is not None:
            payload[key] = req[key]
    if req.get("stop"):
        payload["stop"] = req["stop"]
    if req.get("stop_token_ids"):
        payload["stop_token_ids"] = req["stop_token_ids"]
    if req.get("ignore_eos"):
        payload["ignore_eos"] = True
    return payload


# Shared by the repro and replay scripts (stressors/replay.py): they resend a wire request verbatim and read
# its answer, whatever the engine's dialect. Plain source, passed as a format argument (its braces stay as written).
WIRE_HELPERS = '''def rebased(url):
    """The suite's URL on REPRO_BASE_URL's server, when that is set."""
    return BASE_URL + url[len(SUITE_BASE_URL):] if url.startswith(SUITE_BASE_URL) else url


def answer(body):
    """(token ids or None, text) from an OpenAI-style completion or chat answer, SGLang's or llama.cpp's /completion."""
    if isinstance(body, list):
        body = body[0]
    choice = (body.get("choices") or [body])[0]
    ids = next((place[key] for place, key in ((choice, "token_ids"), (choice, "output_ids"), (choice, "tokens"),
                                              (body, "output_ids")) if isinstance(place.get(key), list)), None)
    message = choice.get("message") or {}   # a chat answer
    text = choice.get("text", message.get("content", choice.get("content", body.get("text", ""))))
    return ids, text
'''


HTTP_TEMPLATE = '''#!/usr/bin/env python3
"""Repro for: {title}

Route: {route_desc}
Sends the exact request(s) {how} and compares the returned token ids with the expected ones (the
text, when the server returns no token ids), replaying the whole set up to ATTEMPTS times (a mixing
failure under concurrency is intermittent).
Needs only python3 and httpx (pip install httpx).
Exit code 1 as soon as one replay reproduces the failure, 0 if none did, 2 if a request failed.
"""
import asyncio, json, os, sys
import httpx

SUITE_BASE_URL = {base_url!r}
BASE_URL = os.environ.get("REPRO_BASE_URL", SUITE_BASE_URL)
API_KEY_ENV = {api_key_env!r}
REQUESTS = json.loads({wire!r})   # [{{"url": ..., "body": ...}}]: what the suite sent, verbatim
EXPECTED = json.loads({expected!r})
EXPECTED_TEXT = json.loads({expected_text!r})
CONCURRENCY = {concurrency}
ATTEMPTS = {attempts}


{wire_helpers}

async def send(client, request):
    response = await client.post(rebased(request["url"]), json=request["body"])
    response.raise_for_status()
    return answer(response.json())


async def replay(client):
    gate = asyncio.Semaphore(CONCURRENCY)
    async def one(request):
        async with gate:
            return await send(client, request)
    return await asyncio.gather(*(one(r) for r in REQUESTS))


def compare(results, verbose):
    failures = 0
    for index, (ids, text) in enumerate(results):
        want_ids = EXPECTED[index] if EXPECTED and ids is not None else None
        want_text = EXPECTED_TEXT[index] if EXPECTED_TEXT and want_ids is None else None
        got, want = (list(ids), want_ids) if want_ids is not None else (text, want_text)
        if want is None and ids is None and EXPECTED:
            print(f"request {{index}}: the server returned no token ids and no expected text is on record")
            sys.exit(2)
        same = want is None or got == want
        failures += not same
        if verbose or not same:
            print(f"request {{index}}: {{'OK' if same else 'MISMATCH'}}" + ("" if want_ids is not None else " (text)"))
        if not same:
            split = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            print(f"  first difference at {{'token' if want_ids is not None else 'character'}} {{split}}")
            print(f"  expected: {{want!r}}")
            print(f"  actual:   {{got!r}}")
    return failures


async def main():
    headers = {{"Authorization": "Bearer " + os.environ[API_KEY_ENV]}} if API_KEY_ENV and API_KEY_ENV in os.environ else {{}}
    async with httpx.AsyncClient(timeout=120, headers=headers) as client:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                results = await replay(client)
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                print(f"attempt {{attempt}}: a request failed ({{type(exc).__name__}}: {{exc}}); nothing to compare")
                sys.exit(2)
            failures = compare(results, verbose=ATTEMPTS == 1)
            print(f"attempt {{attempt}} of {{ATTEMPTS}}: {{failures}} of {{len(results)}} requests differ from the expected output")
            if failures:
                print(f"REPRODUCED on attempt {{attempt}}")
                sys.exit(1)
    print(f"not reproduced in {{ATTEMPTS}} attempt(s)")
    sys.exit(0)


asyncio.run(main())
'''

HF_TEMPLATE = '''#!/usr/bin/env python3
"""Repro for: {title}

Route: {route_desc}
Runs the exact request(s) with plain transformers and compares with the expected token ids.
Needs python3 with torch and transformers. Exit code 1 when the failure reproduces.
"""
import json, sys
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

MODEL = {model!r}
DRAFT = {draft!r}
NUM_ASSISTANT_TOKENS = {num_assistant_tokens!r}
PROMPT_LOOKUP = {prompt_lookup!r}
REQUESTS = json.loads({requests!r})
EXPECTED = json.loads({expected!r})

model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
kwargs = {{}}
if DRAFT:
    draft = AutoModelForCausalLM.from_pretrained(DRAFT, dtype=torch.float32).eval()
    draft.generation_config.num_assistant_tokens = NUM_ASSISTANT_TOKENS
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    kwargs["assistant_model"] = draft
failures = 0
for index, (req, want) in enumerate(zip(REQUESTS, EXPECTED or [None] * len(REQUESTS))):
    ids = torch.tensor([req["prompt_ids"]])
    sampling = req["temperature"] > 0
    # top_k=0 / top_p=1.0 mean "off"; left unset, transformers silently applies top_k=50 when sampling
    filters = {{"top_k": req.get("top_k") or 0, "top_p": req.get("top_p", 1.0)}} if sampling else {{}}
    config = GenerationConfig(max_new_tokens=req["max_tokens"], do_sample=sampling,
                              temperature=req["temperature"] or None, eos_token_id=model.config.eos_token_id,
                              pad_token_id=0, prompt_lookup_num_tokens=PROMPT_LOOKUP, **filters)
    if req.get("seed") is not None:
        torch.manual_seed(req["seed"])
    with torch.inference_mode():
        got = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config, **kwargs)[0, ids.shape[1]:].tolist()
    same = want is None or got == want
    failures += not same
    print(f"request {{index}}: {{'OK' if same else 'MISMATCH'}}")
    if not same:
        print(f"  expected: {{want}}")
        print(f"  actual:   {{got}}")
print(f"{{failures}} of {{len(REQUESTS)}} requests differ from the expected tokens")
sys.exit(1 if failures else 0)
'''

REFERENCE_TEMPLATE = '''#!/usr/bin/env python3
"""Repro for: {title}

Route: {route_desc} (the suite's own reference engine, so this script needs the suite installed).
Sends the exact request(s) concurrently and compares with the expected token ids. Exit 1 when it reproduces.
"""
import asyncio, json, sys
from spec_route_suite.fixtures.routes.base import Request
from spec_route_suite.fixtures.routes.registry import build_route
from spec_route_suite.fixtures.routes.spec import parse_route_uri
from pathlib import Path

URI = {uri!r}
REQUESTS = [Request(**{{k: (tuple(map(tuple, v)) if k == "messages" and v else tuple(v)) if isinstance(v, list) else v
                       for k, v in r.items()}}) for r in json.loads({requests!r})]
EXPECTED = json.loads({expected!r})
CONCURRENCY = {concurrency}


async def main():
    route = build_route(parse_route_uri("candidate", URI, base=Path.cwd()))
    gate = asyncio.Semaphore(CONCURRENCY)
    async def one(req):
        async with gate:
            return (await route.generate(req)).token_ids
    results = await asyncio.gather(*(one(r) for r in REQUESTS))
    failures = 0
    for index, (got, want) in enumerate(zip(results, EXPECTED or [None] * len(results))):
        same = want is None or list(got) == list(want)
        failures += not same
        if not same:
            print(f"request {{index}} ({{REQUESTS[index].request_id}}): MISMATCH\\n  expected: {{want}}\\n  actual:   {{list(got)}}")
    print(f"{{failures}} of {{len(results)}} requests differ from the expected tokens")
    sys.exit(1 if failures else 0)


asyncio.run(main())
'''


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-")[:60] or "finding"


def write_repro_scripts(run_dir: Path, report: dict[str, Any], redact=lambda text: text) -> list[str]:
    """One script per finding that carries a repro block; returns the relative paths written."""
    routes = {c["name"]: c for c in report.get("config", {}).get("candidates", [])}
    baseline = report.get("config", {}).get("baseline")
    if baseline:
        routes.setdefault(baseline["name"], baseline)
    written = []
    for index, finding in enumerate(report["findings"]):
        repro = finding.get("details", {}).get("repro")
        spec = routes.get(finding["route"])
        if not repro or not spec:
            continue
        name = f"repro/{index:03d}-{_slug(finding['check'])}-{_slug(finding.get('prompt_id') or finding['title'])}"
        script, curl = render_repro(finding, repro, spec)
        path = run_dir / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(redact(script))
        path.chmod(0o755)
        written.append(f"{name}.py")
        if curl:
            (run_dir / f"{name}.sh").write_text(redact(curl))
            written.append(f"{name}.sh")
    return written


def _attempts(repro: dict[str, Any]) -> int:
    """How often the script replays the set: a failure under concurrency is intermittent. A shrunk
    mixing schedule is often two requests that meet in one batch only some of the time, with a fault
    that fires on a fraction of those steps (1 in 10 for the reference engine's at mix_rate 0.1):
    20 replays missed it about one time in ten, 100 about once in 30,000."""
    attempts = repro.get("attempts")
    return int(attempts) if attempts else (CONCURRENT_ATTEMPTS if repro.get("concurrency", 1) > 1 else 1)


def _route_uri(spec: dict[str, Any]) -> str:
    """The URI that rebuilds an in-process route from its public spec (for the server command line)."""
    query = {k: str(spec[k]) for k in ("draft", "num_assistant_tokens", "prompt_lookup") if spec.get(k)}
    if spec.get("tokenizer") and spec["tokenizer"] != spec.get("model"):
        query["tokenizer"] = spec["tokenizer"]
    query.update({str(k): str(v) for k, v in (spec.get("options") or {}).items()})
    return f"{spec['kind']}:{spec.get('model') or ''}" + (f"?{urlencode(query, safe='/')}" if query else "")


def render_repro(finding: dict[str, Any], repro: dict[str, Any], spec: dict[str, Any]) -> tuple[str, str | None]:
    expected = json.dumps(repro.get("expected"))
    route_desc = f"{spec['name']} ({spec['kind']})"
    concurrency = repro.get("concurrency", 1)
    how = "concurrently (at most {0} in flight)".format(concurrency) if concurrency > 1 else "one at a time"
    served = spec["kind"] in ("reference", "hf") and bool(repro.get("base_url"))
    if spec["kind"] in HTTP_KINDS or served:
        base_url = repro["base_url"] if served else spec["base_url"]
        model = (repro.get("model") or spec["model"]) if served else spec["model"]
        if served:
            route_desc += (f", served over HTTP: start it with `python -m spec_route_suite.fixtures.servers.inprocess "
                           f"--route '{_route_uri(spec)}' --port PORT` and set REPRO_BASE_URL")
        payloads = [_openai_payload(r, model) for r in repro["requests"]]
        wire = repro.get("wire") or [{"url": f"{base_url}/{'chat/completions' if 'messages' in p else 'completions'}",
                                      "body": p} for p in payloads]
        script = HTTP_TEMPLATE.format(title=finding["title"], route_desc=route_desc, how=how, wire_helpers=WIRE_HELPERS,
                                      base_url=base_url, api_key_env=spec.get("api_key_env"),
                                      wire=json.dumps(wire), expected=expected,
                                      expected_text=json.dumps(repro.get("expected_text")),
                                      concurrency=concurrency, attempts=_attempts(repro))
        auth = f' -H "Authorization: Bearer ${spec["api_key_env"]}"' if spec.get("api_key_env") else ""
        curl = "\n".join(f"curl -s {w['url']} -H 'Content-Type: application/json'{auth} "
                         f"-d '{json.dumps(w['body'])}'" for w in wire[:20])
        return script, ("#!/bin/sh\n# Resend the failing request(s); compare the returned token ids (or text) with the "
                        "expected ones\n" + curl + "\n")
    if spec["kind"] == "hf":
        script = HF_TEMPLATE.format(title=finding["title"], route_desc=route_desc, model=spec["model"],
                                    draft=spec.get("draft"), num_assistant_tokens=spec.get("num_assistant_tokens") or 4,
                                    prompt_lookup=spec.get("prompt_lookup"),
                                    requests=json.dumps(repro["requests"]), expected=expected)
        return script, None
    uri = "reference:?" + "&".join(f"{k}={v}" for k, v in spec.get("options", {}).items())
    script = REFERENCE_TEMPLATE.format(title=finding["title"], route_desc=route_desc, uri=uri,
                                       requests=json.dumps(repro["requests"]), expected=expected,
                                       concurrency=repro.get("concurrency", 1))
    return script, None
