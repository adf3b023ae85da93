"""A routes file's `[servers]` table, read once for every engine: the shared fields, the values' types, the
server each route's base_url points at.

Why its own module: an engine module validates its own fields with these, and a run that manages no server
reads none of the process code.
Environment: none read here.
"""
from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from spec_route_suite.routes.config_errors import Problems, unknown_keys
from spec_route_suite.routes.spec import ConfigError, RouteSpec
from spec_route_suite.servers.protocol import ManagedServer, ManagedServerSet, ServerError

def _loopback(host: str | None) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def servers_for_routes(server_set: ManagedServerSet, specs: Iterable[RouteSpec]) -> dict[str, ManagedServer]:
    """route name -> the managed server its base_url points at; ConfigError on a mismatch."""
    by_port = {s.port: s for s in server_set.servers}
    mapping: dict[str, ManagedServer] = {}
    for spec in specs:
        if not spec.http or not spec.base_url:
            continue
        parts = urlsplit(spec.base_url)
        server = by_port.get(parts.port or 0)
        if server is None or not _loopback(parts.hostname):
            continue
        if spec.model != server.served_model_name:
            raise ConfigError(f"{spec.name}.model", f"route asks for model {spec.model!r} but managed server "
                              f"{server.name!r} serves {server.served_model_name!r}")
        mapping[spec.name] = server
    if not mapping:
        raise ConfigError("servers.instances", "no route's base_url points at a managed server's loopback port")
    return mapping


@dataclass(frozen=True)
class ServerSetBase:
    """The fields and lookups every engine's ServerSet shares (engines add their runtime's home)."""

    servers: tuple[Any, ...]
    state_dir: Path = Path(".")
    startup_timeout_s: float = 300.0
    install: bool = False

    def by_name(self, names: Iterable[str] | None = None) -> list[Any]:
        return by_name(self.servers, names)

    def ensure_installed(self, problem: str | None, install: Callable[[], Any], hint: str) -> None:
        """Install the engine when it is missing and the table allows it (`install = true`), else say how."""
        if problem is None:
            return
        if not self.install:
            raise ServerError(f"{problem}; run: {hint}")
        install()


def by_name(servers: Sequence[Any], names: Iterable[str] | None) -> list[Any]:
    """The named servers of a set (all when names is None); ConfigError naming an unknown one."""
    if names is None:
        return list(servers)
    wanted = list(names)
    known = {s.name for s in servers}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ConfigError("servers.instances", f"no server named {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return [s for s in servers if s.name in wanted]


def check_ports(servers: Sequence[Any]) -> None:
    ports = [s.port for s in servers]
    if len(set(ports)) != len(ports):
        raise ConfigError("servers.instances", f"two servers share a port: {ports}")


# ---------------------------------------------------------------- [servers] table values
COMMON_FIELDS = {"managed", "model", "served_model_name", "startup_timeout_s", "install", "env", "extra_args",
                 "instances"}


@dataclass(frozen=True)
class TableHead:
    """What every engine's [servers] table has: the target model, its served name, the instances."""

    model: str
    served_model_name: str
    instances: tuple[tuple[str, Mapping[str, Any]], ...]


def table_head(table: Mapping[str, Any], *, engine: str, fields: Iterable[str], instance_fields: Iterable[str],
               base: Path, problems: Problems) -> TableHead:
    """Validate the shared part of `[servers]` (unknown fields, managed, model, instances) into `problems`, each
    unknown key with the closest known one; the instances kept are the tables, for the engine to read on."""
    allowed = set(instance_fields) | {"port", "extra_args"}
    for error in unknown_keys("servers", table, COMMON_FIELDS | set(fields)):
        problems.add(error)
    with problems.field():
        if table.get("managed") != engine:
            raise ConfigError("servers.managed", f"expected \"{engine}\", got {table.get('managed')!r}")
    model = served = ""
    with problems.field():
        model = model_dir(table.get("model"), "servers.model", base)
    with problems.field():
        served = table.get("served_model_name", Path(model).name if model else "")
        if not isinstance(served, str) or not served:
            raise ConfigError("servers.served_model_name", "expected a non-empty string")
    instances = table.get("instances")
    if not isinstance(instances, Mapping) or not instances:
        problems.add(ConfigError("servers.instances", "expected [servers.instances.NAME] tables with a port"))
        instances = {}
    for name, inst in instances.items():
        where = f"servers.instances.{name}"
        if not isinstance(inst, Mapping):
            problems.add(ConfigError(where, "expected a table"))
            continue
        for error in unknown_keys(where, inst, allowed):
            problems.add(error)
    return TableHead(model=model, served_model_name=served,
                     instances=tuple((name, inst) for name, inst in instances.items() if isinstance(inst, Mapping)))


def read_servers_table(routes_file: Path | str) -> tuple[Mapping[str, Any], Path]:
    """The `[servers]` table of a routes file and the folder its relative paths resolve against."""
    path = Path(routes_file).expanduser().resolve()
    try:
        table = tomllib.loads(path.read_text()).get("servers")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError("routes", f"cannot read {path}: {exc}") from None
    if not table:
        raise ConfigError("servers", f"{path} has no [servers] table")
    return table, path.parent


def route_servers(routes_file: Path, server_set: Any, repo_root: Path) -> dict[str, Any]:
    """route name -> the managed server of `server_set` its base_url points at."""
    from spec_route_suite.routes.spec import load_routes_file
    routes = load_routes_file(str(routes_file), base=repo_root)
    return servers_for_routes(server_set, (routes.baseline, *routes.candidates))


def model_dir(value: Any, name: str, base: Path) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(name, f"expected a model directory, got {value!r}")
    path = Path(value).expanduser()
    path = (path if path.is_absolute() else base / path).resolve()
    if not (path / "config.json").exists():
        raise ConfigError(name, f"no model (config.json) in {path}")
    return str(path)


def positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(name, f"expected a positive integer, got {value!r}")
    return value


def port_number(value: Any, name: str) -> int:
    port = positive_int(value, name)
    if not 1024 <= port <= 65535:
        raise ConfigError(name, f"expected a port in 1024..65535, got {port}")
    return port


VERSION_ENV = "SPEC_SUITE_ENGINE_VERSION"   # wins over [servers] version (scripts/nightly.sh judges two releases)


def table_version(table: Mapping[str, Any], pinned: str) -> str:
    """The engine release a [servers] table runs: $SPEC_SUITE_ENGINE_VERSION, else its `version`, else the pinned."""
    return release(os.environ.get(VERSION_ENV) or table.get("version", pinned), "servers.version")


def release(value: Any, name: str) -> str:
    """A release number on the package registry (`0.3.35`), as a routes file's [servers] version gives it."""
    if not isinstance(value, str) or not re.fullmatch(r"\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?", value):
        raise ConfigError(name, f"expected a release number such as \"0.3.35\", got {value!r}")
    return value


def str_table(value: Any, name: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(name, "expected a table of strings")
    return {str(k): str(v) for k, v in value.items()}


def str_list(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(name, "expected a list of strings")
    return tuple(value)
