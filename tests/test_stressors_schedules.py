"""Self-tests of schedules: Hypothesis and the ddmin shrinker reduce a mixing failure to its two requests,
and the replay script reproduces it standalone (in-process by factory, and over HTTP against a loopback server)."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import HealthCheck, find, given, settings

from spec_route_suite.routes.spec import RouteSpec
from spec_route_suite.stressors.canary import build_workload, serial_references
from spec_route_suite.stressors.driver import drive
from spec_route_suite.stressors.mixing.detect import detect
from spec_route_suite.stressors.replay import replay_script, route_uri
from spec_route_suite.stressors.schedules import Schedule, Step, batch_mixes, schedules, shrink, window_schedule
from test_stressors_fakes import CharTokenizer, MixingRoute, OracleRoute, oracle_answer

ROOT = Path(__file__).resolve().parent.parent
TOK = CharTokenizer()
WORKLOAD = build_workload(TOK, size=8, seed=5, task_share=0.25, max_prompt_tokens=10_000)
REFS = serial_references(lambda r: asyncio.run(OracleRoute(latency_s=0).generate(r)), WORKLOAD, max_tokens=64)


def run(route, schedule: Schedule, tag="s"):
    subs = schedule.submissions(WORKLOAD, max_tokens=64, tag=tag, stream=True)
    return asyncio.run(drive(route, subs, concurrency=schedule.concurrency, request_timeout_s=5, deadline_s=30))


def mixes(schedule: Schedule, *, rate=1.0, seed=0) -> bool:
    # 30 ms per request: two requests sent together overlap even when a loaded machine stalls the
    # event loop for a few milliseconds (at 4 ms, an unlucky stall let one finish first: a flaky shrink)
    route = MixingRoute(OracleRoute(latency_s=0.03), rate=rate, seed=seed, pick="first")
    return bool(detect(workload=WORKLOAD, references=REFS, outcomes=run(route, schedule).outcomes).mismatches)


def test_schedule_round_trips_and_describes_itself():
    s = Schedule(steps=(Step(0, 0, None), Step(3, 12, 40)), concurrency=2)
    assert Schedule.from_json(s.to_json()) == s
    assert "hang up at 40ms" in s.describe(WORKLOAD) and WORKLOAD.items[3].key in s.describe(WORKLOAD)


@given(schedules(pool_size=len(WORKLOAD.items), max_steps=6, max_concurrency=4))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_correct_route_passes_any_schedule(schedule):
    result = run(OracleRoute(latency_s=0.002), schedule)
    assert result.max_in_flight <= schedule.concurrency
    assert not detect(workload=WORKLOAD, references=REFS, outcomes=result.outcomes).mismatches


def test_hypothesis_shrinks_a_failing_batch_mix_to_a_pair():
    def breaks_needle(mix):
        schedule = Schedule(steps=tuple(Step(i) for i in (0, *mix)), concurrency=len(mix) + 1)
        return mixes(schedule)

    minimal = find(batch_mixes(pool_size=len(WORKLOAD.items), max_batch=6), breaks_needle,
                   settings=settings(max_examples=200, deadline=None, database=None,
                                     suppress_health_check=list(HealthCheck)))
    assert len(minimal) == 1 and minimal[0] != 0, minimal


def test_hypothesis_shrinks_a_mixing_failure_to_two_concurrent_requests():
    minimal = find(schedules(pool_size=len(WORKLOAD.items), max_steps=10, max_concurrency=6), mixes,
                   settings=settings(max_examples=400, deadline=None, database=None,
                                     suppress_health_check=list(HealthCheck)))
    assert len(minimal.steps) == 2 and minimal.concurrency == 2, minimal.describe(WORKLOAD)
    assert all(s.gap_ms == 0 and s.abort_ms is None for s in minimal.steps)
    assert minimal.steps[0].item != minimal.steps[1].item


def test_ddmin_shrinks_a_failing_load_window_to_two_requests():
    big = Schedule(steps=tuple(Step(i % len(WORKLOAD.items), i % 3, 30 if i % 5 == 4 else None) for i in range(24)),
                   concurrency=8)
    shrunk = shrink(big, mixes, max_evaluations=200, deadline_s=60)
    assert shrunk.reproduced and len(shrunk.schedule) == 2 and shrunk.schedule.concurrency == 2, shrunk.describe()
    assert all(s.abort_ms is None and s.gap_ms == 0 for s in shrunk.schedule.steps)
    assert "shrunk from 24 to 2 requests" in shrunk.describe()


def test_shrink_is_bounded_and_reports_a_failure_it_cannot_reproduce():
    calls = []
    shrunk = shrink(Schedule(steps=(Step(0), Step(1)), concurrency=2), lambda s: calls.append(s) or False,
                    max_evaluations=5, deadline_s=5)
    assert not shrunk.reproduced and len(calls) == 1 and "not reproduced" in shrunk.describe()
    slow = shrink(Schedule(steps=tuple(Step(i) for i in range(40)), concurrency=4),
                  lambda s: time.sleep(0.05) or len(s) >= 5, max_evaluations=1000, deadline_s=0.3)
    assert slow.evaluations <= 8 and slow.exhausted == "0s" and slow.reproduced


def test_window_schedule_keeps_the_victim_and_its_neighbours():
    schedule = Schedule(steps=tuple(Step(i % 8, 0 if i < 6 else 80) for i in range(9)), concurrency=6)
    result = run(MixingRoute(OracleRoute(latency_s=0.01), rate=1.0, pick="first"), schedule)
    victim = next(o for o in result.outcomes if o.key == WORKLOAD.items[1].key)
    window = window_schedule(result, victim_request=victim.request_id, workload=WORKLOAD)
    keys = [WORKLOAD.items[s.item].key for s in window.steps]
    assert WORKLOAD.items[1].key in keys and len(keys) <= 6 and window.concurrency <= 6


def run_script(tmp_path, script: str, *args) -> subprocess.CompletedProcess:
    path = tmp_path / "repro.py"
    path.write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)


MINIMAL = Schedule(steps=(Step(0), Step(1)), concurrency=2)


@pytest.mark.parametrize("factory, code", [("mixing_oracle_route", 1), ("oracle_route", 0)])
def test_in_process_replay_script_reproduces_only_the_faulty_route(tmp_path, factory, code):
    spec = RouteSpec(name="candidate", kind="reference", model="/nonexistent")
    script = replay_script(title="two requests mix", schedule=MINIMAL, workload=WORKLOAD, references=REFS,
                           spec=spec, max_tokens=64, repeats=3, route_factory=f"test_stressors_fakes:{factory}")
    done = run_script(tmp_path, script)
    assert done.returncode == code, done.stdout + done.stderr
    assert ("REPRODUCED on pass 1" in done.stdout) == (code == 1)


def test_route_uri_rebuilds_in_process_routes():
    spec = RouteSpec(name="c", kind="reference", model="/m/target", tokenizer="/m/target", draft="/m/draft",
                     num_assistant_tokens=4, options=(("fault", "cross_context_mixing"), ("mix_rate", "0.01")))
    assert route_uri(spec) == ("reference:/m/target?draft=%2Fm%2Fdraft&num_assistant_tokens=4"
                               "&fault=cross_context_mixing&mix_rate=0.01")
    given = RouteSpec(name="c", kind="hf", model="/x", source="hf:/x?prompt_lookup=3")
    assert route_uri(given) == "hf:/x?prompt_lookup=3"


class FakeOpenAI(BaseHTTPRequestHandler):
    """/v1/completions over the oracle; with `mixing`, a request arriving while another is in flight is mixed."""

    mixing = False
    in_flight: list = []
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ids = list(body["prompt"])
        with self.lock:
            others = list(self.in_flight)
            self.in_flight.append(ids)
        try:
            time.sleep(0.05)
            if self.mixing and others:
                from test_stressors_fakes import splice
                ids = list(splice(tuple(ids), tuple(others[0])))
            text = oracle_answer(TOK.decode(ids))
            out = TOK(text)["input_ids"] + [2]
            if self.path.endswith("/completion"):   # llama.cpp's native endpoint: ids only with return_tokens
                native = {"content": text, "stop_type": "eos"}
                data = json.dumps({**native, "tokens": out[:body["n_predict"]]} if body.get("return_tokens")
                                  else native).encode()
            else:
                data = json.dumps({"choices": [{"text": text, "token_ids": out[:body["max_tokens"]]}]}).encode()
        finally:
            with self.lock:
                self.in_flight.remove(list(body["prompt"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextmanager
def fake_server(mixing: bool) -> Iterator[str]:
    """The oracle served over HTTP (mixing or not) on a free port; yields http://127.0.0.1:PORT."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (FakeOpenAI,), {"mixing": mixing, "in_flight": []}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.parametrize("mixing, code", [(True, 1), (False, 0)])
def test_http_replay_script_needs_only_httpx(tmp_path, mixing, code):
    with fake_server(mixing) as root:
        spec = RouteSpec(name="candidate", kind="openai", model="fake", base_url=f"{root}/v1")
        script = replay_script(title="http mix", schedule=MINIMAL, workload=WORKLOAD, references=REFS, spec=spec,
                               max_tokens=64, repeats=2)
        assert "spec_route_suite" not in script and "import fixtures" not in script and "from fixtures" not in script
        done = run_script(tmp_path, script)
        assert done.returncode == code, done.stdout + done.stderr


@pytest.mark.parametrize("mixing, code", [(True, 1), (False, 0)])
def test_llama_cpp_replay_script_resends_the_adapters_native_request(tmp_path, mixing, code):
    """The script posts what LlamaCppRoute sent (/completion, n_predict, return_tokens), not an OpenAI body to a
    path llama.cpp answers in its own shape."""
    from spec_route_suite.routes.registry import build_route
    with fake_server(mixing) as root:
        spec = RouteSpec(name="candidate", kind="llama-cpp", model="fake", base_url=root)
        script = replay_script(title="llama mix", schedule=MINIMAL, workload=WORKLOAD, references=REFS, spec=spec,
                               max_tokens=64, repeats=2, wire=build_route(spec).wire_request)
        assert "/completion'" in script and "'n_predict': 64" in script and "spec_route_suite" not in script
        done = run_script(tmp_path, script)
        assert done.returncode == code, done.stdout + done.stderr
