"""Request features under speculation: probe support, then check parity and effect.

A speculative path can drop a feature or apply it to the wrong tokens (penalties on the bonus
token only, logit_bias skipped at draft positions, min_tokens missed inside an accepted block,
n > 1 choices sharing one random stream). Per feature and route:
- support is probed, never assumed: a FeatureUnsupported (the route's documented refusal) or an
  HTTP 400/422 means "not supported by this route" (not verified, never a pass);
- parity: at temperature 0 the candidate's answer with the feature equals the baseline's;
- effect: the feature really acted, on a request chosen so that it must (a route that accepts a
  feature and ignores it is a finding). The serving rules an answer must keep (min_tokens, n choices
  and their usage) are equivalence/rules.py's, judged against the baseline's answer to the same request.
The first divergence of a feature request is classified like the greedy check's, through a
baseline view whose teacher-forced logprobs carry the feature's own adjustment (additive
penalties, bias, the min_tokens mask); repetition_penalty rescales logits, which logprobs cannot
undo, so its divergences stay unclassified (a bug under both policies).
Environment: none.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Sequence

from spec_route_suite.routes.base import Capabilities, Completion, Request, TokenLogprobs
from spec_route_suite.routes.errors import FeatureUnsupported, RouteHTTPError

REFUSAL_STATUS = (400, 422)
SCORE_TOP = 20

# feature settings strong enough to act on any long repetitive continuation (measured on the
# embedded pair: each changes 69-70 of 70 prompts at 40 tokens with ignore_eos)
PENALTIES = {"repetition_penalty": 1.3, "frequency_penalty": 1.0, "presence_penalty": 2.0}
BAN_BIAS = -100.0
BOOST_BIAS = 100.0


@dataclass(frozen=True)
class Refusal:
    """A route said it does not support a feature: recorded as not verified, never as a pass."""

    route: str
    feature: str
    why: str

    def describe(self) -> str:
        return f"route '{self.route}' does not support {self.feature} ({self.why})"


def probe(route, req: Request, feature: str) -> Completion | Refusal:
    """Send a feature request; a documented refusal or an HTTP 400/422 becomes a Refusal."""
    try:
        return route.generate(req)
    except FeatureUnsupported as exc:
        return Refusal(route=route.name, feature=exc.feature, why=str(exc))
    except RouteHTTPError as exc:
        if exc.status in REFUSAL_STATUS:
            return Refusal(route=route.name, feature=feature, why=str(exc)[:300])
        raise


def repeat_rate(tokens: Sequence[int], *, prior: Sequence[int] = ()) -> float:
    """Fraction of tokens already seen earlier (in `prior` or in the output itself)."""
    seen, repeats = set(prior), 0
    for token in tokens:
        repeats += token in seen
        seen.add(token)
    return repeats / len(tokens) if tokens else 0.0


def rare_token(tokenizer, *, avoid: Sequence[int], decode) -> int:
    """A printable, non-special token that is not in `avoid`: the highest such id (a rare merge)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    avoid = set(avoid)
    for token in range(len(tokenizer) - 1, -1, -1):
        if token not in special and token not in avoid and decode([token]).strip():
            return token
    raise ValueError("the tokenizer has no printable token outside the output")


# ---- effect checks: None when the feature acted as it must, else what went wrong ----
def penalty_effect(*, feature: str, plain: Completion, penalised: Completion, prompt_ids: Sequence[int]) -> str | None:
    prior = prompt_ids if feature == "repetition_penalty" else ()
    before, after = repeat_rate(plain.token_ids, prior=prior), repeat_rate(penalised.token_ids, prior=prior)
    if penalised.token_ids == plain.token_ids:
        return f"{feature}={PENALTIES[feature]} left the output unchanged (repeat rate {before:.2f}): ignored"
    if after >= before:
        return f"{feature}={PENALTIES[feature]} changed the output but it repeats as much ({before:.2f} -> {after:.2f})"
    return None


def banned_effect(*, banned: int, out: Completion) -> str | None:
    hits = [i for i, t in enumerate(out.token_ids) if t == banned]
    return f"token {banned} (logit_bias {BAN_BIAS:g}) appears at positions {hits[:8]}" if hits else None


def boosted_effect(*, boosted: int, out: Completion) -> str | None:
    if out.token_ids[:1] != (boosted,):
        return f"token {boosted} (logit_bias +{BOOST_BIAS:g}) is not the first token: got {list(out.token_ids[:4])}"
    return None


def n_greedy_parity(*, out: Completion, expected: Sequence[int], expected_text: str | None = None) -> str | None:
    """n greedy choices, each the baseline's (n=1) answer: a parity comparison. The absolute rules of an
    n-choice answer (n choices, usage summed) are equivalence/rules.py choices_violations."""
    if out.text_level and expected_text is not None:   # no ids from the server: the choices' texts are compared
        texts = [c.text for c in out.choices] or [out.text]
        wrong = [i for i, t in enumerate(texts) if t != expected_text]
        return f"greedy choices {wrong} differ from the baseline's answer (text-level)" if wrong else None
    answers = [c.token_ids for c in out.choices] or [out.token_ids]
    wrong = [i for i, a in enumerate(answers) if tuple(a) != tuple(expected)]
    return f"greedy choices {wrong} differ from the baseline's answer" if wrong else None


def identical_samples_p(*, answers: Sequence[Sequence[int]], logprob_of_first: float) -> float | None:
    """n sampled choices all equal: P(the other n-1 repeat the first | independent) = p(first)^(n-1)."""
    if len({tuple(a) for a in answers}) != 1 or len(answers) < 2:
        return None
    return math.exp(logprob_of_first * (len(answers) - 1))


# ---- classification of a feature request's divergence ----
class FeatureScorer:
    """The baseline as `classify_divergence` sees it, with the request's feature in its logprobs.

    Margins are differences of logprobs, so an additive adjustment (frequency / presence
    penalty, logit_bias, the min_tokens mask) applied to the teacher-forced top list gives the
    margin under the feature exactly. Tokens outside the baseline's top-20 stay outside.
    """

    def __init__(self, baseline, req: Request, *, eos_token_id: int | None):
        self._baseline, self._req = baseline, req
        self.name = baseline.name
        stops = set(req.stop_token_ids) | ({eos_token_id} if eos_token_id is not None and not req.ignore_eos else set())
        self._stops = stops
        self.capabilities = Capabilities(prompt_logprobs=baseline.capabilities.prompt_logprobs, logprobs=0)

    def score(self, context: Sequence[int], continuation: Sequence[int], top_k: int) -> list[TokenLogprobs]:
        raw = self._baseline.score(tuple(context), tuple(continuation), SCORE_TOP)
        output = list(context[len(self._req.prompt_ids):])
        return [self._adjust(step, output + list(continuation[:i]), top_k) for i, step in enumerate(raw)]

    def _adjust(self, step: TokenLogprobs, output: list[int], top_k: int) -> TokenLogprobs:
        table = dict(step.top)
        table[step.token_id] = step.logprob
        adjusted = {t: lp + self._shift(t, output) for t, lp in table.items()}
        top = tuple(sorted(adjusted.items(), key=lambda p: (-p[1], p[0]))[:top_k])
        return TokenLogprobs(token_id=step.token_id, logprob=adjusted[step.token_id], top=top)

    def _shift(self, token: int, output: list[int]) -> float:
        req, count = self._req, output.count(token)
        shift = -req.frequency_penalty * count - (req.presence_penalty if count else 0.0)
        shift += sum(bias for t, bias in req.logit_bias if t == token)
        if token in self._stops and len(output) < req.min_tokens:
            shift = -math.inf
        return shift


def classifiable(req: Request) -> bool:
    return req.repetition_penalty == 1.0 and req.response_format is None


def with_feature(req: Request, **changes) -> Request:
    """The same request with a feature on and its own request id (the memo keys on the whole request)."""
    name = "+".join(f"{k}" for k in sorted(changes))
    return replace(req, request_id=f"{req.request_id}+{name}", **changes)


# ---- structured output ----
JSON_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def json_answer_problem(out: Completion, *, schema: dict | None) -> str | None:
    """A stopped answer must be one JSON object (matching `schema` when given); a truncated one
    (finish "length") is not judged."""
    if out.finish_reason != "stop":
        return None
    try:
        value = json.loads(out.text)
    except ValueError as exc:
        return f"answer is not JSON ({exc}): {out.text[:120]!r}"
    problem = schema_problem(value, schema or {"type": "object"})
    return f"{problem}: {out.text[:120]!r}" if problem else None


def schema_problem(value, schema: dict, where: str = "$") -> str | None:
    """The JSON-schema subset the checks send: type, properties, required, additionalProperties."""
    kind = schema.get("type")
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = kind is None or isinstance(value, JSON_TYPES[kind])
    if not ok:
        return f"{where} is {type(value).__name__}, schema wants {kind}"
    if isinstance(value, dict):
        missing = [k for k in schema.get("required", ()) if k not in value]
        if missing:
            return f"{where} lacks required {missing}"
        props = schema.get("properties", {})
        extra = [k for k in value if k not in props]
        if schema.get("additionalProperties") is False and extra:
            return f"{where} has properties {extra} the schema forbids"
        for key, sub in props.items():
            if key in value and (problem := schema_problem(value[key], sub, f"{where}.{key}")):
                return problem
    return None


def schema_of(value: dict) -> dict:
    """A strict schema for an object shaped like `value` (the baseline's own JSON answer)."""
    types = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return {"type": "object", "required": sorted(value), "additionalProperties": False,
            "properties": {k: {"type": types.get(type(v), "string")} for k, v in value.items()}}
