"""The server's environment and the client's, kept apart, and the server's log, for an issue file.

Why: an issue's environment is the server's: its engine, version, model, flags and hardware. The suite runs on the
client, which is often another machine; printing the client's OS as the environment (what the issue files did)
misleads a maintainer. So the server is described only by what it states about itself (the run's inventory) and
by the command line the suite started it with, "unknown" where neither says; its OS and hardware are the client's
only when the suite started it (managed servers listen on loopback, on the client's machine). The client is its
own block (the suite's version, Python, OS). A managed server's log tail (servers/__init__.py RUN_LOG_LINES, read
at the run's end) is attached; for any other server the issue asks for its log over the run's span.
Environment: none.
"""
from __future__ import annotations

import json
import time
from typing import Any

from spec_route_suite.reports.issue_templates import CHECK, fence

UNKNOWN = "unknown"
LOG_CHARS, LOG_LINE_CHARS = 8_000, 300


def route_spec(report: dict[str, Any], name: str) -> dict[str, Any]:
    config = report.get("config") or {}
    return next((c for c in [*config.get("candidates", []), config.get("baseline") or {}] if c.get("name") == name),
                {})


def launch_of(report: dict[str, Any], name: str) -> dict[str, Any]:
    """How the suite started the route's server ({} when it did not: a server started outside the suite)."""
    launch = (report.get("server_launch") or {}).get(name)
    return launch if isinstance(launch, dict) else {}


def _stated(value: Any) -> str:
    text = "" if value is None else str(value).strip()
    return UNKNOWN if not text or text.lower().startswith(UNKNOWN) or text == "?" else text


def server_lines(report: dict[str, Any], name: str) -> list[str]:
    """The route's server as its inventory states it, one fact a line, "unknown" where it states nothing; its
    host, known only when the suite started it."""
    inventory = (report.get("inventories") or {}).get(name) or {}
    spec = route_spec(report, name)
    speculation = inventory.get("speculation") or {}
    lines = [f"route: {name} ({spec.get('kind', UNKNOWN)}: {spec.get('base_url') or spec.get('model') or UNKNOWN})",
             f"engine: {_stated(inventory.get('engine'))}", f"version: {_stated(inventory.get('version'))}",
             *([f"release: {inventory['release']} (the suite built the server from it)"]
               if inventory.get("release") else []),
             f"model: {_stated(inventory.get('model'))}",
             *([f"draft: {inventory['draft']}"] if inventory.get("draft") else []),
             *([f"speculation: {json.dumps(speculation, sort_keys=True)}"] if speculation else []),
             f"dtype: {_stated(inventory.get('dtype'))}", f"max_model_len: {_stated(inventory.get('max_model_len'))}",
             f"hardware: {_stated(inventory.get('hardware'))}"]
    return lines + [f"host: {host(report, name)}"]


def host(report: dict[str, Any], name: str) -> str:
    launch = launch_of(report, name)
    if launch:
        client = report.get("client") or {}
        return (f"the client's machine below (the suite started this server on it: {launch.get('start') or 'managed'}"
                f"; {client.get('os', UNKNOWN)})")
    return f"{UNKNOWN}: the suite did not start this server ({CHECK}: the server host's OS and hardware)"


def client_lines(report: dict[str, Any]) -> list[str]:
    client = report.get("client") or {}
    return [f"spec-route-suite {report.get('suite_version', UNKNOWN)}, Python {client.get('python', UNKNOWN)}",
            f"os: {client.get('os', UNKNOWN)}", f"cpu: {client.get('cpu', UNKNOWN)}"]


def environment(report: dict[str, Any], route: str, baseline: str | None) -> str:
    """The candidate's server, the baseline's (the control), and the client, apart."""
    parts = [f"server of the candidate `{route}` (what it states about itself; unknown where it states nothing):",
             *server_lines(report, route)]
    if baseline:
        parts += ["", f"server of the baseline `{baseline}` (the control, without speculation):",
                  *server_lines(report, baseline)]
    return "\n".join([*parts, "", "client (the machine that ran the suite, not the server's unless the suite started "
                                  "it):", *client_lines(report)])


def server_os(report: dict[str, Any], name: str) -> str:
    if launch_of(report, name):
        return (f"{(report.get('client') or {}).get('system') or UNKNOWN} (the suite started the server on the "
                f"machine it ran on)")
    return f"{UNKNOWN}: the suite did not start this server ({CHECK})"


def server_hardware(report: dict[str, Any], name: str) -> str:
    stated = _stated(((report.get("inventories") or {}).get(name) or {}).get("hardware"))
    if stated != UNKNOWN:
        return stated
    if launch_of(report, name):
        return f"{(report.get('client') or {}).get('cpu') or UNKNOWN} (the machine the suite started the server on)"
    return f"{UNKNOWN}: the server does not state it ({CHECK})"


def server_version(report: dict[str, Any], name: str) -> str:
    stated = _stated(((report.get("inventories") or {}).get(name) or {}).get("version"))
    return stated if stated != UNKNOWN else f"{UNKNOWN}: the server did not state its version ({CHECK}: its --version)"


def models(report: dict[str, Any], name: str) -> str:
    inventory = (report.get("inventories") or {}).get(name) or {}
    draft = f"; draft: {inventory['draft']}" if inventory.get("draft") else ""
    speculation = inventory.get("speculation") or {}
    return (f"target: {_stated(inventory.get('model'))}{draft}"
            + (f"; speculation: {json.dumps(speculation, sort_keys=True)}" if speculation else ""))


def log_section(report: dict[str, Any], name: str) -> str:
    """The tail of the managed server's log, or what to attach instead."""
    launch = launch_of(report, name)
    tail = launch.get("log_tail")
    if tail:
        lines = [line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS] + " ..." for line in tail.splitlines()]
        text = "\n".join(lines)[-LOG_CHARS:]
        return (f"<details>\n<summary>The last {len(lines)} lines of the server's log at the end of the run (the suite "
                f"started this server: {launch.get('start') or 'managed'})</summary>\n\n{fence(text, 'shell')}\n"
                f"</details>")
    if launch:
        return "(the suite started this server but could not read its log)"
    span = " to ".join(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(report[k]))
                       for k in ("started_unix", "finished_unix") if isinstance(report.get(k), (int, float)))
    return (f"The suite did not start this server, so it holds no log of it ({CHECK}: attach the server's log"
            + (f" from {span}, the run's span)" if span else ")"))
