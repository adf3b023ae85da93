"""Harness throughput: the suite's load driver and OpenAI adapter against a bare httpx loop.

    python -m benchmarks.harness [--levels 8,32,128,256] [--requests 3000] [--repeats 3] [--json]

Both clients send the same completions request to the same fast local OpenAI-shaped server
(a raw asyncio HTTP/1.1 server in a separate process, so client and server do not share a
GIL; it answers every request at once with a fixed body that carries token_ids). The bare
client is one `httpx.AsyncClient` with a semaphore; the suite's client is what a stressor
runs: `drive_handle` over a RouteHandle (background event loop thread, TimedRoute,
OpenAIRoute). Each level runs `--repeats` interleaved rounds and keeps each client's best
round (other processes share the machine). Client CPU per request is this process's CPU
time (all threads) divided by the requests sent; on a busy machine the request rates swing
with other processes' load, and the CPU ratio (bare CPU / suite CPU per request) is the steadier
estimate of the rate ratio on a quiet one, where the client is CPU-bound. The peak in flight
shows whether each client really held the level (a rate at a lower concurrency is not
comparable). The goal: the suite reaches >= 0.9x the bare loop's request rate at every level,
so that on a fast GPU route the engine, not the client, sets the load. Environment: none.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from spec_route_suite.routes.base import Request
from spec_route_suite.routes.loop import BackgroundLoop
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.routes.wrappers.timing import TimedRoute
from spec_route_suite.session import RouteHandle
from spec_route_suite.stressors.driver import burst, drive_handle, plan

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (8, 32, 128, 256)
GOAL = 0.9
PROMPT = tuple(range(100, 116))
MAX_TOKENS = 8
MODEL = "bench"
BODY = json.dumps({
    "id": "cmpl-bench", "object": "text_completion", "model": MODEL,
    "choices": [{"index": 0, "text": " a b c d e f g h", "finish_reason": "length", "logprobs": None,
                 "token_ids": list(range(200, 200 + MAX_TOKENS))}],
    "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": MAX_TOKENS, "total_tokens": len(PROMPT) + MAX_TOKENS},
}).encode()
RESPONSE = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: " + str(len(BODY)).encode()
            + b"\r\n\r\n" + BODY)


# ------------------------------------------------------------------------------------ the server
class _Answer(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every complete request (headers + content-length body) gets RESPONSE."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self.buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            self.buffer = self.buffer[end:]
            self.transport.write(RESPONSE)


async def _serve() -> None:
    server = await asyncio.get_running_loop().create_server(_Answer, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


class FastServer:
    """The answering server in its own process; stopped on exit."""

    def __enter__(self) -> "FastServer":
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.harness", "--serve"], cwd=ROOT,
                                     stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------------ the clients
@dataclass(frozen=True)
class Round:
    requests: int
    ok: int
    wall_s: float
    cpu_s: float
    peak_in_flight: int

    @property
    def rate(self) -> float:
        return self.requests / self.wall_s

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_s / self.requests


def _timed(fn) -> Round:
    wall, cpu = time.perf_counter(), time.process_time()
    requests, ok, peak = fn()
    return Round(requests, ok, time.perf_counter() - wall, time.process_time() - cpu, peak)


def bare_round(url: str, n: int, concurrency: int) -> Round:
    """The reference client: one AsyncClient sized to the concurrency, `concurrency` workers in a closed loop."""
    payload = {"model": MODEL, "prompt": list(PROMPT), "max_tokens": MAX_TOKENS, "temperature": 0.0, "top_p": 1.0,
               "n": 1, "ignore_eos": False, "return_token_ids": True}

    async def run() -> tuple[int, int, int]:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        left = n
        ok = now = peak = 0
        async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:
            async def worker() -> None:
                nonlocal left, ok, now, peak
                while left > 0:
                    left -= 1
                    now += 1
                    peak = max(peak, now)
                    resp = await client.post(f"{url}/completions", json=payload)
                    now -= 1
                    ok += bool(resp.json()["choices"][0]["token_ids"])
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return n, ok, peak

    return _timed(lambda: asyncio.run(run()))


class SuiteClient:
    """What a stressor runs: RouteHandle (background loop, TimedRoute, OpenAIRoute) + drive_handle."""

    def __init__(self, url: str):
        spec = parse_route_uri("bench", f"openai:{url}?model={MODEL}&tokenizer=fixtures/models/target", base=ROOT)
        self.loop = BackgroundLoop()
        self.handle = RouteHandle(TimedRoute(build_route(spec)), spec, self.loop, 30.0)
        self.rounds = 0

    def round(self, n: int, concurrency: int) -> Round:
        self.rounds += 1
        request = Request(prompt_ids=PROMPT, max_tokens=MAX_TOKENS)
        subs = plan([(f"k{i % 16}", request) for i in range(n)], offsets=burst(n), tag=f"bench{self.rounds}")

        def run() -> tuple[int, int, int]:
            load = drive_handle(self.handle, subs, concurrency=concurrency, mean_latency_s=0.01)
            return len(load.outcomes), len(load.completed), load.max_in_flight

        return _timed(run)

    def close(self) -> None:
        self.handle.close()
        self.loop.close()


# ------------------------------------------------------------------------------------ the table
def measure(levels, requests: int, repeats: int) -> list[dict]:
    rows = []
    with FastServer() as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        suite = SuiteClient(url)
        try:
            bare_round(url, 200, 8), suite.round(200, 8)  # warm-up: imports, first connections
            for level in levels:
                n = max(requests, 8 * level)
                bare, ours = [], []
                for _ in range(repeats):
                    bare.append(bare_round(url, n, level))
                    ours.append(suite.round(n, level))
                b, s = max(bare, key=lambda r: r.rate), max(ours, key=lambda r: r.rate)
                if s.ok != s.requests or b.ok != b.requests:
                    raise SystemExit(f"level {level}: failed requests (bare {b.ok}/{b.requests}, "
                                     f"suite {s.ok}/{s.requests})")
                rows.append({"concurrency": level, "requests": n, "bare_rps": round(b.rate, 1),
                             "suite_rps": round(s.rate, 1), "ratio": round(s.rate / b.rate, 3),
                             "bare_cpu_ms": round(b.cpu_ms_per_request, 3),
                             "suite_cpu_ms": round(s.cpu_ms_per_request, 3),
                             "cpu_ratio": round(b.cpu_ms_per_request / s.cpu_ms_per_request, 3),
                             "bare_peak": b.peak_in_flight, "suite_peak": s.peak_in_flight})
                print(_row(rows[-1]), file=sys.stderr, flush=True)
        finally:
            suite.close()
    return rows


HEADER = ("| concurrency | requests | bare req/s | suite req/s | ratio | bare CPU ms/req | suite CPU ms/req "
          "| CPU ratio (bare/suite) | peak in flight (bare / suite) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def _row(r: dict) -> str:
    flag = "" if r["ratio"] >= GOAL else " (below goal)"
    return (f"| {r['concurrency']} | {r['requests']} | {r['bare_rps']:.0f} | {r['suite_rps']:.0f} | "
            f"{r['ratio']:.2f}{flag} | {r['bare_cpu_ms']:.3f} | {r['suite_cpu_ms']:.3f} | {r['cpu_ratio']:.2f} | "
            f"{r['bare_peak']} / {r['suite_peak']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--requests", type=int, default=3000, help="requests per round (at least 8x the level)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per level; the best counts")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve())
        return 0
    rows = measure([int(x) for x in args.levels.split(",")], args.requests, args.repeats)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(HEADER)
    for row in rows:
        print(_row(row))
    worst = min(r["ratio"] for r in rows)
    short = [r["concurrency"] for r in rows if r["suite_peak"] < r["concurrency"]]
    print(f"\nworst ratio {worst:.2f} (goal >= {GOAL}): {'met' if worst >= GOAL else 'NOT met'}")
    if short:
        print(f"the suite never reached the requested concurrency at levels {short}: its rate is not comparable there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
