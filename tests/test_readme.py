"""The README is for users: short, its sections where a user looks for them, its own-server example true.

Why: the README is what a person reads to use the suite (history and internals live in docs/). Its example of
qualifying your own server is copied into shells verbatim, so it is run here verbatim against the in-process
servers it starts itself (with a test selection appended to its last line, to keep this self-test short).
Environment: needs ports 8000 and 8001 free (the README's own ports).
"""
from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SECTIONS = ("## Three commands", "## Qualify your own server", "## The verdict", "## What a run leaves",
            "## Filing upstream", "## Nightly runs", "## Real engines on this machine", "## What it checks")
SELECTION = " -k test_greedy_matches_baseline --prompt-limit 1 --categories math"


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def own_server_example() -> str:
    [block] = [b for b in bash_blocks(README) if "servers.inprocess" in b and "--baseline" in b]
    return block


def test_the_readme_is_short_and_has_the_users_sections():
    assert len(README.splitlines()) < 250
    for section in SECTIONS:
        assert section in README, section
    assert README.index("## Three commands") < README.index("## Qualify your own server") < README.index("## The verdict")


def test_every_document_the_readme_names_exists():
    named = set(re.findall(r"docs/[\w./-]+\.md", README))
    assert named and [n for n in named if not (ROOT / n).is_file()] == []


def test_the_readme_route_uris_are_quoted_and_name_their_tokenizer():
    """An unquoted `&` backgrounds the command in bash; a server route without a tokenizer is refused."""
    for block in bash_blocks(README):
        for uri in re.findall(r"(?:openai|llama-cpp|sglang):http\S+", block):
            assert uri.startswith(("openai:", "llama-cpp:", "sglang:"))
            assert "tokenizer=" in uri, uri
        for line in block.splitlines():
            if "&" in line and "?" in line:
                assert re.search(r"'[\w-]+:[^']*&[^']*'", line), f"unquoted & in: {line}"


def test_the_own_server_example_runs_verbatim(tmp_path):
    for port in (8000, 8001):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                pytest.fail(f"port {port} is taken: the README's example needs it")
    block = own_server_example().rstrip("\n") + SELECTION + "\n"
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null' EXIT\n" + block
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "spec-route-suite verdict" in done.stdout
    assert re.search(r"spec-route-suite candidate 'candidate': openai http://127\.0\.0\.1:8001/v1 model tiny, vllm",
                     done.stdout), done.stdout[:3000]
