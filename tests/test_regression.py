"""Acceptance regression tests across runs (--compare-to, reports/regression.py), proven both ways.

On synthetic reports: a drop on most prompts is a regression naming both engine versions, and it keeps the candidate
from ADOPT (a gap the summary's table knows); the same counters, near-tie wobbles and a small drop on every prompt
are not; what differs between the runs (the pair, a prompt) is said and skipped; changed answers are notes only where
both runs agree with their baselines; answers that state no counters get the profiles side by side and no test;
speed is reported with the baseline beside it. End to end, at one budget: two small suite runs (the greedy check
only, two prompts per class), the second `--compare-to` the first; the planted `stale_last_draft` (worse last
drafts, every answer unchanged) is named as a regression, while the correct engine rerun beside it is not.
Environment: none.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spec_route_suite.reports.collector import RunCollector, WorkerState
from spec_route_suite.reports.compare import candidate_table, compare_reports
from spec_route_suite.reports.gaps import KINDS, gap_rows
from spec_route_suite.reports.redact import Redactor
from spec_route_suite.reports.regression import REGRESSION_KIND
from spec_route_suite.reports.render_markdown import render_summary
from spec_route_suite.reports.run_report import build_run_report
from tests.mutation import correct_uri, run_route_suite

CLASSES = ("math", "code", "chat", "json", "long")
ALPHA = 0.01


def inventory(version: str = "b100", *, draft: str = "draft", model: str = "target") -> dict:
    return {"engine": "llama.cpp", "version": version, "model": model, "draft": draft, "tokenizer_hash": "t1",
            "speculation": {"method": "draft_model", "num_speculative_tokens": 4}}


def answer(prompt: str, accepted: int, *, steps: int = 10, ids=(1, 2, 3), baseline_ids=None, route="c",
           request: str = "r") -> dict:
    record = {"check": "greedy", "route": route, "baseline": "b", "prompt_id": prompt, "source": "fixture",
              "category": prompt.split("-")[0], "request": f"{request}-{prompt}", "ids": list(ids), "finish": "length",
              "drafting": [steps, accepted, [min(steps, accepted)] * 2]}
    if baseline_ids is not None:
        record.update(baseline_ids=list(baseline_ids), baseline_finish="length")
    return record


PROMPTS = [f"{c}-{i:02d}" for c in CLASSES for i in range(4)]   # 20 prompts, 4 per class
ACCEPTED = [30, 28, 35, 22, 40, 31, 26, 33, 29, 25] * 2


def report(run_id: str, accepted=ACCEPTED, *, version: str = "b100", answers=None, speed=None, **inv) -> dict:
    return {"run_id": run_id, "verdict": "pilot", "findings": [], "acceptance": {},
            "config": {"alpha": ALPHA, "baseline": {"name": "b"}, "candidates": [{"name": "c"}]},
            "inventories": {"b": inventory(), "c": inventory(version, **inv)},
            "measurements": {"greedy_answer": answers or [answer(p, a) for p, a in zip(PROMPTS, accepted)],
                             **({"speed": [speed]} if speed else {})}}


def candidate(now: dict, then: dict) -> dict:
    return compare_reports(now, then)["candidates"]["c"]


def test_a_drop_on_most_prompts_is_a_regression_naming_both_engine_versions():
    entry = candidate(report("b", [round(a * 0.7) for a in ACCEPTED], version="b200"), report("a", ACCEPTED))
    overall = entry["acceptance"]["groups"]["all prompts"]
    assert overall["lower"] == overall["changed"] == 20 and overall["p_value"] < ALPHA / 2 and overall["regressed"]
    assert entry["regression"]["severity"] == "warning" and "llama.cpp b100 -> b200" in entry["regression"]["title"]
    assert entry["answers"]["unchanged"] == 20


def test_the_same_counters_wobbles_and_a_small_drop_are_no_regression():
    same = candidate(report("b", ACCEPTED), report("a", ACCEPTED))
    assert same["acceptance"]["groups"]["all prompts"]["changed"] == 0 and same["regression"] is None
    wobbly = [a - 15 if i < 2 else a + (i % 2) for i, a in enumerate(ACCEPTED)]   # near-tie flips: two prompts lose
    assert candidate(report("b", wobbly), report("a", ACCEPTED))["regression"] is None
    small = candidate(report("b", [a - 1 for a in ACCEPTED]), report("a", ACCEPTED))   # every prompt, under 10%
    assert small["acceptance"]["groups"]["all prompts"]["p_value"] < ALPHA and small["regression"] is None


def test_a_drop_on_one_class_is_named_by_its_class():
    """Half the code prompts' acceptance, 16 prompts a class: the class falls by half, all prompts by less than 10%."""
    def answers(accepted):
        return [answer(f"{p}{copy}", a) for copy in "abcd" for p, a in zip(PROMPTS, accepted)]
    halved = [a // 2 if p.startswith("code") else a for p, a in zip(PROMPTS, ACCEPTED)]
    entry = candidate(report("b", answers=answers(halved)), report("a", answers=answers(ACCEPTED)))
    regressed = [g for g, row in entry["acceptance"]["groups"].items() if row["regressed"]]
    assert regressed == ["fixture/code"] and entry["regression"]["details"]["regressed"] == regressed


def test_another_pair_or_prompt_is_said_and_skipped():
    other = candidate(report("b", ACCEPTED, draft="draft2"), report("a", ACCEPTED))
    assert not other["compared"] and "candidate draft draft -> draft2" in other["why"]
    moved = [answer(p, a, request="r2" if p == "math-00" else "r") for p, a in zip(PROMPTS, ACCEPTED)]
    entry = candidate(report("b", ACCEPTED, answers=moved), report("a", ACCEPTED))
    assert entry["prompts"] == {"compared": 19, "sent differently": 1, "only in this run": 0,
                                "only in the previous run": 0}


def test_one_model_converted_by_two_releases_is_the_same_pair():
    """Found by the nightly 0.3.35 -> 0.3.36 run: each llama.cpp release converts the pair into its own cache folder,
    and every candidate read "not the same pair". The converted file's name (the source's content hash) decides."""
    def gguf(release: str, name: str) -> str:
        return f"/cache/llama.cpp/{release}/gguf/{name}.gguf"
    then = report("a", ACCEPTED, model=gguf("0.3.35", "target-c08a"), draft=gguf("0.3.35", "dflash-4d4c-for-c08a"))
    now = report("b", ACCEPTED, model=gguf("0.3.36", "target-c08a"), draft=gguf("0.3.36", "dflash-4d4c-for-c08a"))
    assert candidate(now, then)["compared"]
    other = report("b", ACCEPTED, model=gguf("0.3.36", "target-c08a"), draft=gguf("0.3.36", "dflash-9999-for-c08a"))
    assert not candidate(other, then)["compared"]
    unanswered = report("a", ACCEPTED, model="unknown", draft=gguf("0.3.35", "dflash-4d4c-for-c08a"))   # no inventory
    entry = candidate(now, unanswered)
    assert entry["compared"] and entry["pair_unconfirmed"] == ["candidate model (the previous run)"], \
        "compared, since nothing says the pair differs, and named, since nothing confirms it"
    assert "pair_unconfirmed" not in candidate(now, then)
    table = "\n".join(candidate_table({"c": entry}))
    assert "(pair unconfirmed: candidate model (the previous run) not stated)" in table, table


def test_changed_answers_are_notes_only_where_both_runs_agree_with_their_baselines():
    then = [answer(p, a) for p, a in zip(PROMPTS, ACCEPTED)]
    now = [answer("math-00", 30, ids=(1, 2, 4)),                          # both agree with their baselines: a note
           answer("math-01", 28, ids=(1, 9), baseline_ids=(1, 2, 3)),     # disagrees now: already a finding
           *[answer(p, a) for p, a in zip(PROMPTS[2:], ACCEPTED[2:])]]
    then[2] = answer("math-02", 35, ids=(7,), baseline_ids=(1, 2, 3))     # disagreed then, agrees now: fixed
    answers = candidate(report("b", ACCEPTED, answers=now), report("a", ACCEPTED, answers=then))["answers"]
    assert answers["changed, both runs agree with their baselines"] == [{"check": "greedy", "prompt": "math-00",
                                                                         "position": 2}]
    assert answers["changed, already a finding"] == 1 and answers["changed, fixed since"] == 1
    assert answers["unchanged"] == 17


def test_answers_without_counters_get_the_profiles_and_no_test():
    plain = [{k: v for k, v in answer(p, a).items() if k != "drafting"} for p, a in zip(PROMPTS, ACCEPTED)]
    profile = {"acceptance": {"c": {"classes": [{"source": "fixture", "category": "math",
                                                 "mean_acceptance_length": 3.1}]}}}
    now, then = report("b", ACCEPTED, answers=plain), report("a", ACCEPTED, answers=plain)
    now.update(by_class=profile, acceptance={"c": {"mean_acceptance_length": 2.0}})
    then.update(by_class=profile, acceptance={"c": {"mean_acceptance_length": 3.0}})
    entry = candidate(now, then)
    assert entry["acceptance"]["why"].startswith("the answers state no drafting counters")
    assert entry["acceptance"]["groups"]["all prompts"] == {"previous": 3.0, "current": 2.0}
    assert entry["acceptance"]["groups"]["fixture/math"] == {"previous": 3.1, "current": 3.1}
    assert entry["regression"] is None


def by_position(prompt: str, accepted_per_position) -> dict:
    record = answer(prompt, sum(accepted_per_position))
    record["drafting"] = [10, sum(accepted_per_position), list(accepted_per_position)]
    return record


def test_a_draft_position_that_falls_is_a_regression_while_the_mean_barely_moves():
    """The last draft position's rate 0.5 -> 0.1 on every prompt moves the mean by 9.8%, under the 10% threshold:
    judged by position (half the group's alpha shared by the positions) it is a regression naming the position; the
    same position lower on two prompts only is not."""
    then = report("a", answers=[by_position(p, [10, 9, 7, 5]) for p in PROMPTS])
    now = report("b", answers=[by_position(p, [10, 9, 7, 1]) for p in PROMPTS], version="b200")
    entry = candidate(now, then)
    overall = entry["acceptance"]["groups"]["all prompts"]
    assert overall["drop"] < 0.10 and overall["positions"]["regressed"] == [4] and overall["regressed"]
    assert "draft position 4: 0.50 -> 0.10" in entry["regression"]["title"], entry["regression"]["title"]
    few = report("c", answers=[by_position(p, [10, 9, 7, 1 if i < 2 else 5]) for i, p in enumerate(PROMPTS)])
    assert candidate(few, then)["regression"] is None


def load_rounds(lengths_alone, lengths_loaded, *, digest="d1") -> dict:
    """The controller's load-acceptance measurement: 6 rounds at 1 and at 8 in flight, 100 drafts each."""
    rounds = [{"level": level, "round": n, "drafts": 100, "accepted": round(100 * (length - 1))}
              for n in range(6) for level, length in ((1, lengths_alone[n]), (8, lengths_loaded[n]))]
    return {"route": "c", "judged": True, "rounds": rounds, "prompts": 16, "prompts_digest": digest}


def counters_only(run_id: str, alone, loaded, *, version="b100", digest="d1") -> dict:
    plain = [{k: v for k, v in answer(p, a).items() if k != "drafting"} for p, a in zip(PROMPTS, ACCEPTED)]
    out = report(run_id, ACCEPTED, answers=plain, version=version)
    out["measurements"]["load_acceptance"] = [load_rounds(alone, loaded, digest=digest)]
    return out


STEADY = [2.90, 2.91, 2.90, 2.89, 2.90, 2.91]


def test_answers_without_counters_are_judged_by_the_servers_counter_rounds():
    """vLLM's answers state no drafting; the controller's rounds on the idle server (stressors/speed/counters.py)
    are the evidence. Proven both ways: acceptance 2.9 -> 2.2 in company in every round is a regression of the
    8-in-flight level naming both versions, one at a time unchanged; the same rounds with a near-tie wobble are not;
    rounds over other prompts are not compared."""
    then = counters_only("a", STEADY, STEADY)
    fell = counters_only("b", STEADY, [2.2, 2.21, 2.19, 2.2, 2.2, 2.22], version="b200")
    entry = candidate(fell, then)
    groups = entry["acceptance"]["groups"]
    assert entry["acceptance"]["test"].startswith("the server's counters")
    assert groups["8 in flight"]["regressed"] and groups["8 in flight"]["p_value"] == pytest.approx(1 / 924)
    assert not groups["all prompts"]["regressed"]
    assert entry["regression"] and "8 in flight" in entry["regression"]["title"] and "b100 -> b200" in \
        entry["regression"]["title"] and "6 of the 6 rounds below" in entry["regression"]["title"]
    wobble = counters_only("c", STEADY, [2.89, 2.90, 2.92, 2.88, 2.90, 2.91])
    assert candidate(wobble, then)["regression"] is None
    other = counters_only("d", STEADY, [2.2] * 6, digest="d2")
    assert candidate(other, then)["acceptance"]["test"] == "none", "other prompts: side by side, no test"


def test_speed_is_reported_with_the_baselines_own_change_and_the_load():
    def speed(cand, base, load):
        return {"candidate": "c", "rows": {
            "candidate": [{"concurrency": 1, "throughput_tok_s": cand, "load_avg_1m": load}],
            "baseline": [{"concurrency": 1, "throughput_tok_s": base, "load_avg_1m": load}]}}
    entry = candidate(report("b", ACCEPTED, speed=speed(50.0, 20.0, [1.0, 1.2])),
                      report("a", ACCEPTED, speed=speed(80.0, 22.0, [0.5, 0.6])))
    assert entry["speed"] == [{"concurrency": 1, "throughput_tok_s": [80.0, 50.0],
                               "baseline_throughput_tok_s": [22.0, 20.0], "load_avg_1m": [[0.5, 0.6], [1.0, 1.2]],
                               "baseline_change": -0.0909, "speedup": [3.6364, 2.5]}]
    assert entry["regression"] is None   # reported, not judged
    cell = candidate_table({"c": entry})[2]
    assert "c=1: 80 -> 50 (22 -> 20), speedup 3.64 -> 2.50 (the baseline itself -9%)" in cell, cell


def _collector(tmp_path: Path, run_id: str, accepted, *, compare_to: Path | None = None) -> RunCollector:
    collector = RunCollector(run_dir=tmp_path / run_id, run_id=run_id, redact=Redactor(()), is_worker=False,
                             compare_to=compare_to,
                             config_public={"alpha": ALPHA, "baseline": {"name": "b", "kind": "hf"},
                                            "candidates": [{"name": "c", "kind": "openai"}]})
    collector.worker_states = [WorkerState(inventories={"b": inventory(), "c": inventory()}).__dict__]
    collector.measurements = {"greedy_answer": [answer(p, a) for p, a in zip(PROMPTS, accepted)]}
    return collector


def test_a_regression_is_a_gap_that_keeps_adopt_away_and_the_summary_names_it(tmp_path):
    previous = build_run_report(_collector(tmp_path, "a", ACCEPTED))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "report.json").write_text(json.dumps(previous, default=str))
    same = build_run_report(_collector(tmp_path, "b", ACCEPTED, compare_to=tmp_path / "a"))
    assert not [g for g in same["route_verdicts"]["c"]["gaps"] if g["kind"] == REGRESSION_KIND]
    worse = build_run_report(_collector(tmp_path, "c", [a // 2 for a in ACCEPTED], compare_to=tmp_path / "a"))
    assert "acceptance regression since run a" in worse["route_verdicts"]["c"]["reason"]
    (row,) = [r for r in gap_rows(worse["route_verdicts"]) if r["kind"] == REGRESSION_KIND]
    assert row["close"] == KINDS[REGRESSION_KIND].close and "llama.cpp b100 -> b100" in row["why"]
    summary = render_summary(worse)
    assert "**REGRESSION** on all prompts" in summary and "| `c` | llama.cpp b100 -> b100 |" in summary


def test_planted_regression_warns_and_the_correct_engine_rerun_beside_it_does_not(tmp_path):
    """Two runs at one budget; the second names `planted` (stale_last_draft) and not `clean` (the correct engine)."""
    args = ["-k", "test_greedy_matches_baseline", "--prompt-limit", "2"]
    before = run_route_suite({"planted": correct_uri(), "clean": correct_uri()}, args, tmp_path / "before",
                             paths=["equivalence"])
    assert before.exit_code == 0 and before.run_dir, before.describe()
    after = run_route_suite({"planted": "reference:?fault=stale_last_draft", "clean": correct_uri()},
                            [*args, "--compare-to", str(before.run_dir)], tmp_path / "after", paths=["equivalence"])
    assert after.exit_code == 0 and not after.noisy("planted") and not after.noisy("clean"), after.describe()
    planted, clean = (after.report["comparison"]["candidates"][n] for n in ("planted", "clean"))
    for entry in (planted, clean):   # the verifier fixes every worse draft: not one answer changed
        assert entry["compared"] and entry["answers"]["unchanged"] == entry["prompts"]["compared"] == 10
    overall = planted["acceptance"]["groups"]["all prompts"]
    print(f"\nplanted: {overall['previous']} -> {overall['current']} (drop {overall['drop']:.1%}), "
          f"{overall['lower']} of {overall['changed']} lower, sign test p={overall['p_value']:.3g}; "
          f"by position {overall['positions']}")
    assert planted["regression"] and overall["regressed"] and overall["p_value"] < overall["alpha"]
    assert clean["regression"] is None and clean["acceptance"]["groups"]["all prompts"]["changed"] == 0
    verdicts = after.report["route_verdicts"]
    assert "acceptance regression" in verdicts["planted"]["reason"]
    assert not [g for g in verdicts["clean"]["gaps"] if g["kind"] == REGRESSION_KIND]
    assert "**REGRESSION**" in (after.run_dir / "summary.md").read_text()
    printed = subprocess.run([sys.executable, "-m", "spec_route_suite.reports.compare", str(after.run_dir)],
                             capture_output=True, text=True, timeout=60)   # the nightly recipe's last command
    assert printed.returncode == 0 and "| `planted` |" in printed.stdout and "**REGRESSION**" in printed.stdout
    unpaired = subprocess.run([sys.executable, "-m", "spec_route_suite.reports.compare", str(before.run_dir)],
                              capture_output=True, text=True, timeout=60)
    assert unpaired.returncode == 4 and "was not compared" in unpaired.stderr
