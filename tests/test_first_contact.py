"""A user's first contact, through the installed `spec-route-suite` command run from an empty folder.

Why: the checks are only as good as the run a newcomer gets. A server that is not there, a tokenizer that is
not the server's or a typo in a route must end in seconds with one line and exit 4, never a run of route errors,
a WAIT verdict or issue files; every run must end with its verdict on the terminal; `--require` must give a
pipeline an exit code it can gate on; `--version` and `--help` must be the suite's.
Environment: runs the console script installed by `pip install -e .` (found on PATH).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spec_route_suite.options import REQUIRE_EXIT
from spec_route_suite.servers.inprocess import build_engine, make_server

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "fixtures" / "models" / "target"
PAIR2 = ROOT / "fixtures" / "models" / "pair2"
CLI = shutil.which("spec-route-suite")
SMALL_RUN = ("-k", "test_greedy_matches_baseline", "--prompt-limit", "1", "--categories", "math")


def run_cli(folder: Path, *args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    if CLI is None:
        pytest.fail("the spec-route-suite console script is not on PATH: pip install -e . installs it")
    return subprocess.run([CLI, *args], cwd=folder, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (result.stderr + result.stdout).splitlines() if line.startswith("ERROR")]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pair2_servers():
    """Two in-process servers of the second pair (its own tokenizer, not the first pair's): base URLs."""
    engine = build_engine(f"reference:{PAIR2 / 'target'}?draft={PAIR2 / 'draft'}", model_name="p2", base=ROOT)
    servers = [make_server(engine) for _ in range(2)]
    for httpd in servers:
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield [f"http://127.0.0.1:{httpd.server_address[1]}/v1" for httpd in servers]
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()
    engine.close()


def test_nothing_listening_exits_4_in_seconds_with_one_line_and_leaves_nothing(tmp_path):
    routes = [f"openai:http://127.0.0.1:{closed_port()}/v1?model=tiny&tokenizer={TARGET}" for _ in range(2)]
    started = time.monotonic()
    result = run_cli(tmp_path, "-n", "8", "--baseline", routes[0], "--candidate", routes[1])
    elapsed = time.monotonic() - started
    assert result.returncode == 4, result.stdout[-2000:] + result.stderr[-2000:]
    assert elapsed < 10, f"{elapsed:.1f}s"
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith("ERROR: preflight failed:"), lines
    assert "route 'baseline'" in lines[0] and "route 'candidate'" in lines[0] and "cannot connect" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "reports").exists(), "no run folder, no history line, no issue file"


def test_a_tokenizer_that_is_not_the_servers_exits_4_naming_both_counts(tmp_path, pair2_servers):
    """Pair 3's tokenizer has as many ids (1,024) as pair 2's: every id it sends is valid, only the counts tell."""
    (tmp_path / "routes.toml").write_text(f'''
[baseline]
kind = "openai"
base_url = "{pair2_servers[0]}"
model = "p2"
tokenizer = "{PAIR2 / 'target'}"

[candidate]
kind = "openai"
base_url = "{pair2_servers[1]}"
model = "p2"
tokenizer = "{ROOT / 'fixtures' / 'models' / 'pair3' / 'target'}"
''')
    result = run_cli(tmp_path, "--routes", "routes.toml")
    assert result.returncode == 4, result.stdout[-2000:]
    [line] = error_lines(result)
    assert "route 'candidate'" in line and "route 'baseline'" not in line, line
    assert re.search(r"is not the server's: 3 text prompts count [\d/]+ tokens locally and [\d/]+ on the server",
                     line), line
    assert not (tmp_path / "reports").exists()


def test_the_right_tokenizer_passes_the_preflight_and_the_header_names_the_engine(tmp_path, pair2_servers):
    routes = [f"openai:{url}?model=p2&tokenizer={PAIR2 / 'target'}" for url in pair2_servers]
    result = run_cli(tmp_path, "--baseline", routes[0], "--candidate", routes[1], "-k", "test_greedy_matches_baseline",
                     "--prompt-limit", "1", "--categories", "math")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"spec-route-suite candidate 'candidate': openai {pair2_servers[1]} model p2, vllm" in result.stdout


def test_the_header_says_what_is_judged_on_which_prompts_and_budget(tmp_path):
    (tmp_path / "traffic.jsonl").write_text('{"text": "What is 2+3?", "category": "math"}\n')
    result = run_cli(tmp_path, "--collect-only", "--prompts", "jsonl:traffic.jsonl?limit=5", "--alpha", "0.02")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (f"spec-route-suite candidate 'candidate': hf {TARGET}, draft {TARGET.parent / 'draft'} (4 tokens per "
            f"step)") in result.stdout
    assert (f"spec-route-suite budget: --alpha 0.02, --detect-tv 0.05, concurrency 1,8,32; prompts: traffic "
            f"(jsonl, {tmp_path / 'traffic.jsonl'}), up to 5 rows") in result.stdout, result.stdout[:3000]


def test_a_misspelled_route_key_exits_4_with_the_suggestion(tmp_path):
    started = time.monotonic()
    result = run_cli(tmp_path, "--candidate", f"openai:http://127.0.0.1:9/v1?model=m&tokenzier={TARGET}")
    assert result.returncode == 4
    assert "candidate.tokenzier: unknown route key (did you mean tokenizer?)" in result.stderr
    assert time.monotonic() - started < 10


def test_a_server_route_without_a_tokenizer_is_refused_in_both_forms(tmp_path):
    result = run_cli(tmp_path, "--candidate", "openai:http://127.0.0.1:9/v1?model=m")
    assert result.returncode == 4 and "candidate.tokenizer: a server route needs the server's tokenizer" in result.stderr
    (tmp_path / "r.toml").write_text('[baseline]\nkind = "hf"\nmodel = "%s"\n\n[candidate]\nkind = "openai"\n'
                                     'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n' % TARGET)
    result = run_cli(tmp_path, "--routes", "r.toml")
    assert result.returncode == 4 and "candidate.tokenizer: a server route needs the server's tokenizer" in result.stderr


def test_every_mistake_of_a_routes_file_is_named_at_once(tmp_path):
    (tmp_path / "routes.toml").write_text(f'''
[servers]
managed = "llama-cpp"
model = "{TARGET}"
slot_contxt = 512
parallel = 0

[servers.instances.ar]
port = 18990
speculaton = {{ type = "draft-simple" }}

[servers.instances.spec]
port = "abc"
speculation = {{ type = "nope" }}

[baseline]
kind = "openai"
base_url = "http://127.0.0.1:18990/v1"
model = "tiny"
tokenizer = "{TARGET}"

[candidates.a]
kind = "openai"
base_url = "http://127.0.0.1:18991/v1"
model = "tiny"
tokenzier = "{TARGET}"

[candidates.b]
kind = "openai"
base_url = "http://127.0.0.1:18992/v1"
model = "tiny"
tokenizer = "{TARGET}"
options = {{ num_speculative_token = "4" }}
timeouts = {{ connect = -1, request = 0 }}
''')
    expected = ("candidates.a.tokenzier: unknown field (did you mean tokenizer?)",
                "candidates.b.options.num_speculative_token: unknown option of a openai route (did you mean "
                "num_speculative_tokens?)",
                "candidates.b.timeouts.connect: expected a positive number, got -1",
                "candidates.b.timeouts.request: expected a positive number, got 0",
                "servers.slot_contxt: unknown field (did you mean slot_context?)",
                "servers.parallel: expected a positive integer, got 0",
                "servers.instances.ar.speculaton: unknown field (did you mean speculation?)",
                "servers.instances.spec.port: expected a positive integer, got 'abc'",
                "servers.instances.spec.speculation.type: unknown speculative type 'nope'")
    result = run_cli(tmp_path, "--routes", "routes.toml")
    assert result.returncode == 4
    for line in expected:
        assert line in result.stderr, (line, result.stderr)
    # the servers tool reads the same table the same way: every [servers] mistake, exit 2, its state untouched
    tool = subprocess.run([sys.executable, "-m", "spec_route_suite.servers.llama_cpp", "--routes", "routes.toml",
                           "status"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert tool.returncode == 2, tool.stdout + tool.stderr
    for line in (e for e in expected if e.startswith("servers.")):
        assert line in tool.stderr, (line, tool.stderr)


def test_a_hub_id_tokenizer_that_the_hub_cannot_give_is_one_line_saying_to_pass_a_folder(tmp_path):
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HUB_OFFLINE": "0",
           "HF_HOME": str(tmp_path / "hf")}
    result = run_cli(tmp_path, "--candidate", "openai:http://127.0.0.1:9/v1?model=m&tokenizer=acme/no-such-model",
                     env=env, timeout=120)
    assert result.returncode == 4, result.stderr
    assert len(error_lines(result)) == 1, result.stderr
    assert "candidate.tokenizer: 'acme/no-such-model' is not a local folder, and the model hub did not give its " \
           "tokenizer" in result.stderr and "pass a local folder" in result.stderr
    result = run_cli(tmp_path, "--candidate", "openai:http://127.0.0.1:9/v1?model=m&tokenizer=acme/no-such-model",
                     env={**env, "HF_HUB_OFFLINE": "1"}, timeout=120)
    assert result.returncode == 4 and "pass a local folder" in result.stderr


@pytest.mark.parametrize("required, code", [("adopt", REQUIRE_EXIT), ("pilot", 0)])
def test_require_gates_the_exit_code_and_the_run_ends_with_its_verdict(tmp_path, required, code):
    result = run_cli(tmp_path, "-n", "2", *SMALL_RUN, "--require", required)
    assert result.returncode == code, result.stdout[-3000:] + result.stderr[-2000:]
    tail = result.stdout.splitlines()
    block = tail[next(i for i, line in enumerate(tail) if "spec-route-suite verdict" in line):]
    assert block[1].startswith("PILOT:") and any(line.strip().startswith("PILOT  candidate") for line in block)
    assert any(line.startswith("summary: ") and line.endswith("summary.md") for line in block)
    report = json.loads(next((tmp_path / "reports" / "out").glob("*/report.json")).read_text())
    assert report["verdict"] == "pilot"
    assert report["command"] == f"spec-route-suite -n 2 {' '.join(SMALL_RUN)} --require {required}"
    if required == "adopt":
        [line] = [line for line in result.stdout.splitlines() if line.startswith("--require adopt not met")]
        gaps = report["route_verdicts"]["candidate"]["gaps"]
        assert line.startswith(f"--require adopt not met (exit {REQUIRE_EXIT}): 'candidate' is PILOT: "), line
        assert gaps and all(gap["kind"] in line for gap in gaps[:2]), (line, gaps[:2])
    else:
        assert "--require" not in "\n".join(block)


def test_a_failing_run_ends_with_avoid_and_its_top_cause(tmp_path):
    result = run_cli(tmp_path, *SMALL_RUN, "--candidate", f"hf:{TARGET}?draft={TARGET.parent / 'draft'}"
                                                           f"&plant=divergence@3")
    assert result.returncode == 1, result.stdout[-3000:]
    block = result.stdout[result.stdout.index("spec-route-suite verdict"):]
    assert "AVOID: a correctness bug: do not promote" in block
    assert re.search(r"AVOID\s+candidate .*\[\d+ bug finding\(s\), \d+ cause\(s\)\]", block), block
    assert re.search(r"issues:\s+\S+/issues \(\d+ file\(s\)", block), block


def test_an_interrupted_run_still_ends_with_its_verdict(tmp_path):
    if CLI is None:
        pytest.fail("the spec-route-suite console script is not on PATH")
    # the whole route suite on one category, serially: minutes of work, so the interrupt lands mid-run
    # unbuffered, so the first progress line arrives when the first test ends, not when a pipe buffer fills
    proc = subprocess.Popen([CLI, "-p", "no:xdist", "--categories", "math"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out = []
    for line in proc.stdout:   # interrupt once tests are passing
        out.append(line)
        if line.startswith("equivalence/") or line.startswith(".") or "%]" in line:
            break
    time.sleep(2)
    assert proc.poll() is None, "the run ended before the interrupt: " + "".join(out)[-2000:]
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=300)
    text = "".join(out) + rest
    assert proc.returncode == 2, text[-3000:]
    assert "spec-route-suite verdict" in text, text[-3000:]
    assert "WAIT: investigate before promoting (the run did not complete: its results are partial)" in text


def test_version_names_the_suite_then_what_it_runs_on(tmp_path):
    result = run_cli(tmp_path, "--version")
    assert result.returncode == 0
    import torch
    assert re.fullmatch(r"spec-route-suite \S+ \(pytest \S+, Python \S+, torch \S+\)\n", result.stdout), result.stdout
    assert f"torch {torch.__version__}" in result.stdout and result.stdout.startswith("spec-route-suite ")


def test_help_shows_the_suites_options_grouped_before_pytests(tmp_path):
    result = run_cli(tmp_path, "--help")
    assert result.returncode == 0
    head = result.stdout.split("pytest's own options follow")[0]
    assert len(head.splitlines()) < 70, "the suite's own help fits on a screen"
    for heading in ("routes and prompts:", "statistical budget:", "stressors:", "reports and exit code:",
                    "self-tests only:"):
        assert heading in head
    assert "--greedy-policy {strict,classify}" in head and "--require {adopt,pilot}" in head
    assert head.index("--routes FILE") < head.index("self-tests only:") < head.index("--vllm")
    assert "exit codes: 0 every check passed" in head and f"{REQUIRE_EXIT} the verdict fell short of --require" in head
    assert "general:" in result.stdout.split("pytest's own options follow")[1]
