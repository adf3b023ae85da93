"""Length, stop and EOS boundaries, where a speculative step emits several tokens at once.

A verifier that accepts k drafts plus a bonus token must still stop exactly at
max_tokens, at the first stop string, stop token id or EOS inside that block, and report
the right finish_reason and usage (sglang#31599, sglang#37450, ik_llama.cpp#2358). The
sweep runs max_tokens = 1..k+2 (k = draft tokens per step) so every position of the first
verify block and the step after it is a boundary once.

Cases are built from the baseline's own greedy output so that each stop condition
really fires inside the sweep: a stop string or stop token id first completed at output
token j, and "EOS reachable" prompts (prompt + output up to j tokens before the
baseline's EOS) so EOS falls at j. Every completion is checked on its own (the rules of
equivalence/rules.py), the two routes' violations of the same case are judged as a pair (what both
break alike is engine behaviour), and the answers are compared (equal tokens, text and finish_reason).
A text-level answer (a server without token ids) has no token positions of its own: it is
checked on what text and the server's usage count show (rules.text_violations), and against the
other route by text and finish_reason; a stop or EOS handled one token late shows there only
when the text differs.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from spec_route_suite.equivalence.differential import Differential, control_line
from spec_route_suite.equivalence.rules import Violation, answer_violations, judge
from spec_route_suite.equivalence.depth import DEFAULT_DEPTH, draft_depth
from spec_route_suite.routes.base import Completion, Request, RouteInventory, TokenIds
from spec_route_suite.routes.textlevel import is_text_level

Decode = Callable[[Sequence[int]], str]
VARIANTS = ("plain", "eos", "ignore_eos", "stop_string", "stop_token")
SEARCH = 5   # prompts a variant tries before it is "not verified": the lean one, then fallbacks (sweep_prompts)


@dataclass(frozen=True)
class Case:
    """One request of the sweep and the stop conditions it carries."""

    variant: str
    request: Request
    stop_ids: frozenset[int] = field(default_factory=frozenset)

    @property
    def label(self) -> str:
        extra = []
        if self.request.stop:
            extra.append(f"stop={list(self.request.stop)}")
        if self.request.stop_token_ids:
            extra.append(f"stop_token_ids={list(self.request.stop_token_ids)}")
        if self.request.ignore_eos:
            extra.append("ignore_eos")
        return f"{self.variant} max_tokens={self.request.max_tokens}" + (f" ({', '.join(extra)})" if extra else "")

    @property
    def can_stop(self) -> bool:
        return bool(self.stop_ids or self.request.stop)


def speculation_depth(inventory: RouteInventory | None, spec=None, default: int = DEFAULT_DEPTH) -> int:
    """Draft tokens per step (equivalence/depth.py says where it came from)."""
    return draft_depth(inventory, spec, default).k


def first_completion(tokens: Sequence[int], *, predicate: Callable[[Sequence[int]], bool]) -> int | None:
    """Smallest j such that predicate(tokens[:j+1]) holds; None if never."""
    for j in range(len(tokens)):
        if predicate(tokens[: j + 1]):
            return j
    return None


def pick_stop_string(tokens: Sequence[int], *, decode: Decode, positions: Sequence[int]) -> tuple[str, int] | None:
    """A stop string whose first completion is at one of `positions` (tried in order)."""
    for j in positions:
        if j >= len(tokens):
            continue
        piece = decode([tokens[j]])
        if not piece.strip() or not piece.isprintable():
            continue
        if first_completion(tokens, predicate=lambda t: piece in decode(t)) == j:
            return piece, j
    return None


def pick_stop_token(tokens: Sequence[int], *, avoid: set[int], positions: Sequence[int]) -> tuple[int, int] | None:
    """A token id that first occurs at one of `positions`."""
    for j in positions:
        if j < len(tokens) and tokens[j] not in avoid and tokens[j] not in tokens[:j]:
            return tokens[j], j
    return None


def reference_answer(baseline, prompt_ids, prompt, max_tokens: int):
    """The baseline's greedy output (the same request as the greedy test, so the memo is reused)."""
    req = Request(prompt_ids=prompt_ids, max_tokens=max_tokens, temperature=0.0, request_id=f"greedy-{prompt.id}")
    return req.prompt_ids, baseline.generate(req)


def sweep_prompts(lean_prompt, everything: Sequence):
    """The lean prompt, the next of its class, then the first of each following class (source, category), of the
    run's prompt pool `everything`.

    For variants whose stop condition may not fire on the lean prompt (a short answer, no EOS);
    following classes first, so two lean prompts do not fall back onto each other.
    """
    groups = list(dict.fromkeys(p.group for p in everything))
    start = groups.index(lean_prompt.group)
    same = [p for p in everything if p.group == lean_prompt.group and p.id != lean_prompt.id][:1]
    following = [next(p for p in everything if p.group == g) for g in groups[start + 1:] + groups[:start]]
    return [lean_prompt, *same, *following][:SEARCH]


def sweep(base: Request, depth: int) -> list[Request]:
    return [replace(base, max_tokens=m, request_id=f"{base.request_id}-m{m}") for m in range(1, depth + 3)]


def build_cases(*, variant: str, prompt_ids: TokenIds, reference: Completion, depth: int, eos_token_id: int | None,
                decode: Decode, request_id: str) -> tuple[list[Case], str]:
    """The sweep for one variant and a note on how it was built; an empty list says why in the note."""
    base = Request(prompt_ids=tuple(prompt_ids), max_tokens=1, temperature=0.0, request_id=request_id)
    eos = frozenset() if eos_token_id is None else frozenset({eos_token_id})
    tokens = list(reference.token_ids)
    inside = [1, depth // 2 + 1, depth, 2, 3]
    if variant == "plain":
        return [Case(variant, r, eos) for r in sweep(base, depth)], "no stop conditions beyond EOS"
    if variant == "stop_string":
        picked = pick_stop_string(tokens, decode=decode, positions=inside)
        if picked is None:
            return [], "no stop string with a unique first completion in the baseline output"
        stop, j = picked
        return ([Case(variant, r, eos) for r in sweep(replace(base, stop=(stop,)), depth)],
                f"stop string {stop!r} first completed at output token {j}")
    if variant == "stop_token":
        picked = pick_stop_token(tokens, avoid=set(eos), positions=inside)
        if picked is None:
            return [], "no token id with a unique first occurrence in the baseline output"
        token, j = picked
        return ([Case(variant, r, eos | {token}) for r in sweep(replace(base, stop_token_ids=(token,)), depth)],
                f"stop token id {token} ({decode([token])!r}) first emitted at output token {j}")
    if eos_token_id is None or eos_token_id not in tokens:
        return [], "the baseline did not reach EOS on this prompt"
    at = tokens.index(eos_token_id)
    if variant == "eos":
        cases, where = [], sorted({min(1, at), min(depth, at)})
        for j in where:
            cases += [Case(variant, r, eos) for r in sweep(
                replace(base, prompt_ids=base.prompt_ids + tuple(tokens[:at - j]), request_id=f"{request_id}-eos@{j}"),
                depth)]
        return cases, f"prompt extended so EOS is output token {' and '.join(map(str, where))} (baseline EOS at {at})"
    if variant == "ignore_eos":
        j = min(1, at)
        prompt = base.prompt_ids + tuple(tokens[:at - j])
        return ([Case(variant, r) for r in sweep(replace(base, prompt_ids=prompt, ignore_eos=True), depth)],
                f"prompt extended so EOS would be output token {j}; ignore_eos must run to max_tokens")
    raise ValueError(f"unknown variant {variant!r}")


def violations(*, case: Case, completion: Completion, decode: Decode) -> list[Violation]:
    """What is wrong with one route's answer to one case, on its own (equivalence/rules.py names each rule)."""
    return answer_violations(request=case.request, completion=completion, decode=decode, stop_ids=case.stop_ids)


@dataclass
class SweepResult:
    """Problems found by one sweep, each prefixed by its case; `first_bad` is the first failing case.

    Every case's two answers are judged as a pair (equivalence/rules.py): a rule both break the same
    way is engine behaviour (`shared`, reported by the caller's Differential as an engine note); a
    rule the baseline alone breaks is the baseline's problem (`baseline_problems`), and a difference
    from a reference broken that way says nothing against the candidate, so it is not compared."""

    cases: int
    problems: list[str]
    first_bad: tuple[Case, Completion, Completion] | None = None
    text_level: bool = False   # some answer came from a server without token ids
    baseline_problems: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)
    rules_broken: int = 0   # rules the candidate alone broke; 0 with problems: its answers only differ (a divergence)


def run_sweep(*, baseline, candidate, cases: Sequence[Case], decode: Decode,
              differential: Differential | None = None) -> SweepResult:
    """Send every case to both routes (RouteHandles); judge each answer's rules against the other's, then
    compare the two answers (when the baseline's is a trustworthy reference)."""
    result = SweepResult(cases=len(cases), problems=[])
    for case in cases:
        expected, actual = baseline.generate(case.request), candidate.generate(case.request)
        result.text_level = result.text_level or is_text_level(expected, actual)
        theirs = violations(case=case, completion=expected, decode=decode)
        ours = violations(case=case, completion=actual, decode=decode)
        verdict = (differential.judge(label=case.label, request=case.request, baseline_answer=expected,
                                      baseline_violations=theirs, candidate_violations=ours)
                   if differential is not None else judge(baseline=theirs, candidate=ours))
        found = [f"candidate '{candidate.name}': {v.detail} ({control_line(theirs)})" for v in verdict.candidate]
        result.rules_broken += len(verdict.candidate)
        if verdict.baseline_trusted:
            found += differences(baseline=expected, candidate=actual)
        result.baseline_problems += [f"[{case.label}] baseline '{baseline.name}': {v.detail}" for v in verdict.baseline]
        result.shared += [f"[{case.label}] both routes: {v.detail}" for v in verdict.shared]
        if found:
            result.first_bad = result.first_bad or (case, expected, actual)
            result.problems += [f"[{case.label}] {p}" for p in found]
    return result


def differences(*, baseline: Completion, candidate: Completion) -> list[str]:
    """Where the two routes' answers to the same case differ, naming both sides."""
    out = []
    if baseline.token_ids != candidate.token_ids and not is_text_level(baseline, candidate):
        out.append(f"tokens: baseline {list(baseline.token_ids)} vs candidate {list(candidate.token_ids)}")
    if baseline.finish_reason != candidate.finish_reason:
        out.append(f"finish_reason: baseline {baseline.finish_reason!r} vs candidate {candidate.finish_reason!r}")
    if baseline.text != candidate.text:
        out.append(f"text: baseline {baseline.text!r} vs candidate {candidate.text!r}")
    return out
