"""A fault server: the in-process OpenAI-compatible server, answering a share of requests with malformed shapes.

Why: the route suite must turn a broken server's answers into findings that name the request
and what was wrong, and keep judging the rest. This serves a real model (any route URI, via
spec_route_suite.servers.inprocess) and damages the n-th answer with the next shape of
tests/hostile_shapes.py (BODY_SHAPES for plain answers, STREAM_SHAPES for event streams), spreading
`share` of the requests evenly (round-robin over the shapes); every damaged request is logged with
its shape, so a test can match each finding to the shape that caused it. Switches plant answers that
are well-formed but wrong (an early "stop" under load, all-zero logprobs, usage above max_tokens), and
an engine that wedges after client disconnects (`wedge_after_disconnects`: like an older llama.cpp server
whose HTTP threads stay held by dead connections, it then answers nothing, /health included, until stopped), and
an engine that dies as vLLM's does when its EngineCore fails (`die_at`: HTTP 500 to that request and to every one
after it while /health still answers, then, at the first request whose id starts with `exit_at`, the process gone:
that connection cut, every later one refused).
Environment: none.
"""
from __future__ import annotations

import io
import json
import select
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from spec_route_suite.routes.base import Request
from spec_route_suite.servers.inprocess import Engine, _Handler, _Server, build_engine
from tests.hostile_shapes import BODY_SHAPES, STREAM_SHAPES, Reply


PREFLIGHT_ID = "preflight"   # the suite's first-contact request: never damaged, so a run reaches the checks under test


@dataclass
class FaultPlan:
    """Which requests get which shape: `share` of each kind, in the order of `body_shapes` / `stream_shapes`."""

    share: float = 0.5
    stream_share: float = 1.0
    body_shapes: tuple[str, ...] = tuple(BODY_SHAPES)
    stream_shapes: tuple[str, ...] = tuple(STREAM_SHAPES)
    spare: tuple[str, ...] = ()        # request-id prefixes of plain requests never damaged (e.g. a check's set-up)
    collapse_under_load: bool = False  # well-formed but wrong: one empty "stop" token when others are in flight
    zero_logprobs: bool = False        # well-formed but wrong: every logprob exactly 0.0
    over_report_usage: float = 0.0     # well-formed but wrong: this share of answers bills more than max_tokens
    wedge_after_disconnects: int = 0   # after this many clients hung up before their answer, answer nothing more
    die_at: str = ""                   # the first request whose id starts so kills the engine (then HTTP 500s)
    exit_at: str = ""                  # after it died, the first request whose id starts so finds the server gone
    killed_by: str = ""                # the request id that killed it
    dying: threading.Event = field(default_factory=threading.Event)
    exiting: threading.Event = field(default_factory=threading.Event)
    exited: threading.Event = field(default_factory=threading.Event)
    served: list[tuple[str, str]] = field(default_factory=list)   # (request id, shape)
    over_reported: list[str] = field(default_factory=list)        # request ids billed above max_tokens
    in_flight: int = 0
    counts: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})
    answers: int = 0
    disconnects: int = 0
    wedged: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)   # set by stop(): held threads end
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def pick(self, request_id: str, *, stream: bool) -> str | None:
        """The shape for this request, round-robin over the damaged ones (deterministic, not random:
        n requests of a kind with share 1.0 get the first n shapes in order)."""
        shapes, share = (self.stream_shapes, self.stream_share) if stream else (self.body_shapes, self.share)
        if not stream and request_id.startswith((*self.spare, PREFLIGHT_ID)):
            return None
        with self._lock:
            n = self.counts[stream]
            self.counts[stream] = n + 1
            if not shapes or not _takes(n, share):
                return None
            shape = shapes[int(n * share) % len(shapes)]
            self.served.append((request_id, shape))
            return shape

    def over_reports(self, request_id: str) -> bool:
        """Whether this answer (plain or streamed) bills more tokens than max_tokens: `over_report_usage`
        of the answers, spread evenly in arrival order; the chosen request ids are logged."""
        if not self.over_report_usage:
            return False
        with self._lock:
            n, self.answers = self.answers, self.answers + 1
            if _takes(n, self.over_report_usage):
                self.over_reported.append(request_id)
                return True
            return False

    def hung_up(self) -> None:
        """A client left before its answer; enough of them wedge the server."""
        with self._lock:
            self.disconnects += 1
            if self.wedge_after_disconnects and self.disconnects >= self.wedge_after_disconnects:
                self.wedged.set()

    def engine_dead(self, request_id: str) -> bool:
        """Has the engine died (at this request, when it is the first `die_at` one)? The server's exit follows at
        the first `exit_at` request after it."""
        with self._lock:
            if self.die_at and not self.dying.is_set() and request_id.startswith(self.die_at):
                self.killed_by = request_id
                self.dying.set()
            if self.dying.is_set() and self.exit_at and request_id.startswith(self.exit_at):
                self.exiting.set()
            return self.dying.is_set()

    def hold(self) -> bool:
        """A wedged server holds the calling thread until stopped; True when it did (nothing is answered)."""
        if not self.wedged.is_set():
            return False
        self.released.wait()
        return True

    def enter(self) -> int:
        with self._lock:
            self.in_flight += 1
            return self.in_flight

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _takes(n: int, share: float) -> bool:
    """Whether the n-th request (from 0) is one of `share` of them, spread evenly."""
    return int((n + 1) * share) != int(n * share)


OVER_BILLED = 7   # tokens above max_tokens an over-reporting answer bills


def over_billed(body: dict, max_tokens: int) -> dict:
    """A copy of an answer (or of a stream's usage chunk) whose usage bills max_tokens + OVER_BILLED tokens."""
    if not isinstance(body.get("usage"), dict):
        return body
    body = json.loads(json.dumps(body))
    body["usage"]["completion_tokens"] = max_tokens + OVER_BILLED
    return body


def suspicious(body: dict, plan: FaultPlan, crowded: bool) -> dict:
    """The well-formed but wrong answers a plan asks for (a copy of `body`, or `body` itself)."""
    choice = body["choices"][0] if body.get("choices") else None
    if choice is None or not (plan.zero_logprobs or (plan.collapse_under_load and crowded)):
        return body
    body = json.loads(json.dumps(body))
    choice = body["choices"][0]
    if plan.collapse_under_load and crowded:
        choice.update(token_ids=choice["token_ids"][:1], text="", finish_reason="stop", logprobs=None)
        body["usage"]["completion_tokens"] = len(choice["token_ids"])
    lp = choice.get("logprobs")
    if plan.zero_logprobs and isinstance(lp, dict):
        lp["token_logprobs"] = [0.0 for _ in lp["token_logprobs"]]
        lp["top_logprobs"] = [{k: 0.0 for k in top} for top in lp["top_logprobs"]]
    return body


def client_gone(connection: socket.socket) -> bool:
    """Has the client closed its side (a hang-up before the answer)? Readable with nothing to read."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def write_reply(handler: Any, reply: Reply) -> None:
    """Send a Reply chunked; a `cut` reply drops the connection without the final chunk."""
    handler.send_response(reply.status)
    if reply.content_type:
        handler.send_header("Content-Type", reply.content_type)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for piece in reply.pieces:
        if piece:
            handler.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
    if not reply.cut:
        handler.wfile.write(b"0\r\n\r\n")
        return
    handler.wfile.flush()
    handler.close_connection = True
    try:
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class FaultHandler(_Handler):
    """The in-process server's handler, with the chosen shape applied to the answer it would have sent."""

    plan: FaultPlan

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        if self.plan.hold() or self._exited():
            self.close_connection = True
            return
        super().do_GET()

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        if self.plan.hold() or self._exited():
            self.close_connection = True
            return
        length = self.headers.get("Content-Length", "")
        raw = self.rfile.read(int(length)) if length.isdigit() else b""
        if self.plan.engine_dead(self.headers.get("X-Request-Id") or ""):   # vLLM after its EngineCore died: 500s
            if self.plan.exiting.is_set() and self._exited():
                self.close_connection = True
                return
            return _Handler._send(self, 500, {"error": {"message": "EngineCore encountered an issue. See stack trace "
                                                                   "(above) for the root cause.", "code": 500}})
        try:
            payload = json.loads(raw or b"{}")
        except ValueError:
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        max_tokens = payload.get("max_tokens")
        request_id = self.headers.get("X-Request-Id") or ""
        self.request_seen = Request(prompt_ids=(0,), max_tokens=max_tokens if isinstance(max_tokens, int) else 16,
                                    request_id=request_id)
        self.shape = self.plan.pick(request_id, stream=payload.get("stream") is True)
        self.over_report = self.plan.over_reports(request_id)
        connection_reader, self.rfile = self.rfile, io.BytesIO(raw)   # the parent reads the body again
        self.crowded = self.plan.enter() > 1
        try:
            super().do_POST()
        finally:
            self.plan.leave()
            # Back to the socket: left on the spent BytesIO, the keep-alive loop would read EOF as the next
            # request and drop the connection silently, and a client reusing it would see a disconnect.
            self.rfile = connection_reader

    def _exited(self) -> bool:
        """The server process is gone (`die_at`): a kept-alive connection is cut without an answer."""
        if not (self.plan.die_at and self.plan.exiting.is_set()):
            return False
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return True

    def _hung_up(self) -> bool:
        """The client left while its answer was computed: counted (it may wedge the server), nothing sent."""
        if not self.plan.wedge_after_disconnects or not client_gone(self.connection):
            return False
        self.plan.hung_up()
        self.close_connection = True
        return True

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        if self._hung_up():
            return
        damage = BODY_SHAPES.get(getattr(self, "shape", None) or "")
        if status == 200 and isinstance(body, dict) and "choices" in body:
            body = suspicious(body, self.plan, getattr(self, "crowded", False))
            if getattr(self, "over_report", False):
                body = over_billed(body, self.request_seen.max_tokens)
        if damage is None or status != 200 or not isinstance(body, dict):
            return super()._send(status, body, content_type)
        write_reply(self, damage[0](body, self.request_seen))

    def _stream(self, events: list[dict]) -> None:
        if self._hung_up():
            return
        if getattr(self, "over_report", False):
            events = [over_billed(event, self.request_seen.max_tokens) for event in events]
        damage = STREAM_SHAPES.get(getattr(self, "shape", None) or "")
        if damage is None:
            return super()._stream(events)
        write_reply(self, damage[0](events, self.request_seen))


def serve_faults(uri: str, plan: FaultPlan, *, model_name: str = "hostile",
                 base: Any = None) -> tuple[str, Callable[[], None]]:
    """Serve `uri` as `model_name` with `plan` on a daemon thread: (base_url ending in /v1, stop)."""
    engine: Engine = build_engine(uri, model_name=model_name, base=base)
    handler = type("Handler", (FaultHandler,), {"engine": engine, "plan": plan})
    httpd = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), name="fault-server", daemon=True)
    thread.start()
    closed = threading.Lock()

    def stop() -> None:
        with closed:
            if plan.exited.is_set():
                return
            plan.exited.set()
            plan.released.set()
            plan.exiting.set()
            httpd.shutdown()
            httpd.server_close()
            engine.close()

    def exit_when_dead() -> None:   # an engine that died takes its server down: connections refused
        plan.exiting.wait()
        if not plan.exited.is_set():
            stop()
    if plan.die_at:
        threading.Thread(target=exit_when_dead, name="fault-server-exit", daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1", stop
