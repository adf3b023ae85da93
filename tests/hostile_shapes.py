"""What a broken OpenAI-compatible server (vLLM, SGLang, llama.cpp flavoured) can send back.

Two layers, shared by the parser properties (tests/test_hostile_parsers.py) and the fault
server (tests/fault_server.py):
- `Reply`: the bytes of one HTTP answer (status, content type, body pieces, whether the
  connection dies before the end), so the same shape can be served over a socket or handed
  to httpx.MockTransport;
- named SHAPES that turn a well-formed answer into a malformed one (missing choices, an
  error object under HTTP 200, truncated JSON, a stream cut mid-event, ...), and Hypothesis
  strategies that build well-formed vLLM / chat / SGLang bodies and then damage them at
  random paths (missing or extra fields, wrong types, null for a list, NaN/inf/positive
  logprobs, ids outside the vocabulary, usage that disagrees with the tokens).
`check_outcome` states the property: a valid Completion, or a RouteError naming the route and
the request; nothing else. Environment: none.
"""
from __future__ import annotations

import asyncio
import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import httpx
from hypothesis import strategies as st

from spec_route_suite.routes.base import Completion, Request, TokenLogprobs
from spec_route_suite.routes.errors import RouteError

Json = dict[str, Any]
VOCAB = 512                       # the embedded pair's vocabulary
MAX_TOKEN_ID = 2 ** 31            # what the adapters accept as an id at all
LOGPROB_SLACK = 1e-4              # float noise above 0.0 a server may print for a certain token
SSE = "text/event-stream; charset=utf-8"
JSON_TYPE = "application/json"
TEN_MB = 10 * 1024 * 1024


@dataclass(frozen=True)
class Reply:
    """One HTTP answer as bytes: `pieces` are sent in order; `cut` drops the connection after them."""

    status: int = 200
    content_type: str = JSON_TYPE
    pieces: tuple[bytes, ...] = ()
    cut: bool = False

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)

    def __repr__(self) -> str:  # a 10 MB body must not flood a falsifying-example report
        shown = tuple(p if len(p) <= 300 else p[:300] + b"...<%d bytes>" % len(p) for p in self.pieces)
        return f"Reply(status={self.status}, content_type={self.content_type!r}, pieces={shown}, cut={self.cut})"


def dumps(value: Any) -> bytes:
    """JSON as Python (and vLLM's FastAPI) writes it: NaN and Infinity included."""
    return json.dumps(value, allow_nan=True).encode()


def json_reply(body: Any, status: int = 200) -> Reply:
    return Reply(status=status, pieces=(dumps(body),))


def sse_reply(events: list[Any], *, done: bool = True) -> Reply:
    frames = [b"data: " + (e if isinstance(e, bytes) else dumps(e)) + b"\n\n" for e in events]
    return Reply(content_type=SSE, pieces=tuple(frames + ([b"data: [DONE]\n\n"] if done else [])))


# ---------------------------------------------------------------- well-formed answers
def vllm_body(ids: list[int], req: Request, *, logprobs: list[float] | None = None) -> Json:
    """A /v1/completions answer as vLLM sends it with return_token_ids and return_tokens_as_token_ids."""
    lp = None
    if req.logprobs is not None:
        values = logprobs if logprobs is not None else [-0.5] * len(ids)
        lp = {"text_offset": list(range(len(ids))), "token_logprobs": values,
              "tokens": [f"token_id:{t}" for t in ids],
              "top_logprobs": [{f"token_id:{t}": v} for t, v in zip(ids, values)]}
    finish = "length" if len(ids) >= req.max_tokens else "stop"
    return {"id": f"cmpl-{req.request_id}", "object": "text_completion", "created": 1, "model": "toy",
            "choices": [{"index": 0, "text": " ".join(f"t{t}" for t in ids), "token_ids": ids, "logprobs": lp,
                         "finish_reason": finish, "stop_reason": None, "prompt_logprobs": None}],
            "usage": {"prompt_tokens": len(req.prompt_ids), "completion_tokens": len(ids),
                      "total_tokens": len(req.prompt_ids) + len(ids)}}


def vllm_events(body: Json) -> list[Json]:
    """The same answer streamed one token per chunk, then a usage-only chunk."""
    choice = body["choices"][0]
    ids, lp = choice["token_ids"], choice["logprobs"]
    events = []
    for n, token in enumerate(ids or [None]):
        piece = {"index": 0, "text": f"t{token}" if token is not None else "",
                 "token_ids": [token] if token is not None else [],
                 "finish_reason": choice["finish_reason"] if n == max(len(ids), 1) - 1 else None}
        if lp is not None:
            piece["logprobs"] = {k: lp[k][n:n + 1] for k in ("tokens", "token_logprobs", "top_logprobs")}
        events.append({"id": body["id"], "object": "text_completion", "choices": [piece]})
    events.append({"id": body["id"], "object": "text_completion", "choices": [], "usage": body["usage"]})
    return events


def chat_body(ids: list[int], req: Request) -> Json:
    """A /v1/chat/completions answer with token ids and chat-shaped logprobs."""
    body = vllm_body(ids, req)
    choice = body["choices"][0]
    lp = None
    if req.logprobs is not None:
        lp = {"content": [{"token": f"token_id:{t}", "logprob": -0.5,
                           "top_logprobs": [{"token": f"token_id:{t}", "logprob": -0.5}]} for t in ids]}
    body["choices"] = [{"index": 0, "message": {"role": "assistant", "content": choice["text"]},
                        "token_ids": ids, "logprobs": lp, "finish_reason": choice["finish_reason"]}]
    return body


def sglang_body(ids: list[int], req: Request) -> Json:
    """SGLang /generate: output_ids and meta_info (logprob triples [logprob, id, text])."""
    meta: Json = {"id": req.request_id, "finish_reason": {"type": "length" if len(ids) >= req.max_tokens else "stop"},
                  "prompt_tokens": len(req.prompt_ids), "completion_tokens": len(ids), "cached_tokens": 0,
                  "spec_verify_ct": max(1, len(ids) // 2), "spec_accept_histogram": [1, 1, 0]}
    if req.logprobs is not None:
        meta["output_token_logprobs"] = [[-0.5, t, None] for t in ids]
        meta["output_top_logprobs"] = [[[-0.5, t, None]] for t in ids]
    return {"text": " ".join(f"t{t}" for t in ids), "output_ids": ids, "meta_info": meta}


def llama_body(ids: list[int], req: Request) -> Json:
    """llama.cpp /completion with return_tokens (and n_probs): tokens, content, stop_type, timings."""
    body: Json = {"content": " ".join(f"t{t}" for t in ids), "tokens": ids, "stop": True,
                  "stop_type": "limit" if len(ids) >= req.max_tokens else "eos", "tokens_predicted": len(ids),
                  "timings": {"predicted_n": len(ids), "draft_n": 4, "draft_n_accepted": 2}}
    if req.logprobs is not None:
        body["completion_probabilities"] = [{"id": t, "token": f"t{t}", "logprob": -0.5, "bytes": [116],
                                             "top_logprobs": [{"id": t, "token": f"t{t}", "logprob": -0.5}]}
                                            for t in ids]
    return body


def llama_events(body: Json) -> list[Json]:
    """The same answer as /completion streams it: a partial event per token, then the stop event (no [DONE])."""
    probs = body.get("completion_probabilities")
    events: list[Json] = []
    for n, token in enumerate(body["tokens"]):
        event: Json = {"content": f"t{token}", "tokens": [token], "stop": False}
        if probs is not None:
            event["completion_probabilities"] = probs[n:n + 1]
        events.append(event)
    final = {k: v for k, v in body.items() if k != "completion_probabilities"}
    return events + [{**final, "content": "", "tokens": []}]


def score_body(prompt: list[int], continuation: list[int], top_k: int = 3) -> Json:
    """vLLM teacher forcing: choices[0].prompt_logprobs, one table per input token (the first null)."""
    ids = prompt + continuation
    entries: list[Any] = [None] + [{str(t): {"logprob": -0.25, "rank": 1, "decoded_token": f"t{t}"}}
                                   for t in ids[1:]]
    return {"id": "cmpl-score", "choices": [{"index": 0, "text": "t0", "token_ids": [0], "finish_reason": "length",
                                             "prompt_logprobs": entries}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": len(ids) + 1}}


def models_body(model: str = "toy") -> Json:
    return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "vllm", "root": "/m/toy",
                                        "max_model_len": 512}]}


# ---------------------------------------------------------------- named malformed shapes (fault server)
def _choice0(body: Json) -> Json:
    return body["choices"][0]


def _edit(fn: Callable[[Json], None]) -> Callable[[Json, Request], Reply]:
    def shape(body: Json, req: Request) -> Reply:
        body = copy.deepcopy(body)
        fn(body)
        return json_reply(body)
    return shape


def _set(path: tuple, value: Any) -> Callable[[Json], None]:
    def fn(body: Json) -> None:
        node = body
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return fn


def _usage_over_max(body: Json, req: Request) -> Reply:
    body = copy.deepcopy(body)
    body["usage"]["completion_tokens"] = req.max_tokens + 7
    return json_reply(body)


# name -> (how a well-formed non-streamed body is damaged, the words the finding must contain)
BODY_SHAPES: dict[str, tuple[Callable[[Json, Request], Reply], str]] = {
    "no_choices": (_edit(lambda b: b.pop("choices")), "no choices"),
    "empty_choices": (_edit(_set(("choices",), [])), "no choices"),
    "null_choices": (_edit(_set(("choices",), None)), "no choices"),
    "text_not_string": (_edit(_set(("choices", 0, "text"), 12)), "lacks text"),
    "null_finish_reason": (_edit(_set(("choices", 0, "finish_reason"), None)), "finish_reason"),
    "token_ids_strings": (_edit(lambda b: _choice0(b).update(token_ids=[str(t) for t in _choice0(b)["token_ids"]]
                                                           or ["1"])), "not a list of token ids"),
    "negative_token_id": (_edit(lambda b: _choice0(b).update(token_ids=[-3] + _choice0(b)["token_ids"])),
                          "not a list of token ids"),
    "token_id_out_of_range": (_edit(lambda b: _choice0(b).update(token_ids=_choice0(b)["token_ids"] + [2 ** 40])),
                              "not a list of token ids"),
    "usage_over_max_tokens": (_usage_over_max, "above max_tokens"),
    "error_object_http_200": (lambda b, r: json_reply({"error": {"message": "engine overloaded, try again",
                                                                 "type": "InternalServerError", "code": 503}}),
                              "error object"),
    "truncated_json": (lambda b, r: Reply(pieces=(dumps(b)[: len(dumps(b)) // 2],)), "not JSON"),
    "non_utf8_bytes": (lambda b, r: Reply(pieces=(b"\xff\xfe\x80" + dumps(b),)), "not JSON"),
    "ten_mb_garbage": (lambda b, r: Reply(pieces=(b"<html>" + b"x" * TEN_MB,)), "not JSON"),
    "nested_json_bomb": (lambda b, r: Reply(pieces=(b"[" * 100_000 + b"]" * 100_000,)), "not JSON"),
}


def _first_finish(events: list[Json]) -> list[Json]:
    """Events out of order: the finishing chunk arrives before the content."""
    content = [e for e in events if e.get("choices")]
    rest = [e for e in events if not e.get("choices")]
    return content[-1:] + content[:-1] + rest


def _cut_mid_event(events: list[Json]) -> Reply:
    frames = sse_reply(events[:-2], done=False).pieces
    return Reply(content_type=SSE, pieces=frames + (b'data: {"id": "cmpl-1", "choi',), cut=True)


STREAM_SHAPES: dict[str, tuple[Callable[[list[Json], Request], Reply], str]] = {
    "stream_cut_mid_event": (lambda e, r: _cut_mid_event(e), "connection lost"),
    "stream_without_done": (lambda e, r: sse_reply(e, done=False), "without [DONE]"),
    "stream_out_of_order": (lambda e, r: sse_reply(_first_finish(e)), "after the finish_reason"),
    "stream_duplicated_final_chunk": (lambda e, r: sse_reply(e[:-1] + [e[-2]] + e[-1:]) if len(e) > 1
                                      else sse_reply(e + e), "after the finish_reason"),
    "stream_event_not_json": (lambda e, r: sse_reply(e[:1] + [b"{'choices': oops"] + e[1:]), "not JSON"),
    "stream_error_event": (lambda e, r: sse_reply(e[:1] + [{"error": {"message": "engine died", "code": 500}}]),
                           "error event"),
    "stream_non_utf8_event": (lambda e, r: sse_reply(e[:1] + [b"\xff\xfe" + dumps(e[1] if len(e) > 1 else e[0])]
                                                     + e[1:]), "not JSON"),
    "stream_not_event_stream": (lambda e, r: Reply(pieces=(dumps(e[0]),)), "expected an event stream"),
}


# ---------------------------------------------------------------- Hypothesis strategies
finite_logprobs = st.floats(min_value=-30.0, max_value=0.0, allow_nan=False)
hostile_logprobs = st.one_of(
    finite_logprobs, st.just(math.nan), st.just(math.inf), st.just(-math.inf),
    st.floats(min_value=0.01, max_value=1e6), st.just(10 ** 400), st.just(-(10 ** 400)),
    st.booleans(), st.text(max_size=3), st.none())
hostile_ids = st.one_of(st.integers(0, VOCAB - 1), st.integers(VOCAB, 10 ** 6), st.integers(-(10 ** 6), -1),
                        st.just(2 ** 40), st.just(10 ** 30), st.booleans(), st.floats(0, 100), st.text(max_size=2))
hostile_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 20), 10 ** 20), st.just(10 ** 400),
                            st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                            st.just("token_id:-1"), st.just("token_id:99999999999999999999"))
hostile_values = st.recursive(hostile_scalars,
                              lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                              max_leaves=12)


@st.composite
def requests(draw, *, logprobs: bool | None = None, stream: bool = False) -> Request:
    want = draw(st.booleans()) if logprobs is None else logprobs
    return Request(prompt_ids=(1, 2, 3), max_tokens=draw(st.integers(1, 12)),
                   temperature=draw(st.sampled_from([0.0, 1.0])), logprobs=draw(st.integers(0, 5)) if want else None,
                   stream=stream, request_id=f"req-{draw(st.integers(0, 10 ** 6))}")


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document (the root excluded)."""
    out: list[tuple] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out.append(prefix + (key,))
        out += paths(child, prefix + (key,))
    return out


@st.composite
def damaged(draw, document: Any, *, max_edits: int = 3) -> Any:
    """`document` with 0..max_edits random edits: delete, replace by a hostile value, null, empty,
    duplicate or drop a list element, add an unknown field."""
    doc = copy.deepcopy(document)
    for _ in range(draw(st.integers(0, max_edits))):
        places = paths(doc)
        if not places:
            break
        path = draw(st.sampled_from(places))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = draw(st.sampled_from(["delete", "replace", "null", "empty", "duplicate", "extra", "logprob", "id"]))
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(hostile_values)
        elif action == "null":
            parent[key] = None
        elif action == "empty":
            parent[key] = [] if isinstance(parent[key], list) else {} if isinstance(parent[key], dict) else ""
        elif action == "duplicate" and isinstance(parent[key], list) and parent[key]:
            parent[key].append(copy.deepcopy(parent[key][-1]))
        elif action == "extra" and isinstance(parent[key], dict):
            parent[key][draw(st.text(min_size=1, max_size=6))] = draw(hostile_values)
        elif action == "logprob":
            parent[key] = draw(hostile_logprobs)
        elif action == "id":
            parent[key] = draw(hostile_ids)
    return doc


@st.composite
def token_lists(draw, req: Request) -> list[int]:
    return draw(st.lists(st.integers(0, VOCAB - 1), max_size=req.max_tokens))


@st.composite
def byte_damage(draw, reply: Reply) -> Reply:
    """Damage at the byte level: truncate, prefix invalid UTF-8, cut the connection, wrong type or status,
    or the same bytes split at arbitrary places (mid-line, mid-event, inside a UTF-8 character)."""
    body = reply.body
    action = draw(st.sampled_from(["none", "truncate", "non_utf8", "cut", "content_type", "status", "empty",
                                   "rechunk"]))
    if action == "rechunk":
        cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=8))))
        bounds = [0, *cuts, len(body)]
        return Reply(reply.status, reply.content_type, tuple(body[a:b] for a, b in zip(bounds, bounds[1:])),
                     cut=reply.cut)
    if action == "truncate":
        return Reply(reply.status, reply.content_type, (body[: draw(st.integers(0, max(len(body) - 1, 0)))],))
    if action == "non_utf8":
        at = draw(st.integers(0, len(body)))
        return Reply(reply.status, reply.content_type, (body[:at] + b"\xff\xc3(" + body[at:],))
    if action == "cut":
        return Reply(reply.status, reply.content_type, reply.pieces[: draw(st.integers(0, len(reply.pieces)))],
                     cut=True)
    if action == "content_type":
        return Reply(reply.status, draw(st.sampled_from(["text/plain", "", JSON_TYPE, SSE])), reply.pieces)
    if action == "status":
        return Reply(draw(st.sampled_from([201, 204, 400, 404, 500, 503])), reply.content_type, reply.pieces)
    if action == "empty":
        return Reply(reply.status, reply.content_type, ())
    return reply


# ---------------------------------------------------------------- serving a Reply to the adapter
def mock_response(reply: Reply) -> httpx.Response:
    """The reply as httpx delivers it; a cut connection raises mid-body like a real socket."""
    async def body():
        for piece in reply.pieces:
            yield piece
        if reply.cut:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
    headers = {"content-type": reply.content_type} if reply.content_type else {}
    return httpx.Response(reply.status, headers=headers, content=body())


def call_with(route: Any, replies: Callable[[httpx.Request], Reply], work: Callable[[], Awaitable[Any]]) -> Any:
    """Run `work()` (a coroutine of the route) with every HTTP exchange answered by `replies`."""
    async def main() -> Any:
        route._http = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: mock_response(replies(r))))
        route._http_loop = asyncio.get_running_loop()
        try:
            return await work()
        finally:
            await route.aclose()
    return asyncio.run(main())


# ---------------------------------------------------------------- the property
def _sane_logprob(value: Any, *, chosen: bool) -> bool:
    """A logprob is a float, not NaN, not above 0 (beyond print noise); a chosen token's is finite."""
    if not isinstance(value, float) or math.isnan(value) or value > LOGPROB_SLACK:
        return False
    return not (chosen and value == -math.inf)


def check_token_logprobs(entries: Any, ids: tuple[int, ...] | None = None) -> None:
    for n, entry in enumerate(entries):
        assert isinstance(entry, TokenLogprobs), entry
        assert _valid_id(entry.token_id), entry
        if ids is not None:
            assert entry.token_id == ids[n], (entry, ids)
        assert _sane_logprob(entry.logprob, chosen=True), entry
        for token, value in entry.top:
            assert _valid_id(token) and _sane_logprob(value, chosen=False), entry


def _valid_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_TOKEN_ID


def check_completion(result: Any, req: Request, route_name: str) -> None:
    """A usable Completion: ids are ids, text and finish are strings, logprobs align and are logprobs."""
    assert isinstance(result, Completion), type(result)
    assert isinstance(result.token_ids, tuple) and all(map(_valid_id, result.token_ids)), result.token_ids
    assert isinstance(result.text, str) and isinstance(result.finish_reason, str), result
    assert result.route == route_name
    if result.logprobs is not None:
        assert len(result.logprobs) == len(result.token_ids), result
        check_token_logprobs(result.logprobs, result.token_ids)
    usage = result.usage_completion_tokens
    assert usage is None or (_valid_id(usage) and (usage <= req.max_tokens or len(result.token_ids) > req.max_tokens))


@dataclass
class Tally:
    """How examples ended, per property: printed in the closing note of the issue."""

    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.outcomes[what] = self.outcomes.get(what, 0) + 1


def check_outcome(fn: Callable[[], Any], *, request_id: str, route_name: str,
                  valid: Callable[[Any], None], tally: Tally | None = None) -> Any:
    """Run `fn`; it must return something `valid` accepts or raise a RouteError carrying this request's id."""
    try:
        result = fn()
    except RouteError as exc:
        assert exc.request_id == request_id, (exc.request_id, request_id, exc.describe())
        assert exc.route == route_name, exc.describe()
        assert isinstance(exc.describe(), str)
        if tally is not None:
            tally.count(exc.kind)
        return exc
    valid(result)
    if tally is not None:
        tally.count("valid")
    return result
