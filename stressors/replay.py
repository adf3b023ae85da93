"""Turn a (shrunk) failing schedule into a standalone script an upstream maintainer can run.

Why: a finding is only as good as its repro. The script embeds the schedule, the exact
prompt token ids and the serial greedy output each request must reproduce, replays the
schedule (arrival gaps, concurrency bound, hang-ups; chat steps as messages to /chat/completions) up to N times and exits 1 at the first
output that differs, printing the request and what it got. For an OpenAI-compatible
or SGLang server it needs only httpx and asyncio; for an in-process route (hf,
reference) it imports the suite and builds the route from its URI. Secrets never enter
the script: an API key is read from the environment variable the route names.
Environment: the generated script reads only that API key variable.
"""
from __future__ import annotations

import pprint
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import urlencode

from spec_route_suite.routes import answer_fields
from spec_route_suite.routes.chat import as_openai
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.spec import RouteSpec
from spec_route_suite.stressors.canary import Workload
from spec_route_suite.stressors.schedules import Schedule

WireBuilder = Callable[[Request], "tuple[str, dict] | None"]

# The replay script resends a wire request verbatim and reads its answer, whatever the engine's dialect, as the
# suite's adapters do (routes/answer_fields.py, carried whole). Plain source, passed as a format argument (its
# braces stay as written).
WIRE_HELPERS = Path(answer_fields.__file__).read_text() + '''

def rebased(url):
    """The suite's URL on REPRO_BASE_URL's server, when that is set."""
    return BASE_URL + url[len(SUITE_BASE_URL):] if url.startswith(SUITE_BASE_URL) else url
'''


def route_uri(spec: RouteSpec) -> str:
    """A URI that rebuilds an in-process route (the spec's own source when it was given as one)."""
    if ":" in spec.source and spec.source.split(":", 1)[0] == spec.kind:
        return spec.source
    query: dict[str, str] = {}
    if spec.tokenizer and spec.tokenizer != spec.model:
        query["tokenizer"] = spec.tokenizer
    if spec.draft:
        query["draft"] = spec.draft
    if spec.num_assistant_tokens:
        query["num_assistant_tokens"] = str(spec.num_assistant_tokens)
    if spec.prompt_lookup:
        query["prompt_lookup"] = str(spec.prompt_lookup)
    query.update(dict(spec.options))
    return f"{spec.kind}:{spec.model}" + (f"?{urlencode(query)}" if query else "")


def replay_payload(*, schedule: Schedule, workload: Workload, references: Mapping[str, Completion],
                   max_tokens: int, wire: WireBuilder | None = None) -> dict:
    """The data the script embeds: every step with its prompt ids and expected output (and, with `wire`,
    the url and body the route's adapter sends for it)."""
    steps = []
    for n, step in enumerate(schedule.steps):
        item = workload.items[step.item % len(workload.items)]
        ref = references[item.key]
        entry = {"n": n, "key": item.key, "gap_ms": step.gap_ms, "abort_ms": step.abort_ms,
                 "prompt_ids": list(item.prompt_ids), "expected_ids": list(ref.token_ids),
                 "expected_text": ref.text,
                 **({"messages": as_openai(item.messages)} if item.chat else {})}
        sent = wire(Request(prompt_ids=item.prompt_ids, max_tokens=max_tokens, temperature=0.0,
                            messages=item.messages if item.chat else None,
                            request_id=f"replay-{n}")) if wire is not None else None
        if sent is not None:
            entry["wire"] = {"url": sent[0], "body": sent[1]}
        steps.append(entry)
    return {"concurrency": schedule.concurrency, "max_tokens": max_tokens, "steps": steps}


def replay_script(*, title: str, schedule: Schedule, workload: Workload, references: Mapping[str, Completion],
                  spec: RouteSpec, max_tokens: int, repeats: int = 200, route_factory: str | None = None,
                  wire: WireBuilder | None = None) -> str:
    """Python source of the repro. `route_factory` ("module:callable") overrides the URI for test doubles;
    `wire` (RouteHandle.wire_request) gives each step the exact url and body the route's adapter sends, so the
    script speaks the engine's own endpoint (llama.cpp's /completion, SGLang's /generate)."""
    payload = pprint.pformat(replay_payload(schedule=schedule, workload=workload, references=references,
                                            max_tokens=max_tokens, wire=wire),
                             width=120, compact=True, sort_dicts=False)
    header = _HEADER.format(title=title.replace('"""', "'''"), described=schedule.describe(workload),
                            repeats=repeats)
    if spec.http:
        body = _HTTP.format(kind=spec.kind, base_url=spec.base_url, model=spec.model,
                            api_key_env=spec.api_key_env or "", wire_helpers=WIRE_HELPERS)
    else:
        body = _IN_PROCESS.format(uri=route_uri(spec), factory=route_factory or "")
    return header + f"SCHEDULE = {payload}\n" + body + _RUNNER


_HEADER = '''#!/usr/bin/env python
"""Repro: {title}

Schedule: {described}
Replays the schedule up to --repeats times (default {repeats}) and exits 1 at the first
greedy output that differs from the output the same request gives when sent alone.
Generated by spec-route-suite (stressors/replay.py).
"""
import argparse
import asyncio
import json
import os
import sys
import time

DEFAULT_REPEATS = {repeats}
'''

_IN_PROCESS = '''ROUTE_URI = {uri!r}
ROUTE_FACTORY = {factory!r}


def build_route():
    """In-process route: run this script from the suite's checkout (pip install -e .)."""
    if ROUTE_FACTORY:
        import importlib
        module, _, name = ROUTE_FACTORY.partition(":")
        return getattr(importlib.import_module(module), name)()
    from pathlib import Path
    from spec_route_suite.routes.registry import build_route as build
    from spec_route_suite.routes.spec import parse_route_uri
    return build(parse_route_uri("candidate", ROUTE_URI, base=Path.cwd()))


class Client:
    def __init__(self):
        self.route = build_route()

    async def generate(self, step, tag):
        from spec_route_suite.routes.base import Request
        messages = tuple((m["role"], m["content"]) for m in step["messages"]) if "messages" in step else None
        req = Request(prompt_ids=tuple(step["prompt_ids"]), max_tokens=SCHEDULE["max_tokens"], temperature=0.0,
                      stream=step["abort_ms"] is not None and self.route.capabilities.stream,
                      request_id=f"{{tag}}-{{step['n']}}-{{step['key']}}", messages=messages)
        out = await self.route.generate(req)
        return list(out.token_ids), out.text

    async def close(self):
        await self.route.aclose()
'''

_HTTP = '''KIND = {kind!r}
SUITE_BASE_URL = {base_url!r}
BASE_URL = os.environ.get("REPRO_BASE_URL", SUITE_BASE_URL)
MODEL = {model!r}
API_KEY_ENV = {api_key_env!r}


{wire_helpers}


class Client:
    """Token-id prompts, temperature 0: the same request the suite sent."""

    def __init__(self):
        import httpx
        headers = {{"Authorization": f"Bearer {{os.environ[API_KEY_ENV]}}"}} if API_KEY_ENV else {{}}
        self.http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(300.0, connect=10.0))

    async def generate(self, step, tag):
        n = SCHEDULE["max_tokens"]
        if "wire" in step:  # the exact request the suite's adapter sent, to the engine's own endpoint
            r = await self.http.post(rebased(step["wire"]["url"]), json=step["wire"]["body"])
            r.raise_for_status()
            got = answer(r.json())
            return got["ids"], got["text"]
        if KIND == "sglang":
            root = BASE_URL[:-3] if BASE_URL.endswith("/v1") else BASE_URL
            body = {{"input_ids": step["prompt_ids"], "sampling_params": {{"max_new_tokens": n, "temperature": 0}},
                     "stream": False}}
            r = await self.http.post(f"{{root}}/generate", json=body)
            r.raise_for_status()
            got = answer(r.json())
            return got["ids"], got["text"]
        chat = "messages" in step   # a chat request: the server applies its chat template
        body = {{"model": MODEL, "max_tokens": n, "temperature": 0, "return_token_ids": True,
                 "stream": step["abort_ms"] is not None}}
        body.update({{"messages": step["messages"]}} if chat else {{"prompt": step["prompt_ids"]}})
        url = f"{{BASE_URL}}/chat/completions" if chat else f"{{BASE_URL}}/completions"
        if body["stream"]:
            events = []
            async with self.http.stream("POST", url, json=body) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    if line.startswith("data:") and line[5:].strip() != DONE:
                        events.append(json.loads(line[5:]))
            got = fold(events)
            return got["ids"] or None, got["text"]
        r = await self.http.post(url, json=body)
        r.raise_for_status()
        got = answer(r.json())
        return got["ids"], got["text"]

    async def close(self):
        await self.http.aclose()
'''

_RUNNER = '''

async def run_once(client, tag):
    """One pass of the schedule; returns (step, got_ids, got_text) for each completed, non-aborted step."""
    gate = asyncio.Semaphore(SCHEDULE["concurrency"])
    start = time.monotonic()
    results = []

    async def one(step):
        async with gate:
            try:
                if step["abort_ms"] is not None:
                    await asyncio.wait_for(client.generate(step, tag), step["abort_ms"] / 1000)
                    return
                ids, text = await asyncio.wait_for(client.generate(step, tag), 300)
                results.append((step, ids, text))
            except asyncio.TimeoutError:
                return  # the planned hang-up (abort_ms), or a hang the 300 s bound cut

    tasks, at = [], 0.0
    for step in SCHEDULE["steps"]:
        at += step["gap_ms"] / 1000
        delay = start + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(step)))
    await asyncio.gather(*tasks)
    return results


def differs(step, ids, text):
    if ids is not None:
        return list(ids) != step["expected_ids"]
    return text != step["expected_text"]


async def main():
    parser = argparse.ArgumentParser(description="replay a failing load schedule")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args()
    client = Client()
    try:
        for r in range(args.repeats):
            for step, ids, text in await run_once(client, f"replay{r}"):
                if differs(step, ids, text):
                    print(f"REPRODUCED on pass {r + 1}: request {step['n']} ({step['key']})")
                    print(f"  expected: {step['expected_text']!r}")
                    print(f"  got:      {text!r}")
                    return 1
        print(f"not reproduced in {args.repeats} passes")
        return 0
    finally:
        await client.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
'''
