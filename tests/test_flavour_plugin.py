"""An engine flavour added from one file: a module with one `@flavour` class in a folder outside the suite, loaded
by pytest's own `-p MODULE`, is detected on a real run and its stated fact is used.

Why: "one engine, one place" holds only if nothing else has to change to add one: no module list, no refusal
table, no name set in a test. The toy engine here is the suite's in-process server (both routes `openai:`, each
its own server); the toy flavour recognises it by its /version answer, before vLLM would, and states a context
per request smaller than the server's own max_model_len. The run's report must name the toy flavour and engine,
and size the prompts into the toy's context. The same run without `-p` must not: the flavour is then what the
suite detects without it (vLLM, whose wording the in-process server imitates) and the context the server's own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spec_route_suite.routes.spec import EMBEDDED_MODELS
from spec_route_suite.servers.inprocess import serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
MODULE = "toy_engine_flavour"
TOY_CONTEXT = 192   # the in-process server states max_model_len 512 (the embedded model's positions)
TOY_FLAVOUR = f'''"""A toy engine: the suite's in-process server, recognised by the engine its /version names."""
from dataclasses import replace

from spec_route_suite.routes.flavours import Flavour, flavour


@flavour
class ToyEngine(Flavour):
    name = "toy"
    engine = "toy-engine"
    detect_order = 5          # before vLLM, which would take any server answering /version
    probe_paths = ("/version", "/v1/models")

    def detect(self, probes):
        return probes.dict("/version").get("engine") == "reference"

    def facts(self, probes):
        return replace(super().facts(probes), context_per_request={TOY_CONTEXT},
                       version=str(probes.dict("/version").get("version")))
'''


@pytest.fixture(scope="module")
def two_servers():
    """The baseline's and the candidate's in-process servers (the reference engine, correct)."""
    baseline, stop_baseline = serve_in_thread("reference:", base=ROOT, model_name="tiny")
    try:
        candidate, stop_candidate = serve_in_thread("reference:", base=ROOT, model_name="tiny")
        try:
            yield baseline, candidate
        finally:
            stop_candidate()
    finally:
        stop_baseline()


def run_with(tmp_path: Path, servers: tuple[str, str], *plugin: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    """One route-suite run (greedy on one long prompt) over the two servers; (process, report.json, summary.md)."""
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    (folder / f"{MODULE}.py").write_text(TOY_FLAVOUR)
    routes = [f"openai:{url}?model=tiny&tokenizer={EMBEDDED_MODELS / 'target'}" for url in servers]
    report_dir = tmp_path / "out"
    cmd = [sys.executable, "-m", "pytest", "equivalence/test_greedy.py", "-p", "no:cacheprovider", *plugin,
           "-n", "2", "--report-dir", str(report_dir), "--baseline", routes[0], "--candidate", routes[1],
           "--prompt-limit", "1", "--categories", "long", "-k", "test_greedy_matches_baseline"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    runs = sorted(report_dir.glob("*/report.json"))
    assert len(runs) == 1, done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads(runs[0].read_text()), (runs[0].parent / "summary.md").read_text()


def test_a_flavour_from_one_file_is_detected_and_its_context_used(tmp_path, two_servers):
    done, report, summary = run_with(tmp_path, two_servers, "-p", MODULE)
    assert done.returncode == 0, done.stdout[-3000:]
    for name in ("baseline", "candidate"):
        inventory = report["inventories"][name]
        assert (inventory["extra"]["flavour"], inventory["engine"]) == ("toy", "toy-engine"), inventory
        assert inventory["max_model_len"] == TOY_CONTEXT
    assert any(f"context {TOY_CONTEXT} tokens" in note and "trimmed" in note for note in report["notes"]), \
        report["notes"]
    assert "toy-engine" in summary and f"| {TOY_CONTEXT} |" in summary


def test_without_the_plugin_the_toy_flavour_is_not_there(tmp_path, two_servers):
    """The test above can fail: the same run without `-p` detects the server as the suite knows it."""
    done, report, summary = run_with(tmp_path, two_servers)
    assert done.returncode == 0, done.stdout[-3000:]
    inventory = report["inventories"]["candidate"]
    assert inventory["extra"]["flavour"] == "vllm" and inventory["max_model_len"] > TOY_CONTEXT
    assert not any(f"context {TOY_CONTEXT} tokens" in note for note in report["notes"])
    assert "toy-engine" not in summary
