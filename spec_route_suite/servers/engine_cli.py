"""The commands every engine module shares (install, start, stop, status, judge), with the engine's own added.
Environment: none read here.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from spec_route_suite.routes.spec import ConfigError
from spec_route_suite.servers.protocol import Log, ServerError
from spec_route_suite.servers.managed import start, status, stop
from spec_route_suite.servers.run_judgement import judge_run, print_judgement

# ---------------------------------------------------------------- CLI shared by the engine modules
@dataclass(frozen=True)
class EngineCli:
    """What an engine module plugs into the shared commands (install, start, stop, status, judge)."""

    prog: str
    description: str
    preset: Path
    install: Callable[[Path], Any]    # the routes file whose [servers] table names the release to install
    load_server_set: Callable[[Path], Any]
    default_state_dir: Callable[[], Path]
    servers_file: str
    log: Log


def cli_parser(cli: EngineCli) -> tuple[Any, Any]:
    """The argument parser with the shared commands; the engine adds its own to the returned subparsers."""
    import argparse
    parser = argparse.ArgumentParser(prog=cli.prog, description=cli.description)
    parser.add_argument("--routes", default=str(cli.preset), help="routes file with the [servers] table")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="make the engine runnable when it is not (idempotent): the release the routes "
                                   "file's [servers] version names, else the pinned one")
    p_start = sub.add_parser("start", help="start (or reuse) the servers, wait for /health")
    p_start.add_argument("--only", help="comma-separated server names (default: all)")
    p_start.add_argument("--timeout", type=float, help="start-up timeout in seconds")
    p_stop = sub.add_parser("stop", help="stop the servers of the routes file (another file's servers, started by "
                                         "another run or user in the same state dir, keep running)")
    p_stop.add_argument("--only", help="comma-separated server names (default: the routes file's)")
    p_stop.add_argument("--all", action="store_true", help="every server recorded in the state dir")
    sub.add_parser("status", help="print the servers' state as JSON")
    p_judge = sub.add_parser("judge", help="harness errors of a finished run (exit 0 none, 1 some)")
    p_judge.add_argument("--report-dir", required=True)
    p_judge.add_argument("--exit-code", type=int, required=True)
    return parser, sub


def routes_file_servers(cli: EngineCli, routes_file: Path) -> list[str]:
    """The server names a routes file's [servers] table declares (what a bare `stop` stops)."""
    return [server.name for server in cli.load_server_set(routes_file).servers]


def run_cli(cli: EngineCli, args: Any, extra: Callable[[Any, Path], int | None]) -> int:
    """Run a parsed command: the shared ones here, the engine's own through `extra`; errors exit 2."""
    import dataclasses
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run `finally` / failure cleanup on TERM too
    routes_file = Path(args.routes).expanduser().resolve()
    only = args.only.split(",") if getattr(args, "only", None) else None
    try:
        if args.command == "install":
            cli.install(routes_file)
        elif args.command == "start":
            server_set = cli.load_server_set(routes_file)
            if args.timeout:
                server_set = dataclasses.replace(server_set, startup_timeout_s=args.timeout)
            started = time.monotonic()
            outcome = start(server_set, only, origin="cli", log=cli.log)
            print(json.dumps({"servers": outcome, "seconds": round(time.monotonic() - started, 1)}))
        elif args.command == "stop":
            stop(cli.default_state_dir(), None if args.all else only or routes_file_servers(cli, routes_file),
                 log=cli.log)
        elif args.command == "status":
            # without a routes file: every server this machine's state folder knows; a bad one is its errors
            server_set = cli.load_server_set(routes_file) if routes_file.exists() else None
            print(json.dumps(status(server_set.state_dir if server_set else cli.default_state_dir(), server_set),
                             indent=2))
        elif args.command == "judge":
            result = judge_run(Path(args.report_dir), args.exit_code, cli.servers_file)
            print_judgement(result)
            return 0 if result["ok"] else 1
        else:
            return extra(args, routes_file) or 0
    except (ServerError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
