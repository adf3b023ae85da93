"""One root cause, one issue file (issue #34 item 13), proven on the reference engine's `block_counted_before_sent`.

The fault counts an accepted block before sending it: an answer whose count reaches max_tokens ends there, with
finish_reason 'length' and usage.completion_tokens = max_tokens, but without the block. Every check that reaches
max_tokens sees it in its own words: the boundary and stop-string sweeps (a usage and a finish_reason rule, per
variant and per prompt), the greedy and feature checks (a divergence where the short answer ended), the n-choice
checks (usage not the sum of the choices). Clustered by title that was one issue file per check, variant and
prompt class; clustered by the answers' shape (reports/shapes.py) it is one, naming every check.

- the fault bites as its bug class does, only with speculation;
- real check functions (equivalence/test_*.py) fed by the faulty engine give findings in two checks that make
  one cluster, while another cause on the same route (a divergence mid-answer) stays its own;
- a route-suite run on the faulty engine beside the correct one leaves exactly one issue file for the fault,
  naming every check family that saw it (which a per-title clustering splits), and none for the correct engine.
Environment: none.
"""
from __future__ import annotations

import re

import pytest

import spec_route_suite.equivalence.test_stop_strings as stop_suite
from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.equivalence.greedy_judge import greedy_ids_request, judge_greedy
from spec_route_suite.reports.clusters import cluster_findings, signature
from spec_route_suite.reports.shapes import BY_KEY, shape_of
from spec_route_suite.routes.base import Request
from tests.mutation import run_route_suite
from tests.test_greedy_routes import (FixedCalibration, ReferenceHandles, Sink, baseline_handle, fitted_prompts,
                                      prompts, suite_config, tokenizer)

FAULT = "block_counted_before_sent"
SHORT = BY_KEY["short-usage-claims-more"]
FLOOR = calib.Calibration(route="baseline", tau=calib.TAU_FLOOR, logprob_tol=calib.TOL_FLOOR, noise=1e-5)


def test_a_text_level_answer_shows_no_shape():
    """Token counts re-derived from text say nothing of how an answer ended: no shape, clustered by title."""
    answer = {"ids": [5, 6], "tokens": 2, "finish": "length", "usage": 7}
    finding = {"check": "greedy", "severity": "bug", "route": "c", "title": "t", "details": {
        "repro": {"case": {"recorded": {"candidate": [answer], "baseline": [], "asked": [{"max_tokens": 7, "n": 1}]}}}}}
    assert shape_of(finding) is SHORT
    assert shape_of({**finding, "details": {**finding["details"], "comparison": "text-level"}}) is None
    text_level = {"candidate": [{**answer, "text_level": True}], "baseline": [], "asked": [{"max_tokens": 7}]}
    assert shape_of({**finding, "details": {"repro": {"case": {"recorded": text_level}}}}) is None


@pytest.fixture(scope="module")
def engines():
    made = ReferenceHandles()
    yield made
    made.close()


@pytest.fixture(scope="module")
def baseline():
    return baseline_handle()


def math_ids() -> tuple[int, ...]:
    return tuple(fitted_prompts().ids(prompts(("math",), 1)[0]))


def test_the_fault_ends_answers_short_while_usage_claims_max_tokens(engines, baseline):
    """Greedy with ignore_eos: the baseline returns max_tokens tokens; the faulty engine fewer, a prefix of them,
    with finish 'length' and usage = max_tokens; the correct engine the baseline's answer."""
    short = 0
    for max_tokens in (3, 7, 12, 20):
        req = Request(prompt_ids=math_ids(), max_tokens=max_tokens, ignore_eos=True, request_id=f"b-{max_tokens}")
        expected, correct, faulty = baseline.generate(req), engines().generate(req), engines(FAULT).generate(req)
        assert correct.token_ids == expected.token_ids and len(expected.token_ids) == max_tokens
        assert faulty.token_ids == expected.token_ids[:len(faulty.token_ids)]
        assert (faulty.finish_reason, faulty.usage_completion_tokens) == ("length", max_tokens)
        short += len(faulty.token_ids) < max_tokens
    assert short >= 3, "the fault must cut the answers that end on a multi-token block"


def real_findings(engines, baseline, fault: str | None, *, sweep: bool = True, greedy_tokens: int = 7,
                  until_greedy: bool = False) -> list[dict]:
    """Findings of two real checks against the engine named `candidate`, as report.json holds them: the
    stop-string sweep of one prompt (boundary) and the greedy judge of requests of `greedy_tokens` (greedy),
    on the first math prompt, or on prompts in turn until one diverges (`until_greedy`)."""
    sink, candidate = Sink(), engines(fault)
    chosen = prompts(("math", "code", "chat"), 4) if until_greedy else prompts(("math",), 1)
    if sweep:
        try:
            stop_suite.test_stop_strings_on_every_prompt(prompt=chosen[0], baseline=baseline, candidate=candidate,
                                                         tokenizer=tokenizer(), fitted_prompts=fitted_prompts(),
                                                         eos_token_id=tokenizer().eos_token_id, findings=sink)
        except pytest.fail.Exception:
            pass
    for prompt in chosen:
        req = greedy_ids_request(fitted_prompts().ids(prompt), greedy_tokens, f"greedy-{prompt.id}")
        try:
            judge_greedy(req, prompt, baseline.generate(req), candidate.generate(req), baseline=baseline,
                         candidate=candidate, tokenizer=tokenizer(), suite_config=suite_config(),
                         calibration=FixedCalibration(FLOOR), eos_token_id=tokenizer().eos_token_id, findings=sink)
        except pytest.fail.Exception:
            break
    return [{**f.__dict__, "test_id": f"{f.check}::{fault}"} for f in sink.items]


def test_two_checks_of_one_cause_make_one_cluster_and_another_cause_stays_apart(engines, baseline):
    short = real_findings(engines, baseline, FAULT)
    assert {f["check"] for f in short} == {"boundary", "greedy"}, [f["title"] for f in short]
    assert all(shape_of(f) is SHORT for f in short), [(f["check"], shape_of(f)) for f in short]
    assert len({(f["check"], signature(f)) for f in short}) > 1, "titles alone would make more than one cluster"
    diverged = real_findings(engines, baseline, "kv_no_rollback", sweep=False, greedy_tokens=48, until_greedy=True)
    miscounted = real_findings(engines, baseline, "usage_miscount")
    assert diverged and miscounted and all(shape_of(f) is not SHORT for f in diverged + miscounted)
    clusters = cluster_findings(short + diverged + miscounted)
    by_shape = {c["shape"]: c for c in clusters}
    assert len(clusters) == 3 and set(by_shape) == {SHORT.key, None, "usage-over"}, clusters
    merged = by_shape[SHORT.key]
    assert [c["check"] for c in merged["checks"]] == ["boundary", "greedy"] and merged["count"] == len(short)
    assert merged["title"].startswith(SHORT.phrase)


def test_a_run_on_the_fault_leaves_one_issue_file_naming_every_check_it_broke(tmp_path):
    """The boundary and stop-string sweeps, the feature checks and the greedy check, at the budget of one prompt
    per class: the faulty engine's findings span several checks and titles, and make one issue file that names
    each of them; the correct engine in the same run has no finding."""
    selection = "test_boundary_sweep or test_stop_strings or test_features or test_greedy_matches_baseline"
    result = run_route_suite({"blockfault": f"reference:?fault={FAULT}", "correct": "reference:"},
                             ["--prompt-limit", "1", "--categories", "math,json", "-k", selection], tmp_path,
                             paths=["equivalence/test_boundaries.py", "equivalence/test_stop_strings.py",
                                    "equivalence/test_features.py", "equivalence/test_greedy.py"], timeout_s=1700)
    report = result.report
    assert report, result.describe()
    found = [f for f in report["findings"] if f["route"] == "blockfault" and f["severity"] in ("bug", "error")]
    checks = {f["check"] for f in found}
    assert len(checks) >= 2 and len({(f["check"], signature(f)) for f in found}) > len(checks), result.describe()
    assert not [f for f in report["findings"] if f["route"] == "correct" and f["severity"] not in ("info", "engine")]
    mine = [c for c in report["clusters"] if c["route"] == "blockfault"]
    assert len(mine) == 1 and mine[0]["shape"] == SHORT.key and mine[0]["count"] == len(found), mine
    issues = [p for p in report["issue_files"]]
    assert issues == [mine[0]["issue"]], issues
    text = (result.run_dir / mine[0]["issue"]).read_text()
    named = re.search(r"Every check that saw it.*?\n\n(.*?)\n\n", text, re.DOTALL)
    assert named and {row.split("|")[1].strip() for row in named.group(1).splitlines()[2:]} == checks, text[:3000]


def test_a_dropped_stream_capability_seen_by_streaming_and_chat_is_one_cause():
    """llama.cpp's draft-simple streams without token ids on completions and on chat (run of 2026-12-04: two issue
    files with the same title); the check names the cause, so both checks land in one cluster, and a finding of
    the same check with another cause stays apart."""
    cause = "candidate 'c' streams answers without the token ids (logprob entries) the baseline's stream carries"
    dropped = [dict(check=check, severity="bug", route="c", prompt_id=f"p{i}", title=cause,
                    details={"rule": "ids", "cause": cause}) for i, check in enumerate(("streaming", "chat", "chat"))]
    other = dict(check="chat", severity="bug", route="c", prompt_id="p9", title="chat answer differs at token 3",
                 details={"rule": "text"})
    clusters = cluster_findings([*dropped, other])
    assert len(clusters) == 2
    merged = next(c for c in clusters if c["signature"] == cause)
    assert sorted(row["check"] for row in merged["checks"]) == ["chat", "streaming"]
    assert merged["count"] == 3 and "chat" in merged["title"] and "streaming" in merged["title"]


def test_a_sweep_whose_first_case_ends_in_place_shows_the_stop_its_next_cases_run_past():
    """tokens_after_stop at max_tokens=2 ends where the baseline does, only its finish_reason wrong; its next cases
    run past the stop, and the sweep's rule lines say so: the finding shows past-stop, like its other variants (the
    mutation table's row made five issue files before), and without those lines it shows none."""
    first = "[eos max_tokens=2] candidate 'c': finish_reason 'length' but the output ends at a stop condition"
    later = ("[eos max_tokens=3] candidate 'c': 1 token(s) after the stop condition completed at token 1: '<s>' "
             "(baseline, same request: honours every rule checked)")
    details = {"diff": f"{first}\n{later}", "baseline_tokens": [19, 2], "candidate_tokens": [19, 2],
               "first_case": {"max_tokens": 2}}
    finding = {"check": "boundary", "severity": "bug", "route": "c", "title": "eos boundary violations", "details":
               details}
    assert shape_of(finding) is BY_KEY["past-stop"]
    assert shape_of({**finding, "details": {**details, "diff": first}}) is None
