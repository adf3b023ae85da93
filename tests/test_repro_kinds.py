"""Repro scripts of the judges no mutation-table row produces, end to end: stream, repeat and error.

One route-suite run (greedy, streaming and seeds checks on code and chat prompts, whose samples vary) judges
three faulty candidates against the embedded baseline: the reference engine with a divergence planted in its
streamed answers, the reference engine ignoring seeds, and a server that answers every completion with an
error object (tests/fault_server.py).
Each cluster's script, run alone with only the servers' addresses, must exit 1 against its faulty server and 0
against the correct one, with the baseline served as its control. The other judges (parity, logprobs, load,
distribution, choices, rule) are proven on every row of the mutation table (tests/test_mutation.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spec_route_suite.routes.spec import EMBEDDED_MODELS
from spec_route_suite.servers.inprocess import serve_in_thread
from tests.fault_server import FaultPlan, serve_faults
from tests.mutation import run_route_suite

ROOT = Path(__file__).resolve().parent.parent
TARGET = EMBEDDED_MODELS / "target"
CHECKS = ("equivalence/test_greedy.py", "equivalence/test_streaming.py", "equivalence/test_seeds.py")
SELECT = ("(test_stream_matches_non_stream and plain and streamfault) or (test_same_seed and seedfault) "
          "or (test_greedy_matches_baseline and errorfault)")
# candidate name -> (check family of its cluster, the judge its script applies, the faulty server's route URI)
FAULTY = {"streamfault": ("streaming", "stream", "reference:?plant=stream-divergence@3"),
          "seedfault": ("seeds", "repeat", "reference:?plant=seed-ignored")}
CORRECT = "reference:"


def run_script(script: Path, candidate_url: str, baseline_url: str) -> subprocess.CompletedProcess:
    """The repro alone: a clean environment holding only the two servers' addresses."""
    return subprocess.run([sys.executable, str(script), "--candidate-url", candidate_url, "--baseline-url",
                           baseline_url], capture_output=True, text=True, timeout=300,
                          env={"PATH": os.environ.get("PATH", "")})


def test_stream_repeat_and_error_repros_reproduce_only_on_the_faulty_engine(tmp_path):
    errors_url, stop_errors = serve_faults(f"hf:{TARGET}", FaultPlan(share=1.0, stream_share=0.0,
                                                                      body_shapes=("error_object_http_200",)), base=ROOT)
    try:
        candidates = {name: uri for name, (_, _, uri) in FAULTY.items()}
        candidates["errorfault"] = f"openai:{errors_url}?model=hostile&tokenizer={TARGET}&timeout=60"
        result = run_route_suite(candidates, ["--prompt-limit", "1", "--categories", "code,chat", "-k", SELECT],
                                 tmp_path, paths=CHECKS, timeout_s=600)
        clusters = {c["route"]: c for c in result.report.get("clusters", []) if c.get("repro")}
        assert set(clusters) == {"streamfault", "seedfault", "errorfault"}, result.describe()
        expected = {**{name: (family, judge) for name, (family, judge, _) in FAULTY.items()},
                    "errorfault": ("greedy", "error")}
        for name, (family, judge) in expected.items():
            assert clusters[name]["check"] == family and clusters[name]["kind"].startswith(
                "error" if judge == "error" else "bug"), clusters[name]
            assert f'"judge": "{judge}"' in (result.run_dir / clusters[name]["repro"][0]).read_text()
        baseline_url, stop_baseline = serve_in_thread(f"hf:{TARGET}")
        try:
            # the error server's correct twin serves its model, under its name, without damage
            pairs = [*((n, u, CORRECT, None) for n, (_, _, u) in FAULTY.items()),
                     ("errorfault", None, f"hf:{TARGET}", "hostile")]
            for name, faulty, correct, model_name in pairs:
                script = result.run_dir / clusters[name]["repro"][0]
                for uri, code in ((faulty, 1), (correct, 0)):
                    url, stop = ((errors_url, lambda: None) if uri is None
                                 else serve_in_thread(uri, model_name=model_name))
                    try:
                        done = run_script(script, url, baseline_url)
                    finally:
                        stop()
                    assert done.returncode == code, f"{name} vs {uri or 'the error server'}:\n{done.stdout}{done.stderr}"
        finally:
            stop_baseline()
    finally:
        stop_errors()
