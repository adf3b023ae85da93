"""How a candidate's answer ended, read off a finding's evidence: the shape one cause leaves in every check.

Why: one cause strikes every check that meets it, each in its own words. A server that counts an accepted block
before sending it ends answers short of max_tokens while its usage claims max_tokens: the boundary sweep sees a
usage and a finish_reason rule broken (once per variant: plain, EOS, stop string...), the stop-string sweep the
same on every prompt, the greedy and feature checks a divergence "at the token where the short answer ended",
the n-choice checks a usage that is not the sum of the choices. Read as titles, that was 28 issue files. Read as
answers, it is one shape: finish_reason 'length' before max_tokens, usage counting tokens never returned.

An observation is one answer as a finding shows it: the request's max_tokens and n, the tokens returned, the
usage, the finish_reason, and whether the candidate's tokens continue the baseline's past its stop. Sources, in
order: the answers a parity repro recorded (reports/repro_spec.py `recorded`, with what each request asked),
the token lists a parity finding carries, then the rule details of equivalence/rules.py quoted in the finding's
diff (a usage count against the tokens returned, an n-choice usage against the choices' sum, tokens past a stop
the baseline honoured on the same request); the first source whose answers show a shape, else the first that
shows any (a sweep's first case can end where the baseline's does, with only its finish_reason wrong, while its
next cases run past the stop); none from a text-level comparison (token counts re-derived from text). A shape is
named only from facts an answer shows; a finding whose answers show none (a divergence mid-answer, a wrong
logprob) has no shape and is clustered by its check and title. Environment: none.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from spec_route_suite.routes.textlevel import TEXT_LEVEL

Finding = dict[str, Any]


@dataclass(frozen=True)
class Observation:
    """One candidate answer as a finding's evidence shows it (None: not shown)."""

    max_tokens: int | None = None
    returned: int | None = None          # tokens returned, over all choices
    usage: int | None = None             # usage.completion_tokens
    finish: str | None = None
    choices: int = 1
    past_baseline_stop: bool = False     # the baseline stopped, the candidate's tokens run on past its end

    @property
    def budget(self) -> int | None:
        """Tokens the request allowed over all its choices."""
        return None if self.max_tokens is None else self.max_tokens * self.choices

    @property
    def short(self) -> bool:
        """Fewer tokens than allowed, yet ended as if by the length limit."""
        return (self.returned is not None and self.budget is not None and self.returned < self.budget
                and (self.finish == "length" or (self.usage is not None and self.usage >= self.budget)))


@dataclass(frozen=True)
class Shape:
    """A way an answer ends that names one cause across checks."""

    key: str
    phrase: str
    test: Callable[[Observation], bool]


def _over_usage(o: Observation) -> bool:
    return o.usage is not None and o.returned is not None and o.usage > o.returned


SHAPES: tuple[Shape, ...] = (
    Shape("over-max-tokens", "answers carry more tokens than max_tokens",
          lambda o: o.returned is not None and o.budget is not None and o.returned > o.budget),
    Shape("short-usage-claims-more", "answers end before max_tokens (finish_reason 'length') while "
                                     "usage.completion_tokens counts tokens never returned",
          lambda o: o.short and _over_usage(o)),
    Shape("short-length", "answers end before max_tokens with finish_reason 'length'",
          lambda o: o.short and not _over_usage(o)),
    Shape("past-stop", "answers run on past the stop where the baseline's answer to the same request ends",
          lambda o: o.past_baseline_stop),
    Shape("usage-over", "usage.completion_tokens counts more tokens than the answer returns", _over_usage),
    Shape("usage-under", "usage.completion_tokens counts fewer tokens than the answer returns",
          lambda o: o.usage is not None and o.returned is not None and o.usage < o.returned),
)
BY_KEY = {s.key: s for s in SHAPES}


def shape_of(finding: Finding) -> Shape | None:
    """The shape most of the finding's answers show (the first of equals in SHAPES order), or None."""
    seen = Counter(shape.key for shape in map(_first_shape, observations(finding)) if shape is not None)
    if not seen:
        return None
    top = max(seen.values())
    return next(s for s in SHAPES if seen.get(s.key) == top)


def _first_shape(o: Observation) -> Shape | None:
    return next((s for s in SHAPES if s.test(o)), None)


def observations(finding: Finding) -> list[Observation]:
    """The candidate answers the finding's evidence shows, from the first source that shows any. A text-level
    comparison shows none: its token counts are re-derived from text, so they say nothing of how the answer
    ended or what its usage counted."""
    details = finding.get("details") or {}
    if details.get("comparison") == TEXT_LEVEL:
        return []
    shown = [found for source in (_recorded, _token_lists, _rule_details)
             if (found := [o for o in source(details) if o.returned is not None or o.past_baseline_stop])]
    return next((found for found in shown if any(map(_first_shape, found))), shown[0] if shown else [])


# ---- sources ----------------------------------------------------------------------------------------------

def _recorded(details: dict[str, Any]) -> Iterator[Observation]:
    """The answers a parity repro recorded, beside what each request asked."""
    case = (details.get("repro") or {}).get("case") or {}
    recorded = case.get("recorded") or {}
    candidate, baseline = recorded.get("candidate") or [], recorded.get("baseline") or []
    asked = recorded.get("asked") or [_asked_in_body(pair) for pair in case.get("requests") or []]
    for index, answer in enumerate(candidate):
        if not isinstance(answer, dict) or not isinstance(answer.get("ids"), list) or answer.get("text_level"):
            continue
        request = asked[index] if index < len(asked) and isinstance(asked[index], dict) else {}
        control = baseline[index] if index < len(baseline) and isinstance(baseline[index], dict) else {}
        ids = answer["ids"]
        yield Observation(max_tokens=_int(request.get("max_tokens")), returned=_int(answer.get("tokens", len(ids))),
                          usage=_int(answer.get("usage")), finish=answer.get("finish"),
                          choices=_int(request.get("n")) or 1,
                          past_baseline_stop=_past_stop(ids, control.get("ids"), control.get("finish")))


def _asked_in_body(pair: Any) -> dict[str, Any]:
    """What an OpenAI-wire request asked (older reports record no `asked`): max_tokens and n of its body."""
    body = ((pair or {}).get("candidate") or {}).get("body") if isinstance(pair, dict) else None
    return {"max_tokens": body.get("max_tokens"), "n": body.get("n")} if isinstance(body, dict) else {}


def _token_lists(details: dict[str, Any]) -> Iterator[Observation]:
    """A parity finding's own token lists (greedy, features, boundaries), its request's max_tokens, the
    finish reasons its divergence names, and a usage count its rule details quote."""
    tokens = details.get("candidate_tokens", details.get("tokens"))
    if not isinstance(tokens, list):
        return
    divergence = details.get("divergence") or {}
    request = details.get("request") if isinstance(details.get("request"), dict) else {}
    limit = (details.get("max_tokens") or request.get("max_tokens")
             or (details.get("first_case") or {}).get("max_tokens"))
    usage = next((u for u, returned, _ in _usage_lines(details) if returned == len(tokens)), None)
    baseline = details.get("baseline_tokens")
    yield Observation(max_tokens=_int(limit), returned=len(tokens), usage=usage,
                      finish=details.get("finish") or divergence.get("candidate_finish"),
                      choices=_int(request.get("n")) or 1,
                      past_baseline_stop=_past_stop(tokens, baseline, divergence.get("baseline_finish")))


def _rule_details(details: dict[str, Any]) -> Iterator[Observation]:
    """Rule details quoted in the diff (equivalence/rules.py wording): a usage count against the tokens or the
    choices' sum returned; max_tokens from the finding's request or its repro's first request."""
    request = details.get("request") if isinstance(details.get("request"), dict) else {}
    first = next(iter(((details.get("repro") or {}).get("case") or {}).get("requests") or []), None)
    limit = _int(request.get("max_tokens")) or _int(_asked_in_body(first).get("max_tokens"))
    for usage, returned, choices in _usage_lines(details):
        yield Observation(max_tokens=limit, returned=returned, usage=usage, choices=choices)
    for _ in PAST_STOP_LINE.findall(_rule_text(details)):
        yield Observation(max_tokens=limit, past_baseline_stop=True)


PAST_STOP_LINE = re.compile(r"\d+ token\(s\) after the stop condition completed at token \d+.*"
                            r"\(baseline, same request: honours every rule checked\)")
USAGE_LINE = re.compile(r"usage\.completion_tokens=(\d+) but (\d+) tokens returned")
N_USAGE_LINE = re.compile(r"usage says (\d+) completion tokens for (\d+) in (\d+) choices")


def _usage_lines(details: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(usage, tokens returned, choices) of every usage rule detail the finding quotes."""
    text = _rule_text(details)
    return ([(int(u), int(r), 1) for u, r in USAGE_LINE.findall(text)]
            + [(int(u), int(r), int(n)) for u, r, n in N_USAGE_LINE.findall(text)])


def _rule_text(details: dict[str, Any]) -> str:
    return "\n".join(str(p) for p in (details.get("diff"), *(details.get("problems") or [])) if p)


def _past_stop(ids: Any, baseline: Any, baseline_finish: Any) -> bool:
    return (baseline_finish == "stop" and isinstance(ids, list) and isinstance(baseline, list)
            and len(ids) > len(baseline) and ids[:len(baseline)] == baseline)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
