"""The processes a managed server runs as, found by the token in their environment, and the HTTP probes that
say whether it serves.

Why by token: `stop` must kill exactly the processes this tool started (the server and its children), never a
server a person started on the same port.
Environment: none read here.
"""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping

from spec_route_suite.servers.protocol import ManagedServer

TOKEN_ENV = "SPEC_SUITE_SERVER_TOKEN"
STOP_GRACE_S = 20.0
LOG_TAIL_LINES = 40


# ---------------------------------------------------------------- processes (exactly ours)
def _proc_environ_has(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def processes_with_token(token: str) -> list[int]:
    """Every live process carrying our token in its environment (a server and all its children)."""
    marker = f"{TOKEN_ENV}={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and _proc_environ_has(int(entry.name), marker):
            if not is_zombie(int(entry.name)):
                pids.append(int(entry.name))
    return sorted(pids)


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def process_stat(pid: int) -> tuple[int, int] | None:
    """(process group, start time in clock ticks) of a live, non-zombie process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else (int(fields[2]), int(fields[19]))


def server_processes(record: Mapping[str, Any]) -> list[int]:
    """Every live process of one launched server: tagged with its token, or in its process group.

    vLLM renames its EngineCore/Worker processes with setproctitle, which can overwrite the
    environment block /proc shows, so the token alone can miss them; the process group (the
    server was started as a session leader) catches those. A group member must have started no
    earlier than the leader, so a recycled group id never matches someone else's processes.
    """
    pids = set(processes_with_token(record["token"])) if record.get("token") else set()
    pgid, leader_start = record.get("pgid"), record.get("starttime")
    if pgid and leader_start is not None:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                stat = process_stat(int(entry.name))
                if stat and stat[0] == pgid and stat[1] >= leader_start:
                    pids.add(int(entry.name))
    return sorted(pids)


def kill_server(record: Mapping[str, Any], *, grace_s: float = STOP_GRACE_S) -> list[int]:
    """SIGTERM every process of the server, SIGKILL what is left after `grace_s`; returns the pids."""
    pids = server_processes(record)
    if not pids:
        return []
    _signal(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and server_processes(record):
        time.sleep(0.5)
    _signal(server_processes(record), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and server_processes(record):
        time.sleep(0.2)
    return pids


# ---------------------------------------------------------------- HTTP probes
def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    """(status, body); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError, ValueError):
        return 0, ""


def serves(server: ManagedServer, timeout_s: float = 5.0) -> bool:
    """Healthy and serving the expected model name."""
    status, _ = http_get(f"{server.base_url}/health", timeout_s)
    if status != 200:
        return False
    status, body = http_get(f"{server.base_url}/v1/models", timeout_s)
    try:
        names = [m.get("id") for m in json.loads(body).get("data", [])] if status == 200 else []
    except (ValueError, AttributeError):
        names = []
    return server.served_model_name in names


def port_in_use(server: ManagedServer) -> bool:
    import socket
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((server.host, server.port)) == 0


def log_tail(path: str | Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
