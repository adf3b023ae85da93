"""A real HTTP server on 127.0.0.1 that answers like vLLM (or replays recorded SGLang answers).

The HTTP route adapters are tested over real sockets, not a mocked transport, so
keep-alive, chunked streaming, half-sent bodies and refused connections behave as they
do against an engine. The "model" is a deterministic toy: after token t the likely
next tokens are t+1 (p=0.6), t+2 (0.25), t+3 (0.1), the rest share 0.05; greedy decoding
counts upward and reaches EOS (65) after 63 and <unk> (64). It pretends to speculate
with 3 draft tokens per step, all accepted, so /metrics has vLLM spec_decode counters.
Faults are switched per test through `FakeServer.faults`.
"""
from __future__ import annotations

import json
import math
import random
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VOCAB = 66
UNK, EOS = 64, 65
NAMES = [f"t{i}" for i in range(64)] + ["<unk>", "</s>"]
SPEC_K = 3
RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"

FAULTS = {
    "http500", "http400", "long_error", "echo_auth", "bad_json", "no_choices", "no_token_ids", "hang",
    "close_mid_body", "stream_no_done", "stream_cut", "stream_two_finish", "stream_no_finish",
    "stream_error_event", "slow_stream", "no_prompt_logprobs", "reject_prompt_logprobs",
    "string_logprob_keys", "bare", "slow_answer", "no_spec_metrics", "unhealthy", "no_output_ids", "sglang_server_info_renamed",
    "no_logprobs_with_tools_stream", "drop_once", "refuse_n_500", "refuse_tools_500",
}


def write_toy_tokenizer(path: Path) -> str:
    """A word-level tokenizer whose ids decode to the toy's token names ("t0".."t63", <unk>, </s>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab={name: i for i, name in enumerate(NAMES)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##")
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>").save_pretrained(str(path))
    return str(path)


def toy_probs(last: int) -> list[float]:
    probs = [0.05 / (VOCAB - 3)] * VOCAB
    for step, p in ((1, 0.6), (2, 0.25), (3, 0.1)):
        probs[(last + step) % VOCAB] = p
    return probs


def toy_logprob(last: int, token: int) -> float:
    return math.log(toy_probs(last)[token])


def toy_top(last: int, k: int) -> list[tuple[int, float]]:
    """The k most likely next tokens, ties broken by id (as the route sorts)."""
    ranked = sorted(range(VOCAB), key=lambda t: (-toy_probs(last)[t], t))
    return [(t, toy_logprob(last, t)) for t in ranked[:k]]


def toy_generate(prompt: list[int], *, max_tokens: int, temperature: float = 0.0, seed: int | None = None,
                 stop: list[str] = (), stop_token_ids: list[int] = (), ignore_eos: bool = False,
                 ) -> tuple[list[int], str]:
    """(token ids, finish_reason) with vLLM semantics: stop ids and EOS are kept, stop strings are not."""
    rng = random.Random(f"{seed}-{prompt}" if seed is not None else None)
    out: list[int] = []
    last = prompt[-1] if prompt else 0
    for _ in range(max_tokens):
        probs = toy_probs(last)
        token = (last + 1) % VOCAB if temperature == 0 else rng.choices(range(VOCAB), weights=probs)[0]
        if NAMES[token] in stop:
            return out, "stop"
        out.append(token)
        last = token
        if token in stop_token_ids or (token == EOS and not ignore_eos):
            return out, "stop"
    return out, "length"


def text_of(ids: list[int]) -> str:
    return " ".join(NAMES[t] for t in ids)


def free_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def recorded(name: str) -> Any:
    return json.loads((RECORDED / name).read_text())


class FakeServer:
    """Start with `with FakeServer() as server:`; `server.v1` is the OpenAI base URL."""

    def __init__(self, *, flavor: str = "vllm", model: str = "toy", sglang_stream: str = "cumulative"):
        self.flavor = flavor
        self.model = model
        self.sglang_stream = sglang_stream
        self._faults: set[str] = set()
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * SPEC_K}
        self.lock = threading.Lock()
        self.running = 0   # POSTs being answered now: the vllm:num_requests_running gauge
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def faults(self) -> set[str]:
        return self._faults

    @faults.setter
    def faults(self, names: set[str]) -> None:
        unknown = set(names) - FAULTS
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}; known: {sorted(FAULTS)}")
        self._faults = set(names)

    @property
    def root(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def v1(self) -> str:
        return f"{self.root}/v1"

    def start(self) -> "FakeServer":
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="fake-llm",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "FakeServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def last(self, path: str) -> dict[str, Any]:
        """The most recent request to `path` (body, headers)."""
        return next(r for r in reversed(self.requests) if r["path"] == path)

    def count_speculation(self, n_tokens: int) -> None:
        """Pretend each verify step drafted SPEC_K tokens and accepted as many as were needed."""
        with self.lock:
            remaining = n_tokens
            while remaining > 0:
                accepted = min(SPEC_K, remaining - 1)
                self.counters["drafts"] += 1
                self.counters["draft_tokens"] += SPEC_K
                self.counters["accepted"] += accepted
                for position in range(accepted):
                    self.counters["per_pos"][position] += 1
                remaining -= accepted + 1

    def server_info(self) -> dict[str, Any]:
        """The recorded live vLLM dev-mode config, pointed at the toy models and SPEC_K drafts."""
        info = recorded("vllm_live.json")["server_info"]
        config = info["vllm_config"]
        config["model_config"].update(model="/models/toy-target", served_model_name=self.model, max_logprobs=10)
        config["speculative_config"].update(model="/models/toy-draft", num_speculative_tokens=SPEC_K)
        return info

    def metrics_text(self) -> str:
        lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
                 "# TYPE vllm:num_requests_running gauge",
                 f'vllm:num_requests_running{{engine="0",model_name="{self.model}"}} {float(self.running)}']
        if "no_spec_metrics" in self.faults:
            return "\n".join(lines) + "\n"
        c = self.counters
        labels = f'engine="0",model_name="{self.model}"'
        for name, value in (("num_drafts", c["drafts"]), ("num_draft_tokens", c["draft_tokens"]),
                            ("num_accepted_tokens", c["accepted"])):
            lines += [f"# TYPE vllm:spec_decode_{name} counter",
                      f"vllm:spec_decode_{name}_total{{{labels}}} {float(value)}",
                      f"vllm:spec_decode_{name}_created{{{labels}}} 1.7e9"]
        lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
        for position, value in enumerate(c["per_pos"]):
            lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{position}"}} '
                         f"{float(value)}")
        return "\n".join(lines) + "\n"


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the stdlib default (5) drops connects under concurrency; engines use ~2048

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-stream (timeouts, error events) is expected, not a server bug."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeServer

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        return None

    # ---- low-level writers ----
    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        if self.fake.flavor == "sglang":
            body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
        else:
            body = {"error": {"message": message, "type": "BadRequestError" if status < 500 else "InternalServerError",
                              "param": None, "code": status}}
        self._send(status, body)

    def _cut(self) -> None:
        """Drop the connection now (the peer sees EOF mid-message)."""
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _stream(self, events: list[Any], *, done: bool = True, cut_after: int | None = None,
                delay_s: float = 0.0) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        frames = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
        frames += ["data: [DONE]\n\n"] if done else []
        for n, frame in enumerate(frames):
            if cut_after is not None and n == cut_after:
                self.wfile.write(b"40\r\ndata: {\"choi")  # half a chunk, then gone
                self._cut()
                return
            if delay_s:
                time.sleep(delay_s)
            data = frame.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    # ---- dispatch ----
    def _record(self, body: Any) -> None:
        self.fake.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items()),
                                   "body": body})

    def do_GET(self) -> None:  # noqa: N802
        self._record(None)
        fake, path = self.fake, self.path
        if path == "/health":
            return self._send(503 if "unhealthy" in fake.faults else 200, b"")
        if fake.flavor == "sglang":
            info = recorded("sglang_server_info.json")
            newer = "sglang_server_info_renamed" in fake.faults  # /get_server_info moved to /server_info
            if path.split("?")[0] == ("/server_info" if newer else "/get_server_info"):
                return self._send(200, info["get_server_info"])
            if path == "/v1/models":
                return self._send(200, info["v1_models"])
            return self._send(404, {"detail": "Not Found"})
        if "bare" in fake.faults or path == "/get_server_info":
            return self._send(404, {"detail": "Not Found"})
        if path == "/version":
            return self._send(200, {"version": "0.32.0"})
        if path == "/v1/models":
            return self._send(200, {"object": "list", "data": [
                {"id": fake.model, "object": "model", "created": 1700000000, "owned_by": "vllm",
                 "root": "/models/toy-target", "parent": None, "max_model_len": 512, "permission": []}]})
        if path == "/metrics":
            return self._send(200, fake.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        if path == "/server_info?config_format=json":  # vLLM with VLLM_SERVER_DEV_MODE=1
            return self._send(200, fake.server_info())
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        with self.fake.lock:
            self.fake.running += 1
        try:
            self._post()
        finally:
            with self.fake.lock:
                self.fake.running -= 1

    def _post(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        self._record(body)
        faults = self.fake.faults
        if "slow_answer" in faults:   # a valid answer after a while: requests sent together are served together
            time.sleep(0.4)
        if "hang" in faults:
            self.fake.release.wait(60)
            return self._cut()
        if "drop_once" in faults:   # a transport drop: this request gets no answer, the next ones do
            faults.discard("drop_once")
            return self._cut()
        if "refuse_n_500" in faults and body.get("n", 1) != 1:      # llama.cpp's words, and its status
            return self._error(500, "Only one completion choice is allowed")
        if "refuse_tools_500" in faults and body.get("tools"):      # llama.cpp started without --jinja
            return self._error(500, "tools param requires --jinja flag")
        if "http500" in faults:
            return self._error(500, "EngineCore encountered an issue. See stack trace (above) for the root cause.")
        if "http400" in faults:
            return self._error(400, "This model's maximum context length is 512 tokens. However, you requested 900 "
                                    "tokens (400 in the messages, 500 in the completion).")
        if "long_error" in faults:
            return self._error(500, "engine failure " + "x" * 5000)
        if "echo_auth" in faults:
            return self._error(401, f"invalid credentials: {self.headers.get('Authorization')}")
        if "bad_json" in faults:
            return self._send(200, b'{"id": "cmpl-1", "choices": [{"text": "t1')
        if "close_mid_body" in faults:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "4000")
            self.end_headers()
            self.wfile.write(b'{"id": "cmpl-1", "object": "text_completion", "choices": [')
            return self._cut()
        if self.fake.flavor == "sglang" and self.path == "/generate":
            return self._sglang(body)
        if self.path == "/v1/completions":
            return self._completions(body)
        if self.path == "/v1/chat/completions":
            return self._chat(body)
        return self._send(404, {"detail": "Not Found"})

    # ---- fake vLLM ----
    def _key(self, body: dict[str, Any], token: int) -> str:
        by_id = body.get("return_tokens_as_token_ids") and "string_logprob_keys" not in self.fake.faults
        return f"token_id:{token}" if by_id else NAMES[token]

    def _logprobs(self, body: dict[str, Any], context: list[int], ids: list[int]) -> dict[str, Any]:
        k = body["logprobs"]
        out: dict[str, Any] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        last, offset = context[-1], 0
        for token in ids:
            top = dict(toy_top(last, k))
            top.setdefault(token, toy_logprob(last, token))  # vLLM adds the sampled token
            out["text_offset"].append(offset)
            out["token_logprobs"].append(toy_logprob(last, token))
            out["tokens"].append(self._key(body, token))
            out["top_logprobs"].append({self._key(body, t): lp for t, lp in top.items()})
            offset += len(NAMES[token]) + 1
            last = token
        return out

    def _prompt_logprobs(self, ids: list[int], k: int) -> list[Any]:
        entries: list[Any] = [None]
        for position in range(1, len(ids)):
            last, token = ids[position - 1], ids[position]
            ranked = sorted(range(VOCAB), key=lambda t: (-toy_probs(last)[t], t))
            chosen = set(ranked[:k]) | {token}
            entries.append({str(t): {"logprob": toy_logprob(last, t), "rank": ranked.index(t) + 1,
                                     "decoded_token": NAMES[t]} for t in sorted(chosen, key=ranked.index)})
        return entries

    def _run(self, body: dict[str, Any], prompt: list[int]) -> tuple[list[int], str]:
        ids, finish = toy_generate(prompt, max_tokens=body.get("max_tokens", 16),
                                   temperature=body.get("temperature", 1.0), seed=body.get("seed"),
                                   stop=body.get("stop") or [], stop_token_ids=body.get("stop_token_ids") or [],
                                   ignore_eos=body.get("ignore_eos", False))
        self.fake.count_speculation(len(ids))
        return ids, finish

    def _completions(self, body: dict[str, Any]) -> None:
        faults, prompt = self.fake.faults, body["prompt"]
        if "reject_prompt_logprobs" in faults and body.get("prompt_logprobs") is not None:
            return self._error(400, "prompt_logprobs is not supported when speculative decoding is enabled")
        ids, finish = self._run(body, prompt)
        with_ids = body.get("return_token_ids") and "no_token_ids" not in faults
        usage = {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids),
                 "completion_tokens": len(ids), "prompt_tokens_details": None}
        if body.get("stream"):
            return self._completion_stream(body, prompt, ids, finish, usage, with_ids)
        choice = {"index": 0, "text": text_of(ids),
                  "logprobs": self._logprobs(body, prompt, ids) if body.get("logprobs") is not None else None,
                  "finish_reason": finish, "stop_reason": None,
                  "token_ids": ids if with_ids else None, "prompt_token_ids": prompt if with_ids else None,
                  "prompt_logprobs": None}
        if body.get("prompt_logprobs") is not None and "no_prompt_logprobs" not in faults:
            choice["prompt_logprobs"] = self._prompt_logprobs(prompt, body["prompt_logprobs"])
        reply = {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()),
                 "model": self.fake.model, "choices": [choice], "usage": usage, "system_fingerprint": None,
                 "kv_transfer_params": None}
        if "no_choices" in faults:
            del reply["choices"]
        self._send(200, reply)

    def _completion_stream(self, body: dict[str, Any], prompt: list[int], ids: list[int], finish: str,
                           usage: dict[str, Any], with_ids: bool) -> None:
        """Chunks of up to 2 tokens (speculative engines emit several tokens per step), then usage."""
        faults, events, context = self.fake.faults, [], list(prompt)
        pieces = [ids[i:i + 2] for i in range(0, len(ids), 2)] or [[]]
        for n, piece in enumerate(pieces):
            final = n == len(pieces) - 1
            choice = {"index": 0, "text": (" " if n else "") + text_of(piece),
                      "logprobs": self._logprobs(body, context, piece) if body.get("logprobs") is not None else None,
                      "finish_reason": finish if final and "stream_no_finish" not in faults else None,
                      "stop_reason": None, "token_ids": piece if with_ids else None}
            if n == 0 and with_ids:
                choice["prompt_token_ids"] = prompt
            if n == 0 and "stream_two_finish" in faults:
                choice["finish_reason"] = "length"
            events.append({"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()),
                           "model": self.fake.model, "choices": [choice]})
            context += piece
        if "stream_error_event" in faults:
            events.insert(1, {"error": {"message": "engine died mid-stream", "type": "InternalServerError",
                                        "code": 500}})
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()),
                           "model": self.fake.model, "choices": [], "usage": usage})
        if "slow_stream" in faults:
            events = events * 10
        self._stream(events, done="stream_no_done" not in faults,
                     cut_after=1 if "stream_cut" in faults else None,
                     delay_s=0.3 if "slow_stream" in faults else 0.0)

    def _chat(self, body: dict[str, Any]) -> None:
        if ("no_logprobs_with_tools_stream" in self.fake.faults and body.get("tools") and body.get("stream")
                and body.get("logprobs")):   # llama.cpp's server, word for word
            return self._send(400, {"error": {"code": 400, "message": "logprobs is not supported with tools + stream",
                                              "type": "invalid_request_error"}})
        prompt = [len(m.get("content", "")) % 60 for m in body["messages"]]
        ids, finish = self._run(body, prompt)
        with_ids = body.get("return_token_ids") and "no_token_ids" not in self.fake.faults
        logprobs = None
        if body.get("logprobs"):
            flat = self._logprobs({**body, "logprobs": body.get("top_logprobs", 0)}, prompt, ids)
            logprobs = {"content": [
                {"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                 "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top.items()]}
                for tok, lp, top in zip(flat["tokens"], flat["token_logprobs"], flat["top_logprobs"])]}
        usage = {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids), "completion_tokens": len(ids)}
        if body.get("stream"):
            events = [{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": self.fake.model,
                       "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                    "logprobs": None, "finish_reason": None,
                                    "token_ids": [] if with_ids else None}]}]
            for n, token in enumerate(ids):
                events.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": self.fake.model,
                               "choices": [{"index": 0, "delta": {"content": (" " if n else "") + NAMES[token]},
                                            "logprobs": None, "token_ids": [token] if with_ids else None,
                                            "finish_reason": finish if n == len(ids) - 1 else None}]})
            events.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": self.fake.model,
                           "choices": [], "usage": usage})
            return self._stream(events)
        self._send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                         "model": self.fake.model, "usage": usage,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text_of(ids),
                                                              "tool_calls": []},
                                      "logprobs": logprobs, "finish_reason": finish, "stop_reason": None,
                                      "token_ids": ids if with_ids else None}]})

    # ---- recorded SGLang ----
    def _sglang(self, body: dict[str, Any]) -> None:
        strip = "no_output_ids" in self.fake.faults
        if body.get("stream"):
            name = ("sglang_generate_stream.json" if self.fake.sglang_stream == "cumulative"
                    else "sglang_generate_stream_incremental.json")
            events = recorded(name)["events"]
            if strip:
                events = [{k: v for k, v in e.items() if k != "output_ids"} for e in events]
            return self._stream(events)
        if body["sampling_params"].get("max_new_tokens") == 0:
            return self._send(200, recorded("sglang_score.json")["response"])
        reply = recorded("sglang_generate.json")["response"]
        if strip:
            reply.pop("output_ids")
        self._send(200, reply)
