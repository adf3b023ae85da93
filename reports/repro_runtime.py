"""The body of every repro script: reports/repro.py writes this file verbatim, then its judge from
reports/repro_judges.py (reports/judge_source.py), then DATA.

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

TIMEOUT_S = 300.0


class Unanswered(Exception):
    """A request that got no answer: an HTTP error status, a broken stream, or no connection."""


# ---------------------------------------------------------------- answers in the usual shapes
def _native_finish(body):
    meta = body.get("meta_info") or {}
    if isinstance(meta.get("finish_reason"), dict):          # SGLang /generate
        return meta["finish_reason"].get("type")
    stop_type = body.get("stop_type")                        # llama.cpp /completion
    if stop_type:
        return "length" if stop_type == "limit" else "stop"
    return None


def _logprobs(choice, body):
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list):
        return [float(x) if x is not None else None for x in lp["token_logprobs"]]
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        return [e.get("logprob") for e in lp["content"]]
    if isinstance(body.get("completion_probabilities"), list):      # llama.cpp /completion
        return [e.get("logprob") for e in body["completion_probabilities"]]
    meta = body.get("meta_info") or {}
    if isinstance(meta.get("output_token_logprobs"), list):        # SGLang: [logprob, id, text]
        return [e[0] for e in meta["output_token_logprobs"]]
    return None


def _choice(choice, body):
    message = choice.get("message") or choice.get("delta") or {}
    text = choice.get("text", message.get("content", choice.get("content", body.get("text", body.get("content")))))
    ids = None
    for place, key in ((choice, "token_ids"), (choice, "output_ids"), (choice, "tokens"), (body, "output_ids"),
                       (body, "tokens")):
        if isinstance(place.get(key), list):
            ids = list(place[key])   # as the server wrote them: an id that is not an int is its bug
            break
    return {"ids": ids, "text": text or "", "finish": choice.get("finish_reason") or _native_finish(body),
            "logprobs": _logprobs(choice, body),
            "reasoning": message.get("reasoning_content", message.get("reasoning")) or "",
            "tool_calls": _calls(message.get("tool_calls"))}


def _calls(calls):
    """A chat message's (or stream delta's) tool calls as [index, name, arguments text] pieces."""
    out = []
    for n, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") or {}
        out.append([call.get("index", n), function.get("name") or "", function.get("arguments") or ""])
    return out


def _joined_calls(pieces):
    """Tool calls from their pieces (a stream sends a call's name once and its arguments in deltas), each as
    [name, arguments parsed as JSON where they parse]."""
    calls = {}
    for index, name, arguments in pieces:
        call = calls.setdefault(index, ["", ""])
        call[0] += name
        call[1] += arguments
    return [[name, _json_or_text(arguments)] for _, (name, arguments) in sorted(calls.items())]


def _json_or_text(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def answer(body):
    """{ids, text, finish, usage, logprobs, choices} of an OpenAI completion or chat answer, SGLang's /generate
    or llama.cpp's /completion answer (ids None when the server returns none)."""
    if isinstance(body, list):
        body = body[0] if body else {}
    choices = body.get("choices")
    parsed = [_choice(c, body) for c in choices] if isinstance(choices, list) and choices else [_choice(body, body)]
    usage = (body.get("usage") or {}).get("completion_tokens")
    if usage is None:
        usage = (body.get("meta_info") or {}).get("completion_tokens", body.get("tokens_predicted"))
    return {**parsed[0], "usage": usage, "tool_calls": _joined_calls(parsed[0]["tool_calls"]), "drafted": _drafted(body),
            "choices": [p["ids"] if p["ids"] is not None else p["text"] for p in parsed]}


def _drafted(body):
    """Tokens drafted for this answer where the server says (llama.cpp's `timings.draft_n`, absent when nothing
    was drafted; SGLang's meta_info spec_verify_ct), None where it does not say."""
    timings = body.get("timings")
    if isinstance(timings, dict):
        return int(timings.get("draft_n") or 0)
    meta = body.get("meta_info") or {}
    return int(meta["spec_verify_ct"]) if isinstance(meta.get("spec_verify_ct"), (int, float)) else None


def fold(events):
    """A stream's events as one answer: text and ids concatenated, the last finish_reason and usage."""
    ids, text, finish, usage, lps = [], "", None, None, []
    has_ids, reasoning, calls = False, "", []
    for event in events:
        part = answer(event)
        if not (event.get("choices") or "content" in event or "text" in event):
            usage = part["usage"] if part["usage"] is not None else usage
            continue
        text += part["text"]
        reasoning += part["reasoning"]
        choice = (event.get("choices") or [{}])[0]
        calls += _calls((choice.get("delta") or choice.get("message") or {}).get("tool_calls"))
        if part["ids"] is not None:
            has_ids = True
            ids += part["ids"]
        lps += part["logprobs"] or []
        finish = part["finish"] or finish
        usage = part["usage"] if part["usage"] is not None else usage
    return {"ids": ids if has_ids else None, "text": text, "finish": finish, "usage": usage,
            "logprobs": lps or None, "choices": [ids if has_ids else text], "events": len(events),
            "reasoning": reasoning, "tool_calls": _joined_calls(calls)}


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
                if data == "[DONE]":
                    done = True
                    break
                events.append(json.loads(data))
        if not done and not (events and events[-1].get("stop") is True):   # llama.cpp ends on stop: true
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
