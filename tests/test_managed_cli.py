"""The managed-server tools' `stop`: a routes file's servers only, unless --all. Several runs and users share one
state dir (a user's DFlash servers beside a CI stage's presets); a bare `stop --routes A` once stopped them all."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from spec_route_suite.servers import engine_cli


@pytest.fixture
def stopped(monkeypatch):
    calls = []
    monkeypatch.setattr(engine_cli, "stop", lambda state_dir, names=None, **kw: calls.append(names) or [])
    return calls


def cli() -> engine_cli.EngineCli:
    servers = SimpleNamespace(servers=(SimpleNamespace(name="p3_ar"), SimpleNamespace(name="p3_dflash")))
    return engine_cli.EngineCli(prog="t", description="t", preset=Path("routes.toml"), install=lambda: None,
                             load_server_set=lambda path: servers, default_state_dir=lambda: Path("/nonexistent"),
                             servers_file="s.json", log=lambda _: None)


@pytest.mark.parametrize("argv, names", [
    (["stop"], ["p3_ar", "p3_dflash"]),                 # the routes file's servers
    (["stop", "--only", "p3_ar"], ["p3_ar"]),
    (["stop", "--all"], None),                          # every recorded server: asked for by name
])
def test_stop_stops_the_routes_files_servers_unless_told_all(stopped, argv, names):
    engine = cli()
    parser, _ = engine_cli.cli_parser(engine)
    assert engine_cli.run_cli(engine, parser.parse_args(["--routes", "routes.toml", *argv]), lambda *a: 0) == 0
    assert stopped == [names]
