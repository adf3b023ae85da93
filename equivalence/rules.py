"""Named serving rules: each evaluated on ONE answer, then judged per request against the baseline's answer.

Why: a speculative route is judged by how it differs from its baseline (issue #20). What an engine
does the same way with speculation off (usage counting the stop string's token, stop_token_ids
ignored, an n > 1 answer billed as one answer) is a fact about the engine, not a speculation
finding. So every absolute rule a check applies to one answer is named here and evaluated alike
on the baseline's and the candidate's answer to the SAME request. A violation carries a
`signature`, a request-independent phrase of how the rule was broken ("usage.completion_tokens is
1 more than the tokens returned"), and `judge` sorts the two answers' violations:
- the same rule broken the same way on both: engine behaviour (`shared`: an "engine" note, the
  rule's coverage part "not verified", equivalence/differential.py);
- broken only on the candidate, or another way: a finding (`candidate`) that quotes the baseline's
  answer to the same request as the control;
- broken only on the baseline: the reference is not trustworthy there (`baseline`).
Checks never name an engine: what both routes do alike is observed per request, never assumed.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from spec_route_suite.routes.base import Completion, Request

Decode = Callable[[Sequence[int]], str]
FINISH_REASONS = ("stop", "length")

# rule -> what honouring it means ("the engine itself does not honour ...")
RULES: dict[str, str] = {
    "max_tokens": "max_tokens (no more tokens than asked for)",
    "usage": "usage.completion_tokens (equal to the tokens returned)",
    "eos": "EOS (nothing after it)",
    "stop_token_ids": "stop_token_ids (stop at the id, nothing after it)",
    "stop_string": "stop strings (nothing after the stop, the string cut from the text)",
    "finish_reason": "finish_reason ('length' exactly at max_tokens, 'stop' only at a stop condition)",
    "n_choices": "n (one answer per choice)",
    "n_usage": "n-choice usage (usage.completion_tokens summed over the choices)",
    "min_tokens": "min_tokens (no stop before it)",
    "stream": "stream delivery (at least one event for the tokens it returns)",
    "stream_text": "a streamed answer equal to the plain one (the same text and finish_reason)",
    "ids": "token ids on a stream (an id for every token delivered)",
    "logprob_entries": "logprobs (an entry for every token returned, where the request asks for them)",
    "feature_effect": "the request feature (it was accepted and must change the answer as asked)",
    "response_format": "response_format (every answer that stops is the JSON it asks for)",
}


@dataclass(frozen=True)
class Violation:
    """One rule broken by one answer: `signature` is comparable across routes, `detail` names this answer's numbers."""

    rule: str
    signature: str
    detail: str

    @property
    def key(self) -> tuple[str, str]:
        return self.rule, self.signature


@dataclass(frozen=True)
class PairJudgement:
    """Two routes' violations on one request, sorted by who broke what."""

    shared: tuple[Violation, ...] = ()      # both alike (the candidate's copies): engine behaviour
    candidate: tuple[Violation, ...] = ()   # the candidate only, or another way: a finding
    baseline: tuple[Violation, ...] = ()    # the baseline only: its answer is no reference here

    @property
    def baseline_trusted(self) -> bool:
        return not self.baseline


def judge(*, baseline: Sequence[Violation], candidate: Sequence[Violation]) -> PairJudgement:
    """Sort two answers' violations of one request by (rule, signature)."""
    theirs, ours = {v.key for v in baseline}, {v.key for v in candidate}
    return PairJudgement(shared=tuple(v for v in candidate if v.key in theirs),
                         candidate=tuple(v for v in candidate if v.key not in theirs),
                         baseline=tuple(v for v in baseline if v.key not in ours))


def details(violations: Sequence[Violation]) -> list[str]:
    return [v.detail for v in violations]


# ---------------------------------------------------------------- one answer, the rules

def feature_violation(feature: str, problem: str | None) -> list[Violation]:
    """A request feature accepted without the effect it must have (penalties that change nothing, a banned
    token emitted, a boosted one not first): comparable across routes by the feature's name alone."""
    return [] if problem is None else [Violation("feature_effect", f"{feature} accepted and had no effect",
                                                 problem)]


def format_violation(kind: str, problems: Sequence[str]) -> list[Violation]:
    """Answers to a response_format request that are not the JSON it asks for."""
    return [Violation("response_format", f"{kind} answers are not {kind.replace('_', ' ')} JSON",
                      "; ".join(problems)[:600])] if problems else []


def usage_violation(completion: Completion, *, side: str = "") -> Violation | None:
    """usage.completion_tokens equals the tokens returned (not judged on ids re-derived from text)."""
    used, returned = completion.usage_completion_tokens, len(completion.token_ids)
    if used is None or used == returned or completion.text_level:
        return None
    where = f"{side} " if side else ""
    delta = used - returned
    return Violation("usage", f"{where}usage.completion_tokens is {abs(delta)} {'more' if delta > 0 else 'less'} "
                              f"than the tokens returned",
                     f"{where}usage.completion_tokens={used} but {returned} tokens returned")


def _stop_kind(tokens: Sequence[int], *, request: Request, stop_ids: frozenset[int], decode: Decode) -> str | None:
    """Which stop condition the last of `tokens` completes: stop_token_ids, eos or stop_string (None: none)."""
    if tokens and tokens[-1] in request.stop_token_ids and tokens[-1] in stop_ids:
        return "stop_token_ids"
    if tokens and tokens[-1] in stop_ids:
        return "eos"
    if request.stop and any(s in decode(tokens) for s in request.stop):
        return "stop_string"
    return None


STOP_NAMES = {"stop_token_ids": "stop token id", "eos": "EOS", "stop_string": "stop string"}


def answer_violations(*, request: Request, completion: Completion, decode: Decode,
                      stop_ids: frozenset[int]) -> list[Violation]:
    """Length, usage, nothing after a stop (by kind), stop strings cut, finish_reason: one token-level answer.

    `stop_ids` are the ids that must end the answer (EOS unless ignore_eos, and stop_token_ids). An
    answer that runs past a stop names that stop's rule once ("ignored" when it runs on to max_tokens
    or to another stop, else how many tokens it kept); its finish_reason is then not judged again."""
    if completion.text_level:
        return text_violations(request=request, completion=completion, can_stop=bool(stop_ids or request.stop))
    tokens = list(completion.token_ids)
    found: list[Violation] = []
    if len(tokens) > request.max_tokens:
        found.append(Violation("max_tokens", f"{len(tokens) - request.max_tokens} token(s) over max_tokens",
                               f"{len(tokens)} tokens for max_tokens={request.max_tokens}"))
    found += [v for v in (usage_violation(completion),) if v]
    kinds = [_stop_kind(tokens[:j + 1], request=request, stop_ids=stop_ids, decode=decode) for j in range(len(tokens))]
    stopped_at = next((j for j, kind in enumerate(kinds) if kind), None)
    after = None if stopped_at is None else len(tokens) - 1 - stopped_at
    if after:
        kind = kinds[stopped_at]
        ran_on = len(tokens) >= request.max_tokens or any(k not in (None, kind) for k in kinds[stopped_at + 1:])
        how = "ignored (the answer runs on past it)" if ran_on else f"{after} token(s) kept after it"
        found.append(Violation(kind, f"{STOP_NAMES[kind]} {how}",
                               f"{after} token(s) after the stop condition completed at token {stopped_at}: "
                               f"{decode(tokens[stopped_at + 1:])!r}"))
    for stop in request.stop:
        if stop in completion.text:
            found.append(Violation("stop_string", "stop string left in the returned text",
                                   f"returned text still contains the stop string {stop!r}"))
    if not after:
        found += _finish_violations(completion, request=request, tokens=len(tokens),
                                    at_stop=None if stopped_at is None else kinds[stopped_at],
                                    can_stop=bool(stop_ids or request.stop))
    return found


def _finish_violations(completion: Completion, *, request: Request, tokens: int, at_stop: str | None,
                       can_stop: bool) -> list[Violation]:
    """finish_reason against where the answer ends; `at_stop` is the stop condition its last token completes.
    A 'length' there at max_tokens is that stop ignored (the engine ran to the cap), not a finish_reason slip."""
    finish = completion.finish_reason
    detail = f"finish_reason {finish!r} but the output ends at a stop condition"
    if at_stop and finish == "length" and tokens >= request.max_tokens:
        return [Violation(at_stop, f"{STOP_NAMES[at_stop]} ignored (the answer runs on past it)", detail)]
    if at_stop and finish != "stop":
        return [Violation("finish_reason", f"finish_reason {finish!r} at a stop condition", detail)]
    if at_stop:
        return []
    if finish == "length" and tokens < request.max_tokens:
        return [Violation("finish_reason", "finish_reason 'length' before max_tokens",
                          f"finish_reason 'length' after {tokens} of max_tokens={request.max_tokens}")]
    if finish == "stop" and (tokens >= request.max_tokens or not can_stop):
        return [Violation("finish_reason", "finish_reason 'stop' without a stop condition",
                          f"finish_reason 'stop' after {tokens} tokens without a stop condition")]
    if finish not in FINISH_REASONS:
        return [Violation("finish_reason", f"unexpected finish_reason {finish!r}",
                          f"unexpected finish_reason {finish!r}")]
    return []


def text_violations(*, request: Request, completion: Completion, can_stop: bool) -> list[Violation]:
    """What a text-level answer (no ids from the server) still shows: its own token count, stop strings, finish."""
    used = completion.usage_completion_tokens
    found = []
    if used is not None and used > request.max_tokens:
        found.append(Violation("max_tokens", f"usage {used - request.max_tokens} over max_tokens",
                               f"usage.completion_tokens={used} for max_tokens={request.max_tokens}"))
    for stop in request.stop:
        if stop in completion.text:
            found.append(Violation("stop_string", "stop string left in the returned text",
                                   f"returned text still contains the stop string {stop!r}"))
    finish = completion.finish_reason
    if finish not in FINISH_REASONS:
        found.append(Violation("finish_reason", f"unexpected finish_reason {finish!r}",
                               f"unexpected finish_reason {finish!r}"))
    elif finish == "length" and used is not None and used < request.max_tokens:
        found.append(Violation("finish_reason", "finish_reason 'length' before max_tokens",
                               f"finish_reason 'length' after usage.completion_tokens={used} of "
                               f"max_tokens={request.max_tokens}"))
    elif finish == "stop" and not can_stop:
        found.append(Violation("finish_reason", "finish_reason 'stop' without a stop condition",
                               "finish_reason 'stop' without a stop condition"))
    return found


def choices_violations(out: Completion, *, n: int | None = None) -> list[Violation]:
    """An n-choice answer: `n` choices (when given), and usage.completion_tokens the sum over them."""
    answers = [c.token_ids for c in out.choices] or [out.token_ids]
    found = []
    if n is not None and len(answers) != n:
        found.append(Violation("n_choices", f"{len(answers)} choice(s) for n={n}",
                               f"asked for n={n} choices, got {len(answers)}"))
    total, used = sum(len(a) for a in answers), out.usage_completion_tokens
    if used is not None and used != total and len(answers) > 1:
        one = used in {len(a) for a in answers}
        found.append(Violation("n_usage", "usage bills one choice's tokens, not the sum" if one else
                               f"usage is {used - total:+d} off the sum over the choices",
                               f"usage says {used} completion tokens for {total} in {len(answers)} choices"))
    return found


def min_tokens_violations(*, out: Completion, min_tokens: int, max_tokens: int, stop_ids: set[int]) -> list[Violation]:
    """No stop before min_tokens; usage and finish_reason right on the longer answer."""
    if out.text_level:   # the re-tokenized length is not what the engine emitted: the server's own count is judged
        count = out.usage_completion_tokens if out.usage_completion_tokens is not None else len(out.token_ids)
        if count < min(min_tokens, max_tokens):
            return [Violation("min_tokens", "stopped before min_tokens",
                              f"ended after {count} tokens (the server's count; text-level) with min_tokens={min_tokens}")]
        want = "length" if count >= max_tokens else "stop"
        return [] if out.finish_reason == want else [Violation(
            "finish_reason", f"finish_reason {out.finish_reason!r} where {want!r} was due",
            f"finish_reason {out.finish_reason!r} after {count} tokens (max_tokens {max_tokens}), expected {want!r}")]
    ids = out.token_ids
    early = [i for i, t in enumerate(ids) if t in stop_ids and i < min_tokens - 1]
    if early or len(ids) < min(min_tokens, max_tokens):
        return [Violation("min_tokens", "stopped before min_tokens",
                          f"ended after {len(ids)} tokens (stop ids at {early[:4]}) with min_tokens={min_tokens}")]
    usage = usage_violation(out)
    if usage:
        return [usage]
    want = "stop" if ids and ids[-1] in stop_ids else ("length" if len(ids) >= max_tokens else "?")
    if out.finish_reason != want:
        return [Violation("finish_reason", f"finish_reason {out.finish_reason!r} where {want!r} was due",
                          f"finish_reason {out.finish_reason!r} after {len(ids)} tokens (max_tokens {max_tokens}), "
                          f"expected {want!r}")]
    return []


def stream_violations(*, plain: Completion, streamed: Completion) -> list[Violation]:
    """finish_reason and usage that do not add up, on either delivery of one request."""
    found = []
    for side, c in (("stream", streamed), ("non-stream", plain)):
        if c.finish_reason not in FINISH_REASONS:
            found.append(Violation("finish_reason", f"{side} finish_reason {c.finish_reason!r}",
                                   f"{side} finish_reason {c.finish_reason!r} is not one of {FINISH_REASONS}"))
        if c.usage_completion_tokens is None:
            found.append(Violation("usage", f"{side} reports no usage", f"{side} reports no usage.completion_tokens"))
        found += [v for v in (usage_violation(c, side=side),) if v]
    if streamed.stream_events is not None and streamed.token_ids and streamed.stream_events < 1:
        found.append(Violation("stream", "tokens without any stream event", "stream returned tokens without any event"))
    return found
