"""Streaming parity's judging: what the two deliveries (plain and streamed) of one request show, and what of that
the baseline's own two deliveries of the same request excuse.

Why: equivalence/test_streaming.py and the chat shape's stream test read as "send, judge, record, fail"; the
comparison of the deliveries, the classification of a split, the id-gap and accounting rules against the baseline's
stream, and the evidence count live here, where self-tests reach them without importing a check's test module.
Environment: none.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from spec_route_suite.equivalence.differential import Differential, control, control_line, not_honoured
from spec_route_suite.equivalence.divergence import classify_divergence
from spec_route_suite.equivalence.greedy import compare_greedy, exposure
from spec_route_suite.equivalence.rules import Violation, details, stream_violations
from spec_route_suite.equivalence.stream_edits import answer_edits, describe as describe_edits, id_edits, left_out
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.textlevel import aligned, describe, is_text_level, title_suffix
from spec_route_suite.reports.findings import STREAM_DIFFERS, Finding
from spec_route_suite.reports.repro_spec import ANSWER_FIELDS, logprobs_repro, stream_repro


def id_gap(*, plain: Completion, streamed: Completion) -> str:
    """Why the stream's token ids cannot be compared with the plain answer's ("" when they can): the server
    gave incomplete ids on the stream (`id_gap`, ids re-derived from text), or a text-level stream beside an
    id-level plain answer. Such a stream is compared by text; its ids are "not verified", not "different"."""
    if streamed.id_gap:
        return streamed.id_gap
    if streamed.text_level and not plain.text_level:
        return "the stream carries no token ids while the plain answer does (the stream is text-level)"
    return ""


def delivery_differences(*, plain: Completion, streamed: Completion, compare_ids: bool = True) -> list[str]:
    """Where the two deliveries of one greedy request differ, naming both sides (ids only when comparable)."""
    problems = []
    if compare_ids and streamed.token_ids != plain.token_ids and not is_text_level(plain, streamed):
        problems.append(f"token ids differ: stream {list(streamed.token_ids)[:24]} "
                        f"vs non-stream {list(plain.token_ids)[:24]}")
    if streamed.text != plain.text:
        problems.append(f"text differs: stream {streamed.text[:120]!r} vs non-stream {plain.text[:120]!r}")
    if streamed.finish_reason != plain.finish_reason:
        problems.append(f"finish_reason differs: stream {streamed.finish_reason!r} "
                        f"vs non-stream {plain.finish_reason!r}")
    return problems


def accounting_problems(*, plain: Completion, streamed: Completion) -> list[str]:
    """finish_reason and usage that do not add up, on either delivery (equivalence/rules.py stream_violations)."""
    return details(stream_violations(plain=plain, streamed=streamed))


def stream_problems(*, plain: Completion, streamed: Completion) -> list[str]:
    return delivery_differences(plain=plain, streamed=streamed) + accounting_problems(plain=plain, streamed=streamed)


def judge_stream(req, prompt_id, *, with_stop, baseline, candidate, tokenizer, suite_config, calibration,
                 eos_token_id, findings, check: str = "streaming") -> None:
    """Send `req` plain and streamed (with a stop string from the plain answer when asked) and compare: text
    always, token ids when the stream carries them all; the accounting rules against the baseline's own
    deliveries of the same request."""
    shape = "chat " if req.chat else ""
    req, plain = _plain_delivery(req, prompt_id, with_stop=with_stop, candidate=candidate, tokenizer=tokenizer)
    stream_req = replace(req, stream=True, request_id=req.request_id + "-sse")
    streamed = candidate.generate(stream_req)
    gap = id_gap(plain=plain, streamed=streamed)
    missing = left_out(plain, streamed) if gap else ()   # before aligning: the plain answer's own ids
    plain, streamed = aligned(plain, streamed, tokenizer)
    level = describe(plain, streamed)
    if is_text_level(plain, streamed):
        findings.measure("comparison", check=check, prompt_id=prompt_id, route=candidate.name, **level)
    controls = BaselineDeliveries(baseline, req, stream_req)
    shared_ids = not gap and _ids_differ_as_on_the_baseline(findings, check, plain, streamed, controls,
                                                             candidate=candidate, prompt_id=prompt_id, req=stream_req)
    compare_ids = not gap and not shared_ids
    problems = delivery_differences(plain=plain, streamed=streamed, compare_ids=compare_ids)
    verdict = _classify_split(baseline, req, plain, streamed, tokenizer, calibration, eos_token_id) if problems else None
    # a split at a near-tie keeps its own verdict (the policy decides); any other difference the baseline's own two
    # deliveries of the request show too, the same one at the same place, is the engine's
    engine_stream = bool(problems) and not (verdict is not None and verdict.is_near_tie) and \
        _streams_differ_as_on_the_baseline(findings, check, controls, plain, streamed, compare_ids=compare_ids,
                                           req=stream_req, candidate=candidate, prompt_id=prompt_id,
                                           tokenizer=tokenizer)
    if engine_stream:
        problems = []
    if problems:
        problems = _judge_split(findings, check, problems, verdict, level, req=req, baseline=baseline,
                                candidate=candidate, prompt_id=prompt_id, policy=suite_config.greedy_policy)
    dropped = gap and _ids_not_verified(findings, check, candidate, gap, missing, baseline_gap=controls.id_gap(),
                                        prompt_id=prompt_id, req=stream_req, controls=controls,
                                        compared=len(plain.text))
    accounting, control_details = _accounting_against_baseline(findings, check, plain, streamed, controls,
                                                               baseline=baseline, candidate=candidate,
                                                               prompt_id=prompt_id, stream_req=stream_req)
    problems += accounting
    # the count that matters: what the two deliveries had to agree on (token ids where both carry them, else text)
    unit, compared = stream_evidence(plain, streamed, by_text=bool(gap or shared_ids))
    findings.cover(check, candidate.name, verified=compared > 0 and not engine_stream,
                   ran={"chat streams" if req.chat else "streams": 1, unit: compared},
                   could_detect=f"a streamed {shape}answer that differs from the plain {shape}answer",
                   reason=coverage_reason(engine_stream=engine_stream, compared=compared, stream_req=stream_req))
    if dropped and not problems:
        pytest.fail(f"{shape}prompt {prompt_id}: candidate '{candidate.name}': {dropped}", pytrace=False)
    if not problems:
        return
    findings.add(Finding(
        check=check, severity="bug", route=candidate.name, prompt_id=prompt_id,
        title=(f"candidate '{candidate.name}' streams a different {shape}answer than it returns (prompt {prompt_id})"
               + title_suffix(plain, streamed)),
        details={"diff": "\n".join(problems), "stop": list(req.stop), "prompt_ids": list(req.prompt_ids), **level,
                 "cause": STREAM_DIFFERS, "stream_events": streamed.stream_events, "ids": gap or "compared",
                 "baseline_control": control_details,
                 "classification": verdict.to_details() if verdict is not None else None,
                 "repro": stream_repro(req, candidate=candidate, baseline=baseline,
                                       fields=ANSWER_FIELDS if not gap else ("text", "finish", "usage"))}))
    pytest.fail(f"{shape}prompt {prompt_id}: candidate '{candidate.name}' stream vs non-stream:\n"
                + "\n".join(problems + ([dropped] if dropped else [])), pytrace=False)


def _plain_delivery(req: Request, prompt_id, *, with_stop, candidate, tokenizer) -> tuple[Request, Completion]:
    """The request to stream and the candidate's plain answer to it: with a stop string from the plain answer's
    middle when asked (the request asked again with it), skipped "not verified" when the answer has none."""
    plain = candidate.generate(req)
    if with_stop:
        stop = stop_inside(plain, tokenizer)
        if stop is None:
            pytest.skip(f"not verified: no usable stop string in the output of prompt {prompt_id}")
        req = replace(req, stop=(stop,))
        plain = candidate.generate(req)
    return req, plain


def _judge_split(findings, check, problems: list[str], verdict, level, *, req: Request, baseline, candidate,
                 prompt_id: str, policy: str) -> list[str]:
    """The problems left once a classified split is judged: a near-tie under --greedy-policy classify is a
    "near-tie" finding (none left); otherwise the classification joins the problems."""
    if verdict is not None and verdict.is_near_tie and policy == "classify":
        findings.add(Finding(
            check=check, severity="near-tie", route=candidate.name, prompt_id=prompt_id,
            title=(f"candidate '{candidate.name}' stream and non-stream split at a near-tie "
                   f"(prompt {prompt_id})"),
            details={"diff": "\n".join(problems + [f"classification: {verdict.summary()}"]), **level,
                     "classification": verdict.to_details(), "prompt_ids": list(req.prompt_ids)}))
        return []
    if verdict is not None:
        problems.append(f"first split classified against baseline '{baseline.name}': {verdict.summary()}")
    return problems


def _accounting_against_baseline(findings, check, plain: Completion, streamed: Completion,
                                 controls: BaselineDeliveries, *, baseline, candidate, prompt_id: str,
                                 stream_req: Request) -> tuple[list[str], dict | None]:
    """(problems, baseline control): the accounting rules the candidate's deliveries break, judged against the
    baseline's own deliveries of the same request (asked for only when the candidate breaks one)."""
    ours = stream_violations(plain=plain, streamed=streamed)
    if not ours:
        return [], None
    theirs = controls.violations()
    if theirs is None:
        return [f"{v.detail} (no control: {controls.missing})" for v in ours], None
    differential = Differential(findings, check=check, baseline=baseline, candidate=candidate, prompt_id=prompt_id)
    judged = differential.judge(label=stream_req.request_id, request=stream_req,
                                baseline_answer=controls.streamed(), baseline_violations=theirs,
                                candidate_violations=ours)
    differential.close()
    return ([f"{v.detail} ({control_line(theirs)})" for v in judged.candidate],
            control(stream_req.request_id, controls.streamed(), theirs))


def stream_evidence(plain: Completion, streamed: Completion, *, by_text: bool) -> tuple[str, int]:
    """(unit, count) of what the two deliveries had to agree on: token ids where both carry them (`by_text` false),
    else characters of text."""
    if by_text:
        return "characters compared", len(plain.text)
    return "tokens compared", exposure(baseline=plain.token_ids, candidate=streamed.token_ids)


def coverage_reason(*, engine_stream: bool, compared: int, stream_req: Request) -> str:
    """Why the stream's comparison is not verified ("" when it is): the engine streams it differently on the
    baseline too, or nothing was compared."""
    if engine_stream:
        return not_honoured("stream_text", _stream_signature(stream_req))
    return "" if compared else "vacuous: the plain and the streamed answer are both empty"


def _ids_differ_as_on_the_baseline(findings, check, plain, streamed, controls, *, candidate, prompt_id: str,
                                   req: Request) -> bool:
    """Stream ids that differ from the plain answer's exactly as the baseline's two deliveries of the same request
    differ (the same ids, at the same places; their texts agree): engine behaviour (a note, the `ids` part not
    verified), not a different answer. A server whose parser keeps some tokens out of its stream (llama.cpp's
    reasoning parser drops `</think>` and the blank line after it from a streamed chat answer's ids) differs the
    same way on every route it serves."""
    ours = id_edits(plain, streamed)
    answers = controls.answers() if ours else None
    if not answers or id_edits(*answers) != ours:
        return False
    _engine_note(findings, check, controls, Violation("ids", describe_edits(ours, len(plain.token_ids)),
                                                      f"plain {len(plain.token_ids)} ids, stream "
                                                      f"{len(streamed.token_ids)} ids"),
                 candidate=candidate, prompt_id=prompt_id, req=req, baseline_answer=answers[1])
    return True


def _engine_note(findings, check, controls, rule: Violation, *, candidate, prompt_id: str, req: Request,
                 baseline_answer: Completion) -> None:
    """`rule` broken alike by both routes on the same request: one engine note, its part not verified."""
    differential = Differential(findings, check=check, baseline=controls.baseline, candidate=candidate,
                                prompt_id=prompt_id)
    differential.judge(label=req.request_id, request=req, baseline_answer=baseline_answer,
                       baseline_violations=[rule], candidate_violations=[rule])
    differential.close()


def _stream_signature(req: Request) -> str:
    return "the streamed answer differs from the plain answer" + (" with a stop string" if req.stop else "")


def _streams_differ_as_on_the_baseline(findings, check, controls, plain: Completion, streamed: Completion, *,
                                       compare_ids: bool, req: Request, candidate, prompt_id: str, tokenizer) -> bool:
    """The baseline's own two deliveries of the same request differ exactly as the candidate's do: the same text
    and finish_reason edits, at the same places (and the same ids, where both streams carry them all). The engine
    streams this request differently from how it returns it with or without speculation (vLLM 0.32's reasoning
    parser with a stop string, on the AR server too), so the comparison cannot show what speculation does: an
    engine note and the part not verified. Any other difference is judged as the candidate's."""
    answers = controls.answers()
    if not answers:
        return False
    ids = compare_ids and not controls.id_gap() and not is_text_level(plain, streamed, *answers)
    base_plain, base_streamed = aligned(*answers, tokenizer)
    theirs = answer_edits(base_plain, base_streamed, ids=ids)
    if not theirs or answer_edits(plain, streamed, ids=ids) != theirs:
        return False
    shown = delivery_differences(plain=base_plain, streamed=base_streamed, compare_ids=False)
    _engine_note(findings, check, controls, Violation("stream_text", _stream_signature(req), "; ".join(shown)),
                 candidate=candidate, prompt_id=prompt_id, req=req, baseline_answer=answers[1])
    return True


class BaselineDeliveries:
    """The baseline's plain and streamed answers to the same requests, asked for only when a judgement needs them."""

    def __init__(self, baseline, req: Request, stream_req: Request):
        self.baseline, self.req, self.stream_req = baseline, req, stream_req
        self.missing = "" if baseline.capabilities.stream else f"baseline '{baseline.name}' cannot stream"
        self._answers: tuple[Completion, Completion] | None = None

    def _get(self) -> tuple[Completion, Completion] | None:
        if self.missing:
            return None
        if self._answers is None:
            self._answers = (self.baseline.generate(self.req), self.baseline.generate(self.stream_req))
        return self._answers

    def answers(self) -> tuple[Completion, Completion] | None:
        """(plain, streamed), None when the baseline cannot stream."""
        return self._get()

    def streamed(self) -> Completion | None:
        answers = self._get()
        return answers[1] if answers else None

    def violations(self):
        answers = self._get()
        return None if answers is None else stream_violations(plain=answers[0], streamed=answers[1])

    def id_gap(self) -> str | None:
        """The baseline stream's own id gap ("" none), None when it cannot stream."""
        answers = self._get()
        return None if answers is None else id_gap(plain=answers[0], streamed=answers[1])


def _ids_not_verified(findings, check, candidate, gap: str, missing, *, baseline_gap: str | None, prompt_id: str,
                      req: Request, controls: BaselineDeliveries, compared: int) -> str | None:
    """A stream without a full set of ids: its text was compared (the text part verified), its ids were not. The
    baseline's stream leaving out the same ids at the same places (`missing`: stream_edits.left_out) makes it
    engine behaviour (a note); a baseline stream of the same request that carries every id, or leaves out others,
    makes it the candidate's: a finding (the returned problem, with its Finding recorded); a baseline that cannot
    stream leaves the ids part "not verified"."""
    findings.cover(check, candidate.name, verified=compared > 0, part="text", ran={"characters compared": compared},
                   could_detect="a streamed text or finish_reason that differs from the plain answer",
                   reason="" if compared else "vacuous: both deliveries are empty, nothing compared")
    if baseline_gap is None:
        findings.cover(check, candidate.name, verified=False, part="ids", ran={"streams": 1},
                       could_detect="streamed token ids that differ from the plain answer's",
                       reason=f"the stream's token ids are incomplete ({gap}): compared by text instead; no control: "
                              f"{controls.missing}")
        return None
    if baseline_gap and left_out(*controls.answers()) == missing:
        differential = Differential(findings, check=check, baseline=controls.baseline, candidate=candidate,
                                    prompt_id=prompt_id)
        gap_rule = Violation("ids", "stream token ids incomplete (re-derived from the text)", gap)
        differential.judge(label=req.request_id, request=req, baseline_answer=controls.streamed(),
                           baseline_violations=[replace(gap_rule, detail=baseline_gap)],
                           candidate_violations=[gap_rule])
        differential.close()
        return None
    theirs = (f"baseline '{controls.baseline.name}''s stream of the same request leaves out other ids ({baseline_gap})"
              if baseline_gap else f"baseline '{controls.baseline.name}''s stream of the same request carries them all")
    problem = f"the stream's token ids are incomplete ({gap}), while {theirs}"
    cause = (f"candidate '{candidate.name}' streams answers without the token ids (logprob entries) the "
             f"baseline's stream of the same request carries")   # seen by the streaming and the chat checks
    findings.add(Finding(
        check=check, severity="bug", route=candidate.name, prompt_id=prompt_id, title=cause,
        details={"rule": "ids", "diff": problem, "prompt_ids": list(req.prompt_ids), "cause": cause,
                 "left_out": describe_edits(missing),
                 "baseline_control": control(req.request_id, controls.streamed()),
                 "repro": logprobs_repro(replace(req, logprobs=1), candidate=candidate, baseline=controls.baseline,
                                         tolerance=0.0, mode="missing")}))
    return problem


def _classify_split(baseline, req, plain, streamed, tokenizer, calibration, eos_token_id):
    """A token split between the deliveries is nondeterminism; classify it like a greedy divergence."""
    divergence = compare_greedy(baseline=plain, candidate=streamed, decode=tokenizer.decode)
    if divergence is None:
        return None
    return classify_divergence(baseline=baseline, prompt_ids=req.prompt_ids, divergence=divergence,
                               baseline_completion=plain, candidate_completion=streamed, max_tokens=req.max_tokens,
                               tau=calibration.get().tau, eos_token_id=eos_token_id, decode=tokenizer.decode)


def stop_inside(completion: Completion, tokenizer) -> str | None:
    """A short piece of the output's middle, so the stop lands inside a speculative block."""
    tokens = completion.token_ids
    for position in range(len(tokens) // 3, len(tokens)):
        piece = tokenizer.decode([tokens[position]]).strip()
        if len(piece) >= 2 and piece.isprintable():
            return piece
    return None
