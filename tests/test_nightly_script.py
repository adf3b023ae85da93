"""scripts/nightly.sh as a nightly job runs it: two runs, the second compared with the first, the regression table
printed and written, and a run that leaves no folder named with exit 3 (not a silent exit 1).

Why: the recipe is what a team schedules; a shell bug there (set -e on an empty `grep`) hides a broken night.
The engine releases themselves are the managed engines' business (tests/test_engine_releases.py): here the routes
run in process, so the release names only label the two runs.
Environment: runs bash and the installed `spec-route-suite` console script.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "fixtures" / "models"
SCRIPT = ROOT / "scripts" / "nightly.sh"
SMALL = ("-k", "test_greedy_matches_baseline", "--prompt-limit", "1", "--categories", "math")


def nightly(tmp_path: Path, routes: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), routes, "r1", "r2", str(tmp_path / "out"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SPEC_SUITE_NIGHTLY_WORKERS": "1"})


def test_the_second_run_is_compared_with_the_first_and_the_table_is_written(tmp_path):
    (tmp_path / "routes.toml").write_text(f'[baseline]\nkind = "hf"\nmodel = "{MODELS / "target"}"\n\n'
                                          f'[candidate]\nkind = "hf"\nmodel = "{MODELS / "target"}"\n'
                                          f'draft = "{MODELS / "draft"}"\n')
    result = nightly(tmp_path, "routes.toml", *SMALL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    [first] = (tmp_path / "out" / "r1").glob("2*/")
    table = (tmp_path / "out" / "regression-r1-r2.md").read_text()
    assert f"Compared with `{first.name}`" in table, table
    assert "| `candidate` |" in table and "1/1 unchanged" in table, table
    assert table.strip() in result.stdout


def test_a_run_that_leaves_no_folder_is_named_and_exits_3(tmp_path):
    (tmp_path / "routes.toml").write_text('[baseline]\nkind = "hf"\nmodel = "/no/such/model"\n')
    result = nightly(tmp_path, "routes.toml", *SMALL)
    assert result.returncode == 3, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"nightly: the r1 run left no run folder in {tmp_path / 'out' / 'r1'}" in result.stderr
