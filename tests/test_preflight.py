"""The preflight's verdicts on one route, against real HTTP servers: a server that accepts connections and
answers nothing, a model name the server does not serve, and a local tokenizer of another size.

Why: each is a user's configuration mistake that must end the run before its first check with one line that
says what is wrong in the user's terms (the model names the server lists, the two token counts), and in
seconds, not after the routes' request timeouts.
Environment: none (in-process servers of the embedded pairs).
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest

from spec_route_suite import preflight
from spec_route_suite.routes.spec import parse_route_uri
from spec_route_suite.servers.inprocess import build_engine, make_server

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "fixtures" / "models" / "target"
PAIR2_TARGET = ROOT / "fixtures" / "models" / "pair2" / "target"


@pytest.fixture(scope="module")
def target_server():
    """An in-process server of the embedded target (its tokenizer has 512 ids), serving model 'tiny'."""
    engine = build_engine(f"reference:{TARGET}", model_name="tiny", base=ROOT)
    httpd = make_server(engine)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    engine.close()


def check(uri: str):
    return asyncio.run(preflight.check_route(parse_route_uri("candidate", uri, base=ROOT)))


def test_a_server_that_accepts_and_never_answers_fails_at_the_deadline_not_the_request_timeout(monkeypatch):
    monkeypatch.setattr(preflight, "DEADLINE_S", 1.0)
    with socket.socket() as silent:   # listens (connects succeed) and never reads nor answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        seen = check(f"openai:http://127.0.0.1:{silent.getsockname()[1]}/v1?model=tiny&tokenizer={TARGET}")
        elapsed = time.monotonic() - started
    assert elapsed < 5, f"{elapsed:.1f}s: the 120 s request timeout was waited for"
    assert seen.problem.startswith("no answer within 1 s (the server accepts connections but does not answer"), seen


def test_a_model_name_the_server_does_not_serve_names_what_it_serves(target_server):
    seen = check(f"openai:{target_server}?model=qwen&tokenizer={TARGET}")
    assert seen.problem == "the server does not serve model 'qwen' (it lists tiny)"
    assert seen.line().startswith(f"route 'candidate' (openai {target_server}, model qwen): ")


def test_a_tokenizer_of_another_size_is_named_with_the_counts_not_a_failed_request(target_server):
    """Pair 2's tokenizer has 1,024 ids against the server's 512: its ids would fail a request before the
    counts were compared, so the counts come first."""
    seen = check(f"openai:{target_server}?model=tiny&tokenizer={PAIR2_TARGET}")
    assert seen.problem.startswith(f"the local tokenizer ({PAIR2_TARGET}, 1024 ids) is not the server's: 3 text "
                                   f"prompts count "), seen.problem
    assert "one-token request" not in seen.problem


def test_the_servers_own_tokenizer_passes_and_says_so(target_server):
    seen = check(f"openai:{target_server}?model=tiny&tokenizer={TARGET}")
    assert seen.passed, seen.problem
    assert seen.notes[0].startswith("tokenizer matches the server's on 3 text prompts"), seen.notes


@pytest.mark.parametrize("server, local, specials, agree", [
    ((68, 48, 64), (68, 48, 64), {0}, True),     # the same tokenizer
    ((69, 49, 65), (68, 48, 64), {0}, True),     # the server adds a BOS the local tokenizer does not
    ((70, 50, 66), (68, 48, 64), {2}, True),     # the local tokenizer's own two special tokens
    ((70, 50, 66), (68, 48, 64), {0}, False),    # a constant offset no special token explains
    ((69, 48, 64), (68, 48, 64), {0, 1}, False),  # varying offsets: another tokenizer
])
def test_counts_agree_up_to_the_special_tokens_only(server, local, specials, agree):
    assert preflight.counts_agree(server, local, specials) is agree
