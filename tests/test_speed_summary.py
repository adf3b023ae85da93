"""The speed gate's per-level summary: a stream whose pieces came at once times no decode and no gaps.

On a loaded machine vLLM for CPU delivered all 32 pieces of a streamed answer within 0.7 ms, and the table read
"decode 45,477 tok/s, ITL 0 ms". Such an answer's decode speed is the whole answer's (tokens over the client's
wait) and the row says how many streams came at once; a stream with real gaps is timed by them.
"""
from __future__ import annotations

from spec_route_suite.routes.base import Completion
from spec_route_suite.reports.speed import speed_table
from spec_route_suite.stressors.driver import LoadRun, Outcome
from spec_route_suite.stressors.speed.gate import summarize


def _outcome(name: str, event_times: tuple[float, ...], wait_s: float) -> Outcome:
    answer = Completion(token_ids=tuple(range(len(event_times))), text="x" * len(event_times), finish_reason="length",
                        route="r", latency_s=wait_s, event_times=event_times)
    return Outcome(key=name, request_id=name, completion=answer, error_kind=None, error=None, started_s=0.0,
                   ended_s=wait_s, in_flight_at_start=0)


def _run(*outcomes: Outcome) -> LoadRun:
    return LoadRun(outcomes=outcomes, concurrency=1, max_in_flight=1, wall_s=max(o.ended_s for o in outcomes),
                   started_at=0.0)


def test_a_stream_with_gaps_is_timed_by_them():
    steady = _outcome("steady", tuple(0.1 + 0.01 * i for i in range(11)), wait_s=0.2)   # 10 gaps of 10 ms
    row = summarize(_run(steady))
    assert row["buffered"] == 0 and row["decode_tok_s"] == 100.0 and row["itl_p50_s"] == 0.01


def test_a_stream_that_came_at_once_gets_the_whole_answers_rate_and_no_gaps():
    at_once = _outcome("at-once", tuple(0.8 + 1e-5 * i for i in range(32)), wait_s=0.8)
    row = summarize(_run(at_once))
    assert row["buffered"] == 1 and row["decode_tok_s"] == 40.0 and row["itl_p50_s"] is None
    table = "\n".join(speed_table({"rows": {"baseline": [{**row, "concurrency": 1}],
                                            "candidate": [{**row, "concurrency": 1}]}, "speedup": []}))
    assert "40 (1 of 1 streams came at once)" in table


def test_each_level_states_the_acceptance_of_its_own_answers():
    """1 + accepted / steps over the answers that state their drafting (llama.cpp timings); none: not stated."""
    def drafted(name: str, steps: int, accepted: int) -> Outcome:
        plain = _outcome(name, (0.1, 0.2), wait_s=0.3)
        return Outcome(**{**plain.__dict__, "completion": Completion(
            **{**plain.completion.__dict__, "draft_tokens": 7 * steps, "accepted_tokens": accepted,
               "draft_steps": steps})})
    row = summarize(_run(drafted("a", 4, 8), drafted("b", 6, 2), _outcome("c", (0.1,), wait_s=0.2)))
    assert row["acceptance_length"] == 2.0 and row["acceptance_answers"] == 2
    assert summarize(_run(_outcome("d", (0.1,), wait_s=0.2)))["acceptance_length"] is None
    table = "\n".join(speed_table({"rows": {"baseline": [{**row, "concurrency": 1}],
                                             "candidate": [{**row, "concurrency": 1}]}, "speedup": []}))
    assert "2.00 (2 answers)" in table
