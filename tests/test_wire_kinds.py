"""Wire kinds: one adapter module and one row of kinds.BUILT_IN, read without importing the adapter.

Why: a wire used to be spelled in branches of the routes-file parser, the managed servers' engine table, the issue
templates (as "llama.cpp" and "llama-cpp") and two script parsers. Now its row is the one place: parsing a routes
file reads it without importing the adapter (the hf and reference adapters load torch, which a configuration
error must not wait for), building a route imports the "module:Class" it names, and a kind in any other module
registers with `@wire_kind` by being imported.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib import import_module
from pathlib import Path

import pytest

from spec_route_suite.reports.issue_templates import TEMPLATES
from spec_route_suite.reports.repro import engine_of
from spec_route_suite.routes import flavours, kinds
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import TABLE_READERS, ConfigError, parse_route_uri, spec_from_table
from spec_route_suite.servers import managed_engines

ROOT = Path(__file__).resolve().parent.parent
IN_PROCESS_ENGINES = {"transformers", "reference"}   # engines no server flavour describes: they run in the worker


def test_parsing_every_kind_never_imports_torch():
    """Measured in a fresh interpreter: the test process has torch loaded already."""
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from spec_route_suite.routes.spec import parse_route_uri
        from spec_route_suite.routes.kinds import route_kinds
        for uri in ("hf:{ROOT}/fixtures/models/target", "reference:", "openai:http://127.0.0.1:9/v1?model=m&tokenizer=fixtures/models/target",
                    "sglang:http://127.0.0.1:9?model=m&tokenizer=fixtures/models/target", "llama-cpp:http://127.0.0.1:9?model=m&tokenizer=fixtures/models/target"):
            parse_route_uri("c", uri, base=Path("."))
        assert set(route_kinds()) == {{"hf", "reference", "openai", "sglang", "llama-cpp"}}, route_kinds()
        print(sorted(m for m in ("torch", "transformers", "numpy") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_each_built_in_kind_names_an_adapter_class_of_its_own():
    """Each row's "module:Class" is an adapter class (it generates), one kind per class, and no module of the package registers a
    kind a second way (the decorator is for plugins)."""
    declared = kinds.route_kinds()
    assert len({k.adapter for k in declared.values()}) == len(declared)
    for name, kind in declared.items():
        module, _, cls = kind.adapter.partition(":")
        adapter = getattr(import_module(module), cls)
        assert isinstance(adapter, type) and callable(getattr(adapter, "generate", None)), kind
        assert kinds.route_kinds()[name] == kind and kind.table in kinds.TABLES
    assert set(declared) == {kind.name for kind in kinds.BUILT_IN}
    package = Path(kinds.__file__).resolve().parent.parent
    decorated = [p.name for p in package.rglob("*.py")
                 if any(line.startswith("@wire_kind(") for line in p.read_text().splitlines())]
    assert decorated == []


def test_every_routes_table_a_kind_may_name_has_its_reader():
    assert set(TABLE_READERS) == set(kinds.TABLES)


def test_a_kind_from_any_module_registers_by_its_decorator(tmp_path, monkeypatch):
    (tmp_path / "toy_wire.py").write_text(textwrap.dedent('''
        from spec_route_suite.routes.kinds import wire_kind
        from spec_route_suite.routes.wire.openai import OpenAIRoute

        @wire_kind("toy-wire", engine="toy-engine", table="server", summary="a toy wire over OpenAI's")
        class ToyWireRoute(OpenAIRoute):
            pass
    '''))
    monkeypatch.setattr(kinds, "_REGISTERED", {})
    monkeypatch.syspath_prepend(str(tmp_path))
    uri = "toy-wire:http://127.0.0.1:9/v1?model=m&tokenizer=fixtures/models/target"
    with pytest.raises(ConfigError, match="unknown route kind 'toy-wire'"):
        parse_route_uri("candidate", uri, base=ROOT)
    import_module("toy_wire")
    try:
        spec = parse_route_uri("candidate", uri, base=ROOT)
        assert spec.http and spec.base_url == "http://127.0.0.1:9/v1"
        assert type(build_route(spec)).__name__ == "ToyWireRoute"
        assert engine_of({"config": {"candidates": [spec.public_dict()]}}, "candidate") == "toy-engine"
    finally:
        sys.modules.pop("toy_wire", None)


def test_a_kind_registered_twice_is_refused(monkeypatch):
    monkeypatch.setattr(kinds, "_REGISTERED", {})
    with pytest.raises(ValueError, match="registered twice"):
        kinds.wire_kind("openai", engine="x", table="server", summary="another openai")(type("Other", (), {}))
    with pytest.raises(ValueError, match="table must be one of"):
        kinds.wire_kind("x", engine="x", table="nowhere", summary="x")


def test_an_engine_has_one_spelling():
    """Kinds name the engine as its flavour does (llama.cpp, not llama-cpp); so do the issue templates, and a
    route without an inventory is named by its kind's engine."""
    flavour_engines = {f.engine for f in flavours.registered().values()}
    assert {k.engine for k in kinds.route_kinds().values()} - {None} <= flavour_engines | IN_PROCESS_ENGINES
    assert set(TEMPLATES) <= flavour_engines
    spec = spec_from_table("c", {"kind": "llama-cpp", "base_url": "http://127.0.0.1:9", "model": "m",
                                 "tokenizer": str(ROOT / "fixtures/models/target")}, base=ROOT)
    assert engine_of({"config": {"candidates": [spec.public_dict()]}}, "c") == "llama.cpp"
    assert engine_of({"inventories": {"c": {"engine": "vllm"}}, "config": {"candidates": [spec.public_dict()]}},
                     "c") == "vllm"
    any_engine = {**spec.public_dict(), "kind": "openai"}   # a wire any engine may serve names no engine
    assert engine_of({"config": {"candidates": [any_engine]}}, "c") == "openai"


def test_each_managed_server_module_declares_its_name():
    engines = managed_engines()
    assert set(engines) == {"vllm-cpu", "llama-cpp"}
    for name, module in engines.items():
        assert import_module(module).MANAGED == name
