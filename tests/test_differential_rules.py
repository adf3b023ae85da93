"""Differential rules (issue #20 part 1): what both routes break alike is engine behaviour, not a finding.

Unit level: each rule's signature compares per request (a usage count off by the same amount, stop ids
ignored alike, an n answer billed as one choice even when the sampled choices differ), `judge` sorts
a pair, and the report shows the notes. Engine level: the reference engine's quirks do what the real
servers do. Run level, both ways at the same budget (a subprocess `-k "boundary or n_greedy"`): the
quirks planted on both routes give baseline "engine" notes, no candidate finding, each rule's part
"not verified: the engine itself ..." and a run that is not "avoid"; the same quirks on the candidate
only give "bug" findings quoting the baseline's answer to the same request.
"""
from __future__ import annotations

import pytest

from spec_route_suite.equivalence.boundaries import Case, run_sweep
from spec_route_suite.equivalence.differential import Differential
from spec_route_suite.equivalence.rules import (answer_violations, choices_violations, judge, min_tokens_violations,
                                                stream_violations)
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.spec import ConfigError, parse_route_uri
from spec_route_suite.reports.findings import SEVERITIES, Finding
from spec_route_suite.reports.render_markdown import render_summary
from tests.mutation import run_route_suite
from tests.test_greedy_routes import Sink, handle, prompts, reference_route, tokenizer
from spec_route_suite.embedded import TARGET_DIR

EOS = 2
QUIRKS = "usage_counts_stop,ignore_stop_token_ids,n_usage_one_choice"
SELECTION = ["-k", "boundary_sweep or n_greedy", "--prompt-limit", "1"]
PATHS = ["equivalence/test_boundaries.py", "equivalence/test_features.py"]


def decode(ids):
    return "".join(chr(ord("a") + i % 26) for i in ids)


def answer(tokens, finish, usage=None, choices=()):
    return Completion(token_ids=tuple(tokens), text=decode(tokens), finish_reason=finish, route="r",
                      usage_completion_tokens=len(tokens) if usage is None else usage, choices=tuple(choices))


def request(max_tokens, **kw):
    return Request(prompt_ids=(1,), max_tokens=max_tokens, **kw)


# ---------------------------------------------------------------- the rules, one answer and a pair

def test_usage_off_by_the_same_amount_is_shared_and_by_another_is_not():
    req = request(5, stop=(decode([6]),))
    ids = frozenset({EOS})
    plus_one = answer([5], "stop", usage=2)
    plus_two = answer([5], "stop", usage=3)
    same = judge(baseline=answer_violations(request=req, completion=plus_one, decode=decode, stop_ids=ids),
                 candidate=answer_violations(request=req, completion=plus_one, decode=decode, stop_ids=ids))
    assert [v.rule for v in same.shared] == ["usage"] and not same.candidate and not same.baseline
    other = judge(baseline=answer_violations(request=req, completion=plus_one, decode=decode, stop_ids=ids),
                  candidate=answer_violations(request=req, completion=plus_two, decode=decode, stop_ids=ids))
    assert not other.shared and [v.rule for v in other.candidate] == ["usage"] and other.baseline
    alone = judge(baseline=[], candidate=answer_violations(request=req, completion=plus_one, decode=decode,
                                                           stop_ids=ids))
    assert [v.detail for v in alone.candidate] == ["usage.completion_tokens=2 but 1 tokens returned"]


def test_stop_ids_ignored_is_one_rule_and_a_late_stop_is_another():
    req = request(4, stop_token_ids=(6,))
    ids = frozenset({EOS, 6})
    ran_on = answer_violations(request=req, completion=answer([5, 6, 7, 8], "length"), decode=decode, stop_ids=ids)
    at_cap = answer_violations(request=request(2, stop_token_ids=(6,)), completion=answer([5, 6], "length"),
                               decode=decode, stop_ids=ids)
    late = answer_violations(request=req, completion=answer([5, 6, 7], "stop"), decode=decode, stop_ids=ids)
    assert [(v.rule, v.signature) for v in ran_on] == [("stop_token_ids", "stop token id ignored (the answer runs "
                                                                          "on past it)")]
    assert [v.key for v in at_cap] == [v.key for v in ran_on], "'length' at the cap on the stop id is the same rule"
    assert [(v.rule, v.signature) for v in late] == [("stop_token_ids", "stop token id 1 token(s) kept after it")]
    assert not judge(baseline=ran_on, candidate=late).shared


def test_n_usage_billed_as_one_choice_compares_across_different_sampled_choices():
    one = answer([5, 6], "length", usage=2, choices=[answer([5, 6], "length"), answer([7, 8], "length")])
    other = answer([9, 9], "length", usage=2, choices=[answer([9, 9], "length"), answer([3, 4], "length")])
    summed = answer([5, 6], "length", usage=4, choices=[answer([5, 6], "length"), answer([7, 8], "length")])
    assert choices_violations(summed, n=2) == []
    assert [v.signature for v in choices_violations(one, n=2)] == ["usage bills one choice's tokens, not the sum"]
    assert judge(baseline=choices_violations(other, n=2), candidate=choices_violations(one, n=2)).shared
    assert [v.rule for v in choices_violations(one, n=3)] == ["n_choices", "n_usage"]


def test_min_tokens_and_stream_rules_name_their_violations():
    early = answer([5, EOS], "stop")
    assert [v.rule for v in min_tokens_violations(out=early, min_tokens=6, max_tokens=8, stop_ids={EOS})] == [
        "min_tokens"]
    assert min_tokens_violations(out=answer([5] * 8, "length"), min_tokens=6, max_tokens=8, stop_ids={EOS}) == []
    good = answer([5, 6], "length")
    counted = answer([5, 6], "length", usage=3)
    assert stream_violations(plain=good, streamed=good) == []
    (stream,) = stream_violations(plain=good, streamed=counted)
    assert stream.rule == "usage" and stream.signature.startswith("stream ")


class _Fixed:
    def __init__(self, name: str, completion: Completion):
        self.name, self._completion = name, completion

    def generate(self, req: Request) -> Completion:
        return self._completion


def test_a_shared_violation_is_one_engine_note_and_a_part_not_verified_never_a_finding():
    case = Case("stop_string", request(5, stop=(decode([6]),)), frozenset({EOS}))
    quirky = answer([5], "stop", usage=2)
    sink = Sink()
    differential = Differential(sink, check="boundary", baseline=_Fixed("baseline", quirky),
                                candidate=_Fixed("candidate", quirky))
    result = run_sweep(baseline=_Fixed("baseline", quirky), candidate=_Fixed("candidate", quirky),
                       cases=[case, case], decode=decode, differential=differential)
    (note,) = differential.close()
    assert result.problems == [] and result.baseline_problems == [] and len(result.shared) == 2
    assert note.severity == "engine" and note.route == "baseline" and not note.fails_route
    assert note.details["baseline_control"]["usage_completion_tokens"] == 2
    (cover,) = [m for kind, m in sink.measurements if kind == "coverage"]
    assert cover["part"] == "usage" and cover["verified"] is False
    assert cover["reason"].startswith("the engine itself does not honour usage.completion_tokens")
    correct = Completion(token_ids=(5, 6), text=decode([5]), finish_reason="stop", route="r", usage_completion_tokens=2)
    alone = run_sweep(baseline=_Fixed("baseline", correct), candidate=_Fixed("candidate", quirky), cases=[case],
                      decode=decode)
    assert alone.problems and "baseline, same request: honours every rule checked" in alone.problems[0]


def test_engine_severity_fails_nothing_and_the_summary_groups_equal_notes():
    assert "engine" in SEVERITIES
    note = Finding(check="boundary", severity="engine", route="baseline", title="engine behaviour on both routes: x",
                   details={"requests": ["stop_string max_tokens=2"]}, test_id="t::a")
    again = Finding(check="boundary", severity="engine", route="baseline", title=note.title,
                    details={"requests": ["stop_string max_tokens=3"]}, test_id="t::b")
    report = {"verdict": "pilot", "verdict_reason": "r", "run_id": "x", "duration_s": 1, "complete": True,
              "config": {}, "findings": [note.__dict__, again.__dict__], "not_verified": [],
              "findings_accounting": {"recorded": 2, "received": 2}}
    summary = render_summary(report)
    section = summary.split("## Engine behaviour (both routes)")[1].split("##")[0]
    assert section.count("engine behaviour on both routes: x") == 1 and "2 test(s)" in section
    assert "`stop_string max_tokens=2`" in section and "`stop_string max_tokens=3`" in section


# ---------------------------------------------------------------- the reference engine's quirks

@pytest.mark.parametrize("uri", ["reference:?quirk=nope", "reference:?quirk=usage_counts_stop,nope"])
def test_an_unknown_quirk_names_its_field(uri):
    from spec_route_suite.reference import engine_config_from_spec
    with pytest.raises(ConfigError) as err:
        engine_config_from_spec(parse_route_uri("candidate", uri, base=TARGET_DIR))
    assert err.value.field == "candidate.quirk"


@pytest.fixture(scope="module")
def engines():
    made = {"plain": reference_route("plain"), "quirky": reference_route("quirky", quirk=QUIRKS)}
    yield {name: handle(route, name) for name, route in made.items()}
    for route in made.values():
        route.batcher.close()


def test_the_quirks_do_what_the_real_servers_do(engines):
    from spec_route_suite.tokenizers import encode_prompt
    ids = encode_prompt(tokenizer(), prompts(("math",), 1)[0].text)
    plain, quirky = engines["plain"], engines["quirky"]
    reference = plain.generate(Request(prompt_ids=ids, max_tokens=12))
    stop = tokenizer().decode([reference.token_ids[3]])
    by_string = Request(prompt_ids=ids, max_tokens=12, stop=(stop,), request_id="s")
    kept, cut = plain.generate(by_string), quirky.generate(by_string)
    assert kept.text == cut.text and len(cut.token_ids) < len(kept.token_ids) == cut.usage_completion_tokens
    by_id = Request(prompt_ids=ids, max_tokens=12, stop_token_ids=(reference.token_ids[2],), request_id="i")
    assert len(plain.generate(by_id).token_ids) == 3 and quirky.generate(by_id).token_ids == reference.token_ids
    many = Request(prompt_ids=ids, max_tokens=12, n=3, request_id="n")
    assert plain.generate(many).usage_completion_tokens == 3 * len(reference.token_ids)
    assert quirky.generate(many).usage_completion_tokens == len(reference.token_ids)


# ---------------------------------------------------------------- the route suite, both ways

@pytest.fixture(scope="module")
def quirk_runs(tmp_path_factory):
    """One run with the quirks on both routes, one with them on the candidate only: the same tests and budget."""
    quirky = f"reference:?quirk={QUIRKS}"
    both = run_route_suite({"quirky": quirky}, SELECTION, tmp_path_factory.mktemp("both"), paths=PATHS,
                           baseline_uri=quirky)
    only = run_route_suite({"quirky": quirky}, SELECTION, tmp_path_factory.mktemp("only"), paths=PATHS,
                           baseline_uri="reference:")
    return both, only


RULE_PARTS = ("usage", "stop_token_ids", "n_usage")


def test_quirks_on_both_routes_are_engine_notes_not_findings(quirk_runs):
    both, _ = quirk_runs
    assert both.exit_code == 0, both.describe()
    notes = [f for f in both.findings if f["severity"] == "engine"]
    assert {f["details"]["rule"] for f in notes} >= set(RULE_PARTS), both.describe()
    assert all(f["route"] == "baseline" for f in notes)
    assert not [f for f in both.findings if f["severity"] in ("bug", "error")], both.findings
    rows = {(r["check"], r["part"]): r for r in both.report["coverage"] if r["route"] == "quirky"}
    for check, part in (("boundary", "usage"), ("boundary", "stop_token_ids"), ("features", "n_usage")):
        row = rows[(check, part)]
        assert row["status"] == "not verified" and row["why"].startswith("the engine itself does not honour"), row
    assert both.report["verdict"] != "avoid"
    assert "about the baseline" not in both.report["verdict_reason"]
    summary = (both.run_dir / "summary.md").read_text()
    assert "## Engine behaviour (both routes)" in summary


def test_quirks_on_the_candidate_only_are_findings_with_the_baselines_answer(quirk_runs):
    _, only = quirk_runs
    assert only.exit_code == 1, only.describe()
    assert not [f for f in only.findings if f["severity"] == "engine"]
    bugs = [f for f in only.findings if f["severity"] == "bug" and f["route"] == "quirky"]
    boundary = [f for f in bugs if f["check"] == "boundary"]
    features = [f for f in bugs if f["check"] == "features" and f["details"].get("feature") == "n"]
    assert boundary and features, only.describe()
    assert any("usage.completion_tokens=" in f["details"]["diff"] for f in boundary)
    assert any("after the stop condition" in f["details"]["diff"] or "ends at a stop condition" in f["details"]["diff"]
               for f in boundary)
    for finding in boundary:
        control = finding["details"]["baseline_control"]
        assert control["violations"] == ["none: the baseline honours every rule here"] and control["tokens"]
    (n_bug,) = features
    assert n_bug["details"]["baseline_control"]["usage_completion_tokens"] == 4 * len(
        n_bug["details"]["baseline_control"]["tokens"]), n_bug["details"]["baseline_control"]
