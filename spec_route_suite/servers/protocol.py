"""What every managed engine shares as types: its servers, its server set, the log it writes, the error it raises.

Why its own module: the table, the processes, the start-up and the CLI all name these; none of them owns them.
Environment: none read here.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

class ServerError(RuntimeError):
    """A server could not be installed, started or kept healthy (a harness problem, not a finding)."""


Log = Callable[[str], None]


def stderr_log(prefix: str) -> Log:
    def log(message: str) -> None:
        print(f"[{prefix}] {message}", file=sys.stderr, flush=True)
    return log



class ManagedServer(Protocol):
    """One server of a set: where it listens and how it is launched."""

    name: str
    port: int
    host: str
    served_model_name: str
    env: tuple[tuple[str, str], ...]

    @property
    def base_url(self) -> str: ...

    def command(self, runtime: Path) -> list[str]: ...

    def fingerprint(self, runtime: Path) -> str: ...

    def speculative(self) -> dict[str, Any] | None: ...


class ManagedServerSet(Protocol):
    """A validated `[servers]` table: what to start, the engine's runtime, where state lives."""

    servers: tuple[Any, ...]
    state_dir: Path
    startup_timeout_s: float
    install: bool

    def by_name(self, names: Iterable[str] | None = None) -> list[Any]: ...

    def prepare(self, log: Log) -> Path: ...

    def launch_env(self, runtime: Path) -> dict[str, str | None]: ...
