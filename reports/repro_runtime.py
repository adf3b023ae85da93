"""The body of every repro script. reports/repro.py writes the suite's answer reader first (routes/answer_fields.py,
which its adapters use too), then this file verbatim but for its SUITE_ONLY line, then the script's judge (cut
by reports/judge_source.py from reports/repro_judges.py), then DATA.

Why standalone: a maintainer runs the script with python3 and httpx only, against two servers: the
candidate (the speculative route) and the baseline (the same engine without speculation). Every case
resends the exact failing request(s) to the candidate and the same request(s) to the baseline as the
control. Exit 1: the candidate's failure reproduced and the baseline does not show it; 0: it did not
reproduce, or the baseline shows it too (then it is the engine's behaviour, not speculation's); 2: a
server could not be asked (connection refused, an HTTP error where an answer was needed).
Judges (DATA["judge"], reports/repro_judges.py): parity (the candidate's answer is not the baseline's;
control: the baseline answers alike twice), stream (streamed vs plain answer on each route), repeat (the same
seeded request twice), logprobs (the target's logprobs vs the candidate's), choices (n sampled choices that
are copies), rule (a rule the answer breaks: JSON output, usage of n choices), distribution (samples of both
routes, two-sample chi-square; control: the baseline's samples, half against half), load (a schedule replayed
concurrently vs each request alone) and error (the request fails on the candidate, not on the baseline).
Environment: REPRO_CANDIDATE_URL, REPRO_BASELINE_URL (REPRO_BASE_URL: the candidate's), and the API key
variables the routes name (never written into the script).
"""
import argparse
import asyncio
import json
import os
import sys

import httpx

from spec_route_suite.routes.answer_fields import DONE, answer, fold, llama_cpp_stream_end  # SUITE_ONLY

TIMEOUT_S = 300.0


class Unanswered(Exception):
    """A request that got no answer: an HTTP error status, a broken stream, or no connection."""


# ---------------------------------------------------------------- the two servers
class Server:
    """One route's server: its base URL and headers; sends a recorded request {path, body} to it."""

    def __init__(self, name, base_url, api_key_env):
        self.name, self.base_url = name, base_url.rstrip("/")
        headers = {}
        if api_key_env and os.environ.get(api_key_env):
            headers["Authorization"] = "Bearer " + os.environ[api_key_env]
        self.client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(TIMEOUT_S, connect=10.0))

    async def send(self, request, **changes):
        body = {**request["body"], **changes}
        url = request["path"] if request["path"].startswith("http") else self.base_url + request["path"]
        try:
            if body.get("stream"):
                return await self._stream(url, body)
            response = await self.client.post(url, json=body)
            if response.status_code >= 400:
                raise Unanswered(f"HTTP {response.status_code} from {self.name}: {response.text[:300]}")
            body = response.json()
            if isinstance(body, dict) and body.get("error"):   # an error object is no answer, whatever the status
                raise Unanswered(f"{self.name} answered HTTP {response.status_code} with an error: "
                                 f"{json.dumps(body['error'])[:300]}")
            return answer(body)
        except httpx.HTTPError as exc:
            raise Unanswered(f"{self.name}: {type(exc).__name__}: {exc}") from None
        except ValueError as exc:
            raise Unanswered(f"{self.name}: the answer is not JSON ({exc})") from None

    async def _stream(self, url, body):
        events, done = [], False
        async with self.client.stream("POST", url, json=body) as response:
            if response.status_code >= 400:
                raise Unanswered(f"HTTP {response.status_code} from {self.name}: {(await response.aread())[:300]!r}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == DONE:
                    done = True
                    break
                events.append(json.loads(data))
        if not done and not (events and llama_cpp_stream_end(events[-1])):
            raise Unanswered(f"{self.name}: the stream ended without [DONE] after {len(events)} events")
        return fold(events)

    async def close(self):
        await self.client.aclose()


def view(a, field):
    """The compared value of one field; token ids fall back to the text when the server returns none."""
    if field == "ids":
        return a["ids"] if a["ids"] is not None else a["text"]
    return a.get(field)


def differing(a, b, fields):
    return [f for f in fields if view(a, f) != view(b, f)]


def show(a):
    ids = a.get("ids")
    return (f"ids {ids[:32]}{'...' if ids and len(ids) > 32 else ''} " if ids is not None else "") + \
        f"text {a.get('text', '')[:160]!r} finish {a.get('finish')} usage {a.get('usage')}" + \
        (f" reasoning {a['reasoning'][:120]!r}" if a.get("reasoning") else "") + \
        (f" tool_calls {json.dumps(a['tool_calls'])[:200]}" if a.get("tool_calls") else "")


def outcome(reproduced, shown, lines):
    return {"reproduced": bool(reproduced), "baseline_shows": bool(shown), "lines": lines}


def fields_outcome(found, shown, lines, note):
    """Reproduced when the candidate differs in a field the baseline holds; a field that differs on the baseline
    as well proves nothing about the candidate (`note` names those fields)."""
    if shown:
        lines.append(note.format(", ".join(sorted(shown))))
    return outcome(found - shown, found and not (found - shown), lines)


# ---------------------------------------------------------------- entry point
def expand(node):
    """DATA writes a baseline request equal to the candidate's as "=": both servers get the same body."""
    if isinstance(node, dict):
        if node.get("baseline") == "=" and "candidate" in node:
            node["baseline"] = node["candidate"]
        for value in node.values():
            expand(value)
    elif isinstance(node, list):
        for value in node:
            expand(value)
    return node


def _url(arg, env, data, side):
    return arg or os.environ.get(env) or (os.environ.get("REPRO_BASE_URL") if side == "candidate" else None) \
        or data["routes"][side]["base_url"]


async def run(data, args, judges):
    routes = data["routes"]
    cand = Server(f"candidate '{routes['candidate']['name']}'",
                  _url(args.candidate_url, "REPRO_CANDIDATE_URL", data, "candidate"), routes["candidate"].get("api_key_env"))
    base = Server(f"baseline '{routes['baseline']['name']}'",
                  _url(args.baseline_url, "REPRO_BASELINE_URL", data, "baseline"), routes["baseline"].get("api_key_env"))
    judge, attempts = judges[data["judge"]], args.attempts or int(data.get("attempts", 1))
    verdicts = []
    try:
        for n, case in enumerate(expand(data["cases"])):
            try:
                result = await judge(case, cand, base, attempts)
            except Unanswered as exc:
                print(f"case {n}: a request got no answer, nothing to compare: {exc}")
                return 2
            verdict = ("REPRODUCED" if result["reproduced"] and not result["baseline_shows"] else
                       "the baseline shows it too (engine behaviour, not speculation)" if result["reproduced"]
                       or result["baseline_shows"] else "not reproduced")
            print(f"case {n}: {verdict}")
            for line in result["lines"]:
                print("  " + line)
            verdicts.append(verdict == "REPRODUCED")
    finally:
        await cand.close()
        await base.close()
    print(f"{sum(verdicts)} of {len(verdicts)} case(s) reproduced on the candidate and not on the baseline")
    return 1 if any(verdicts) else 0


def main(data, judges, argv=None):
    parser = argparse.ArgumentParser(description="Resend the failing request(s) to the candidate and the baseline.")
    parser.add_argument("--candidate-url", help="the candidate server's base URL (default: REPRO_CANDIDATE_URL, "
                                                "then the URL the suite used)")
    parser.add_argument("--baseline-url", help="the baseline server's base URL (default: REPRO_BASELINE_URL, "
                                               "then the URL the suite used)")
    parser.add_argument("--attempts", type=int, default=0, help="replays of an intermittent failure "
                                                                f"(default {data.get('attempts', 1)})")
    return asyncio.run(run(data, parser.parse_args(argv), judges))
