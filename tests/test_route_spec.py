"""Route configuration: every bad value names its field; secrets never leak into reports."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spec_route_suite.config import suite_config_from_options
from spec_route_suite.routes.spec import (EMBEDDED_MODELS, ConfigError, load_routes_file, parse_route_uri,
                                  spec_from_table)

ROOT = Path(__file__).resolve().parent.parent
TARGET = str(EMBEDDED_MODELS / "target")


def field_of(excinfo: pytest.ExceptionInfo) -> str:
    return excinfo.value.field


def test_hf_uri_with_draft_parses_into_frozen_spec():
    spec = parse_route_uri("candidate", f"hf:{TARGET}?draft={EMBEDDED_MODELS / 'draft'}&num_assistant_tokens=3",
                           base=ROOT, environ={})
    assert (spec.kind, spec.num_assistant_tokens, spec.speculative) == ("hf", 3, True)
    with pytest.raises(AttributeError):
        spec.kind = "openai"  # type: ignore[misc]


def test_prompt_lookup_and_openai_uris_parse():
    lookup = parse_route_uri("candidate", f"hf:{TARGET}?prompt_lookup=3", base=ROOT, environ={})
    assert lookup.prompt_lookup == 3 and lookup.speculative
    server = parse_route_uri("baseline", "openai:http://127.0.0.1:8000/v1?model=tiny&tokenizer=fixtures/models/target&timeout=7", base=ROOT, environ={})
    assert (server.base_url, server.model, server.timeouts.request_s) == ("http://127.0.0.1:8000/v1", "tiny", 7.0)


def test_the_uri_and_the_toml_table_take_the_same_keys():
    """A URI's query is a route table's keys, dotted keys included; a table takes a URI's shorthands (an option
    at the top, `timeout`): either form of one route parses into the same route."""
    uri = parse_route_uri("candidate", "openai:http://127.0.0.1:8000/v1?model=tiny&tokenizer=fixtures/models/target"
                          "&num_speculative_tokens=7&options.method=eagle3&timeout=30&timeouts.connect=2"
                          "&headers.X-Team=serving&max_context=512", base=ROOT, environ={})
    dotted = spec_from_table("candidate", {
        "kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "tiny", "tokenizer": "fixtures/models/target",
        "options": {"num_speculative_tokens": "7", "method": "eagle3"}, "timeouts": {"request": 30, "connect": 2},
        "headers": {"X-Team": "serving"}, "max_context": 512}, base=ROOT, environ={})
    flat = spec_from_table("candidate", {
        "kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "tiny", "tokenizer": "fixtures/models/target",
        "num_speculative_tokens": "7", "options": {"method": "eagle3"}, "timeout": 30, "connect_timeout": 2,
        "headers": {"X-Team": "serving"}, "max_context": 512}, base=ROOT, environ={})
    assert uri.public_dict() == dotted.public_dict() == flat.public_dict()
    assert dict(uri.options) == {"num_speculative_tokens": "7", "method": "eagle3"}
    assert uri.headers == (("X-Team", "serving"),) and uri.timeouts.connect_s == 2.0


@pytest.mark.parametrize("query, message", [
    ("kind=vllm", "candidate.kind: the URI states its kind itself"),
    ("options.num_speculative_token=7", "candidate.options.num_speculative_token: unknown option of a openai route "
                                        "(did you mean num_speculative_tokens?)"),
    ("timeouts.requst=5", "candidate.timeouts.requst: unknown field (expected connect, request)"),
    ("num_speculativ_tokens=7", "candidate.num_speculativ_tokens: unknown route key (did you mean "
                                "num_speculative_tokens?)"),
])
def test_a_uri_refuses_what_a_table_refuses(query, message):
    with pytest.raises(ConfigError) as excinfo:
        parse_route_uri("candidate", f"openai:http://127.0.0.1:8000/v1?model=tiny&tokenizer=fixtures/models/target&"
                                     f"{query}", base=ROOT, environ={})
    assert message in str(excinfo.value), str(excinfo.value)


@pytest.mark.parametrize("uri, field", [
    ("nosuchkind:x", "candidate.kind"),
    ("no-prefix-at-all", "candidate.kind"),
    ("hf:/no/such/model/dir", "candidate.model"),
    (f"hf:{TARGET}?draft=/no/such/draft", "candidate.draft"),
    (f"hf:{TARGET}?num_assistant_tokens=4", "candidate.num_assistant_tokens"),
    (f"hf:{TARGET}?draft={TARGET}&num_assistant_tokens=zero", "candidate.num_assistant_tokens"),
    (f"hf:{TARGET}?prompt_lookup=-1", "candidate.prompt_lookup"),
    ("openai:ftp://127.0.0.1/v1?model=m&tokenizer=fixtures/models/target", "candidate.base_url"),
    ("openai:http://127.0.0.1:notaport/v1?model=m&tokenizer=fixtures/models/target", "candidate.base_url"),
    ("openai:http://127.0.0.1:8000/v1?tokenizer=fixtures/models/target", "candidate.model"),
    ("openai:http://127.0.0.1:8000/v1?model=m&tokenizer=/no/such/tok", "candidate.tokenizer"),
    ("openai:http://127.0.0.1:8000/v1?model=m&tokenizer=fixtures/models/target&api_key_env=SPEC_SUITE_UNSET_KEY", "candidate.api_key_env"),
    ("openai:http://127.0.0.1:8000/v1?model=m&tokenizer=fixtures/models/target&timeout=0", "candidate.timeouts.request"),
])
def test_bad_uri_names_the_field(uri, field):
    with pytest.raises(ConfigError) as excinfo:
        parse_route_uri("candidate", uri, base=ROOT, environ={})
    assert field_of(excinfo) == field
    assert str(excinfo.value).startswith(field + ":")


def test_server_table_requires_a_tokenizer():
    with pytest.raises(ConfigError) as excinfo:
        spec_from_table("candidate", {"kind": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m"},
                        base=ROOT, environ={})
    assert field_of(excinfo) == "candidate.tokenizer"


@pytest.mark.parametrize("body, field", [
    ("[baseline]\nkind = 'hf'\nmodel = '%s'\n" % TARGET, "candidate"),
    ("[candidate]\nkind = 'hf'\nmodel = '%s'\n" % TARGET, "baseline"),
    ("[baseline]\nkind = 'hf'\nmodel = '%s'\nbogus = 1\n[candidate]\nkind='hf'\nmodel='%s'\n" % (TARGET, TARGET),
     "baseline.bogus"),
    ("[baseline]\nkind = 'hf'\nmodel = '%s'\n[candidates.fast]\nkind = 'openai'\nbase_url = 'http://h:1/v1'\n"
     "model = 'm'\ntokenizer = '%s'\ntimeouts = {request = 'soon'}\n" % (TARGET, TARGET), "candidates.fast.timeouts.request"),
    ("[baseline]\nkind = 'hf'\nmodel = '%s'\n[candidate]\nkind = 'hf'\nmodel = '%s'\n[extra]\n" % (TARGET, TARGET), "extra"),
    ("this is = = not toml", "routes"),
])
def test_bad_routes_file_names_the_field(tmp_path, body, field):
    file = tmp_path / "routes.toml"
    file.write_text(body)
    with pytest.raises(ConfigError) as excinfo:
        load_routes_file(str(file), base=tmp_path, environ={})
    assert field_of(excinfo) == field


def test_unreadable_routes_file(tmp_path):
    with pytest.raises(ConfigError) as excinfo:
        load_routes_file(str(tmp_path / "missing.toml"), base=tmp_path, environ={})
    assert field_of(excinfo) == "routes" and "missing.toml" in str(excinfo.value)


def test_routes_file_with_several_candidates_and_a_secret(tmp_path):
    file = tmp_path / "routes.toml"
    file.write_text(f"""
[baseline]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"
model = "tiny"
tokenizer = "{TARGET}"
api_key_env = "ROUTE_KEY"
headers = {{ "X-Api-Token" = "header-secret-42", "X-Team" = "infra" }}

[candidates.ngram]
kind = "openai"
base_url = "http://127.0.0.1:8001/v1"
model = "tiny"
tokenizer = "{TARGET}"

[candidates.draft]
kind = "hf"
model = "{TARGET}"
draft = "{EMBEDDED_MODELS / 'draft'}"
""")
    routes = load_routes_file(str(file), base=tmp_path, environ={"ROUTE_KEY": "sk-very-secret"})
    assert [c.name for c in routes.candidates] == ["ngram", "draft"]
    assert routes.baseline.api_key == "sk-very-secret"
    public = str(routes.baseline.public_dict())
    assert "sk-very-secret" not in public and "header-secret-42" not in public and "infra" in public
    assert "sk-very-secret" not in repr(routes.baseline)
    assert set(routes.secrets()) == {"sk-very-secret", "header-secret-42"}


def test_suite_options_are_validated():
    with pytest.raises(ConfigError) as excinfo:
        suite_config_from_options({"greedy_policy": "lenient"}, invocation_dir=ROOT, environ={})
    assert field_of(excinfo) == "greedy-policy"
    with pytest.raises(ConfigError) as excinfo:
        suite_config_from_options({"routes": "x.toml", "candidate": "hf:x"}, invocation_dir=ROOT, environ={})
    assert field_of(excinfo) == "routes"
    config = suite_config_from_options({}, invocation_dir=ROOT, environ={})
    assert config.routes.baseline.kind == "hf" and config.routes.candidates[0].draft


def test_command_line_bad_kind_exits_4_with_one_line_naming_the_field():
    result = subprocess.run([sys.executable, "-m", "pytest", "--candidate", "nosuchkind:x"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 4, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "candidate.kind" in lines[0], result.stderr


def test_paths_are_from_the_invocation_folder_and_presets_are_found_by_name(tmp_path):
    """Run from a nightly job's workspace: relative --routes/--report-dir are from there; `--routes vllm-cpu`
    names the preset shipped with the suite when no such file is in that folder."""
    (tmp_path / "mine.toml").write_text('[baseline]\nkind = "reference"\n\n[candidate]\nkind = "reference"\n')
    config = suite_config_from_options({"routes": "mine.toml", "report_dir": "out"}, invocation_dir=tmp_path, environ={})
    assert config.routes_file == (tmp_path / "mine.toml").resolve() and config.report_dir == tmp_path / "out"
    assert suite_config_from_options({}, invocation_dir=tmp_path, environ={}).report_dir == tmp_path / "reports" / "out"
    preset = suite_config_from_options({"routes": "vllm-cpu"}, invocation_dir=tmp_path, environ={})
    assert preset.routes_file == (ROOT / "routes" / "vllm-cpu.toml").resolve()
    assert [c.name for c in preset.routes.candidates] == ["ngram", "draft_model"]
    with pytest.raises(ConfigError) as excinfo:
        suite_config_from_options({"routes": "no-such-preset"}, invocation_dir=tmp_path, environ={})
    assert field_of(excinfo) == "routes"
