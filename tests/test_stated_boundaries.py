"""The stated-boundary sweep: passes the correct engine at every limit, catches a chunk-edge fault.

Route level: equivalence/test_stated_boundaries.py against the reference engine with a small chunked-prefill
budget and a short drafter, correct and with `chunk_edge_off_by_one`. Unit level: where the limits come from,
where the prompts go, prompts of an exact length.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import spec_route_suite.equivalence.test_stated_boundaries as edge_suite
from spec_route_suite.equivalence import calibration as calib
from spec_route_suite.equivalence.stated_boundaries import KINDS, Stated, plan, stated_limit
from spec_route_suite.equivalence.stated_sweep import SHOWN, EdgeEvidence, edge_finding, shown, unreachable
from spec_route_suite.prompts.exact import ExactPrompts
from spec_route_suite.prompts.fit import ContextFit, RouteContext
from spec_route_suite.prompts.records import load_prompt_set
from spec_route_suite.routes.base import Completion, Request, RouteInventory
from spec_route_suite.routes.spec import RouteSpec
from spec_route_suite.stressors.near_tie import NearTiePolicy
from tests.test_greedy_routes import FixedCalibration, ReferenceHandles, Sink, baseline_handle, tokenizer

CHUNK = 48
DRAFT_LEN = 200
FLOOR = calib.Calibration(route="baseline", tau=calib.TAU_FLOOR, logprob_tol=calib.TOL_FLOOR, noise=1e-5)


def run_edges(kind, candidate, *, baseline_context: int = 512):
    sink = Sink()
    fit = ContextFit((RouteContext("baseline", baseline_context, "model"), RouteContext("candidate", 512, "model")))
    config = type("Config", (), {"categories": ("math", "code", "chat", "json", "long"), "prompt_sources": (), "seed": 0,
                                 "prompt_limit": None})()
    try:
        edge_suite.test_greedy_at_stated_boundaries(
            kind=kind, baseline=baseline_handle(), candidate=candidate, tokenizer=tokenizer(), context_fit=fit,
            suite_config=config, near_tie_policy=NearTiePolicy(mode="strict", calibration=FixedCalibration(FLOOR)),
            eos_token_id=tokenizer().eos_token_id, findings=sink)
    except pytest.fail.Exception as failure:
        return str(failure), sink
    return None, sink


@pytest.fixture(scope="module")
def engines():
    handles = ReferenceHandles(prefill_chunk=str(CHUNK), draft_max_len=str(DRAFT_LEN))
    yield handles
    handles.close()


@pytest.mark.parametrize("kind", KINDS)
def test_correct_engine_passes_at_every_stated_limit(engines, kind):
    failure, sink = run_edges(kind, engines())
    assert failure is None and sink.items == [], failure
    (record,) = [data for name, data in sink.measurements if name == "coverage"]
    assert record["verified"] and record.get("applicable", True) and record["ran"]["edge requests"] > 0, record


def test_a_limit_only_a_smaller_baseline_context_hides_is_not_verified_not_not_applicable(engines):
    """Issue #34 item 4: the drafter's max length (200) is inside the candidate engine's own context (512) but past
    a baseline's 192: the engine has the limit, the sweep cannot compare it there: "not verified", never n/a. A
    limit past the engine's own context is n/a (the engine itself says no request reaches it)."""
    with pytest.raises(pytest.skip.Exception, match="not verified"):
        run_edges("draft_max_len", engines(), baseline_context=192)
    past = ReferenceHandles(draft_max_len="600")
    try:
        failure, sink = run_edges("draft_max_len", past())
    finally:
        past.close()
    (record,) = [data for name, data in sink.measurements if name == "coverage"]
    assert failure is None and record["applicable"] is False and "engine's context (512 tokens)" in record["reason"]


def test_chunk_edge_fault_is_caught_at_the_chunk_edge(engines):
    failure, sink = run_edges("chunked_prefill", engines("chunk_edge_off_by_one"))
    assert failure and f"= 1 x budget +1" in failure or "= 2 x budget +1" in failure, failure
    (finding,) = [f for f in sink.items if f.severity != "engine"]
    assert finding.check == "boundary" and finding.severity == "bug" and "chunked-prefill budget" in finding.title


def test_the_fault_only_bites_at_the_edge(engines):
    """Control: the same faulty engine passes the context-end sweep, whose prompts sit on no chunk edge."""
    failure, _ = run_edges("context_end", engines("chunk_edge_off_by_one"))
    assert failure is None, failure


# ---- unit level -------------------------------------------------------------------------------

def test_limits_come_from_the_server_then_the_routes_file_and_zero_means_none():
    spec = RouteSpec(name="c", kind="openai", options=(("chunked_prefill_tokens", "64"),))
    stated = RouteInventory(engine="x", extra={"boundaries": {"chunked_prefill_tokens": 32, "draft_max_len": 0}})
    assert stated_limit("chunked_prefill", inventory=stated, spec=spec, context=512).tokens == 32
    assert stated_limit("chunked_prefill", inventory=RouteInventory(engine="x"), spec=spec, context=512).source == \
        "declared in the routes file"
    none = stated_limit("draft_max_len", inventory=stated, spec=spec, context=512)
    assert none.tokens == 0 and plan(none, k=4, context=512)[0] == []
    unknown = stated_limit("draft_max_len", inventory=RouteInventory(engine="x"), spec=None, context=512)
    assert not unknown.known and "options.draft_max_len" in unknown.describe()


def test_plans_sit_at_the_limit_and_fit_the_context():
    chunk, _ = plan(Stated("chunked_prefill", 64, "s"), k=4, context=512)
    assert [c.prompt_tokens for c in chunk] == [63, 64, 65, 127, 128, 129] and {c.max_tokens for c in chunk} == {10}
    end, _ = plan(Stated("context_end", 512, "s"), k=4, context=512)
    assert [c.prompt_tokens + c.max_tokens for c in end] == [511, 512]
    near, _ = plan(Stated("draft_max_len", 508, "s"), k=4, context=512)
    assert all(c.prompt_tokens + c.max_tokens <= 512 for c in near) and 509 in [c.prompt_tokens for c in near]
    assert plan(Stated("chunked_prefill", 2048, "s"), k=4, context=512) == ([], plan(
        Stated("chunked_prefill", 2048, "s"), k=4, context=512)[1]) and "not below" in plan(
        Stated("chunked_prefill", 2048, "s"), k=4, context=512)[1]


def test_exact_prompts_have_the_length_asked_for_and_differ_by_source():
    exact = ExactPrompts(tokenizer(), load_prompt_set(("math", "long")))
    for length in (2, 47, 48, 49, 300):
        a, b = exact.ids(length), exact.ids(length, source=1)
        assert len(a) == len(b) == length and a[0] == tokenizer().bos_token_id
    assert exact.ids(64) != exact.ids(64, source=1)


# ---- the judgement, from values ----------------------------------------------------------------------

def _route(name: str) -> SimpleNamespace:
    """A handle as a finding's repro sees one: its name, and how it puts a request on the wire."""
    return SimpleNamespace(name=name, repro_wire=lambda req: {"request_id": req.request_id})


def test_a_limit_no_request_reaches_is_not_applicable_when_the_engine_says_so_else_not_verified():
    past, why = Stated("draft_max_len", 600, "server"), "the limit is past the pair's context"
    row, skip = unreachable(past, why, 512)
    assert row == {"verified": True, "applicable": False, "reason": f"{why}: the bug class needs a limit inside the "
                                                                     f"engine's context (512 tokens)"} and skip == ""
    row, skip = unreachable(past, why, 4096)
    assert not row["verified"] and "applicable" not in row and skip == row["reason"][:500]
    assert "the candidate's own context is 4096 tokens" in skip


def test_a_wrong_answer_is_a_bug_a_failed_request_alone_an_error_and_nothing_is_no_finding():
    limit = Stated("chunked_prefill", 64, "server")
    req = Request(prompt_ids=(1, 2, 3), max_tokens=10, temperature=0.0, request_id="edge-chunked_prefill-64-10-0")
    answer = Completion(token_ids=(4, 5), text="", finish_reason="length", route="r")
    routes = dict(baseline=_route("b"), candidate=_route("c"))
    assert edge_finding("chunked_prefill", limit, 4, EdgeEvidence(), **routes) is None
    failed = EdgeEvidence(failures=["[edge] candidate failed"], first=(req, "edge", answer, None))
    error = edge_finding("chunked_prefill", limit, 4, failed, **routes)
    assert error.severity == "error" and error.details["candidate_tokens"] is None
    assert error.details["repro"]["judge"] == "error" and error.prompt_id == "chunked_prefill@64"
    wrong = EdgeEvidence(problems=[f"[edge] problem {n}" for n in range(SHOWN + 2)], failures=["[edge] failed"],
                         first=(req, "edge", answer, answer))
    bug = edge_finding("chunked_prefill", limit, 4, wrong, **routes)
    assert bug.severity == "bug" and bug.details["repro"]["judge"] == "parity" and bug.details["speculation_depth"] == 4
    assert bug.details["problems"][-1] == "[edge] failed"   # the failures after the wrong answers
    assert bug.details["diff"] == shown(wrong.problems + wrong.failures)
    assert bug.details["diff"].endswith(f"\n... {len(wrong.problems) + 1 - SHOWN} more")
    assert bug.title == ("greedy output differs from the baseline at the chunked-prefill budget (chunked-prefill "
                         "budget 64 tokens (server); first: edge)")
