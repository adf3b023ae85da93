"""The route suite on a user's workload, as a user runs it: generated GSM8K, MT-Bench and traffic files
(--prompts) drive the greedy, chat, class-acceptance and task-accuracy checks; in one run the correct engine
passes and a planted divergence fails on the user's own prompt ids, and summary.md breaks both down by class."""
from __future__ import annotations

from pathlib import Path

from spec_route_suite.prompts.samples import write_samples
from spec_route_suite.routes.spec import EMBEDDED_MODELS
from tests.test_suite_end_to_end import run_suite

PATHS = ("equivalence/test_greedy.py", "equivalence/test_class_acceptance.py", "stressors/test_task_accuracy.py")


def test_users_prompts_reach_the_checks_and_a_planted_fault_is_caught_on_them(tmp_path):
    samples = write_samples(tmp_path / "samples", per_set=4)
    routes = tmp_path / "routes.toml"
    routes.write_text(f'baseline = "hf:{EMBEDDED_MODELS / "target"}"\n[candidates]\ncorrect = "reference:"\n'
                      f'planted = "reference:?plant=divergence@3"\n')
    result, report = run_suite(
        tmp_path, "-p", "no:xdist", "--routes", str(routes), "-k", "not near_tie", "--stress-requests", "8",
        "--concurrency", "4", "--max-new-tokens", "24", "--prompts", f"gsm8k:{samples['gsm8k']}?limit=2",
        "--prompts", f"mt_bench:{samples['mt_bench']}?limit=1", "--prompts", f"jsonl:{samples['jsonl']}?limit=2",
        paths=PATHS)
    assert result.returncode == 1, result.stdout[-3000:]
    verdicts = {name: v["verdict"] for name, v in report["route_verdicts"].items()}
    assert verdicts["planted"] == "avoid" and verdicts["correct"] != "avoid", report["route_verdicts"]
    planted = {f["prompt_id"] for f in report["findings"] if f["route"] == "planted" and f["severity"] == "bug"}
    assert {p.split("-")[0] for p in planted} >= {"gsm8k", "mt_bench", "traffic"}, planted
    turns = {(m["route"], m["outcome"]) for m in report["measurements"]["class_outcome"]
             if m["check"] == "task-accuracy" and m["prompt_id"].endswith("-turn2")}
    assert turns == {("correct", "right"), ("planted", "wrong")}, "MT-Bench's second turn: parity with the baseline"
    assert not [f for f in report["findings"] if f["route"] == "correct" and f["severity"] in ("bug", "error")]
    outcomes = {(o["check"], o["route"], o["source"]): o["counts"] for o in report["by_class"]["outcomes"]}
    assert set(outcomes[("greedy", "correct", "gsm8k")]) == {"match"}
    assert outcomes[("greedy", "planted", "gsm8k")] == {"diverged": 2}
    assert "wrong" in outcomes[("task-accuracy", "planted", "mt_bench")], "turn parity fails on the planted route"
    groups = {(m["source"], m["category"]) for m in report["measurements"]["class_outcome"] if m["check"] == "greedy"}
    for route in ("correct", "planted"):
        measured = report["by_class"]["acceptance"][route]["classes"]
        assert {(c["source"], c["category"]) for c in measured} == groups, "a phase for every class of the run"
        assert all(c["method"] == "per-answer counters" and c["mean_acceptance_length"] for c in measured)
    summary = next(Path(report["config"]["routes_file"]).parent.glob("out/*/summary.md")).read_text()
    assert "## By prompt class" in summary and "gsm8k/math" in summary
    assert any("prompts: gsm8k" in note for note in report["notes"])
