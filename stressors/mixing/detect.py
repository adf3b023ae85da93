"""The mixing detector: for every output that differs from its serial reference, name where it came from.

Why: a wrong answer under load is only actionable when we can say which request leaked
into which. Evidence, strongest first:
1. foreign canary: the output states a fact that only another conversation contains (and
   that the route never says elsewhere on its own: a favourite hallucination is no canary;
   `probe_contexts` also asks the victim's own conversation for that fact, and a value it
   guesses there names no source);
2. foreign answer: the output is another request's serial reference token for token, or
   closer to it than to its own, similar (at most half its tokens edited) and explaining
   it (at least half of the output's tokens that its own reference lacks occur in the
   source's), so a hallucination or a garbled tail is not pinned on whichever reference
   happens to be nearest; a source
   that was not in flight counts only when the output is also far from its own reference
   (a one-token slip that happens to equal some finished request's answer is no leak);
3. answer in another context (`probe_contexts`, serial requests): the victim's last user
   message asked alone inside an in-flight neighbour's conversation reproduces the output
   token for token. This is the reported symptom, and it names the source even when the answer
   is a hallucination carrying no canary; it replaces a foreign answer that is inexact,
   has more equally good candidates, or comes from a request that was not in flight. An
   output made only of its own answer's tokens (a truncated "Your lucky number is 8." for
   885) is not probed: it is what a garbled step gives, and another conversation's guess
   can equal it by chance.
What is left is "unattributed" (batch variance or a numerical divergence: the
batch-invariance check owns those). Attributions aggregate into a contamination matrix,
source -> victim; each names the source's requests that were in flight with the victim (a
real leak needs a neighbour in the batch; a source not in flight points at stale state
such as a reused KV slot), and any other sources the evidence fits equally well.
On a server without token ids the outputs and references are the route's text re-tokenized
(spec_route_suite/routes/textlevel.py): all of the above still holds, on text instead of engine tokens.
Environment: none.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from typing import Callable, Mapping, Sequence

import numpy as np

from spec_route_suite.equivalence.divergence import classify_divergence
from spec_route_suite.equivalence.greedy import compare_greedy
from spec_route_suite.routes.base import Completion, Request, TokenIds
from spec_route_suite.routes.textlevel import same_output
from spec_route_suite.stressors.canary import Workload, canary_owners, canary_question, mentions
from spec_route_suite.stressors.driver import Outcome

FOREIGN_CANARY = "foreign-canary"
FOREIGN_ANSWER = "closer-to-other-reference"
CONTEXT_PROBE = "answer-in-other-context"
UNATTRIBUTED = "unattributed"
SIMILAR = 0.5  # a foreign answer must be within this fraction of edits of the other reference (not just less far)
MAX_ATTRIBUTED = 2_000
MAX_PROBES = 400  # serial requests spent confirming mismatches by context probes, per report


@dataclass(frozen=True)
class Attribution:
    """One output that differs from its own serial reference, and the best explanation found."""

    victim_request: str
    victim_key: str
    method: str
    source_key: str | None
    evidence: str
    own_distance: int
    source_distance: int | None
    source_requests_in_flight: tuple[str, ...]
    output_text: str
    reference_text: str
    alternatives: tuple[str, ...] = ()  # other sources the evidence fits equally well
    canary: str | None = None  # the foreign fact stated (FOREIGN_CANARY)
    foreign_tokens: int | None = None  # output tokens outside its alignment with its own reference

    @property
    def attributed(self) -> bool:
        return self.source_key is not None

    def line(self) -> str:
        if not self.attributed:
            why = self.evidence or "no other request's content found"
            return (f"{self.victim_request}: differs from its serial reference (edit distance {self.own_distance}), "
                    f"{why}: got {self.output_text[:80]!r}, "
                    f"expected {self.reference_text[:80]!r}")
        flight = (f"source in flight: {', '.join(self.source_requests_in_flight[:3])}"
                  if self.source_requests_in_flight else "source NOT in flight (stale state?)")
        return (f"{self.victim_request} (victim {self.victim_key}) <- {self.source_key}: {self.evidence}; {flight}; "
                f"got {self.output_text[:80]!r}, expected {self.reference_text[:80]!r}")


@dataclass(frozen=True)
class MixingReport:
    """The verdict over one load run: how many outputs were checked and every mismatch explained."""

    checked: int
    mismatches: tuple[Attribution, ...]
    truncated: int = 0

    @property
    def contaminated(self) -> tuple[Attribution, ...]:
        return tuple(a for a in self.mismatches if a.attributed)

    @property
    def unattributed(self) -> tuple[Attribution, ...]:
        return tuple(a for a in self.mismatches if not a.attributed)

    def excluding_victims(self, keys: set[str]) -> "MixingReport":
        """The same report without the mismatches of these prompts (their reference is not trusted)."""
        return replace(self, mismatches=tuple(a for a in self.mismatches if a.victim_key not in keys))

    def matrix(self) -> Counter:
        """(source key, victim key) -> number of contaminated outputs."""
        return Counter((a.source_key, a.victim_key) for a in self.contaminated)

    def matrix_rows(self) -> list[dict]:
        return [{"source": s, "victim": v, "count": n} for (s, v), n in sorted(self.matrix().items())]

    def matrix_text(self, limit: int = 20) -> str:
        rows = sorted(self.matrix().items(), key=lambda kv: (-kv[1], kv[0]))
        lines = ["source -> victim : count"] + [f"{s} -> {v} : {n}" for (s, v), n in rows[:limit]]
        if len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more pairs")
        return "\n".join(lines)


def edit_distances(sequence: Sequence[int], references: Sequence[Sequence[int]]) -> np.ndarray:
    """Levenshtein distance on tokens from `sequence` to each reference, vectorised over references.

    Row by row over `sequence`; within a row the insertion chain is a running minimum:
    new[k] = k + min_{k'<=k}(cand[k'] - k').
    """
    if not references:
        return np.zeros(0, dtype=np.int64)
    width = max(len(r) for r in references)
    refs = np.full((len(references), width), -1, dtype=np.int64)
    for j, ref in enumerate(references):
        refs[j, :len(ref)] = ref
    lengths = np.array([len(r) for r in references])
    cols = np.arange(width + 1)
    row = np.tile(cols, (len(references), 1))
    for i, token in enumerate(sequence, start=1):
        cand = np.empty_like(row)
        cand[:, 0] = i
        cand[:, 1:] = np.minimum(row[:, 1:] + 1, row[:, :-1] + (refs != token))
        row = cols + np.minimum.accumulate(cand - cols, axis=1)
    return row[np.arange(len(references)), lengths]


def unexplained(output: Sequence[int], own: Sequence[int]) -> list[int]:
    """The output's tokens outside its longest alignment with its own reference: what a source must explain."""
    matcher = SequenceMatcher(a=list(output), b=list(own), autojunk=False)
    kept = [False] * len(output)
    for block in matcher.get_matching_blocks():
        for i in range(block.a, block.a + block.size):
            kept[i] = True
    return [t for t, k in zip(output, kept) if not k]


def covered(part: Sequence[int], reference: Sequence[int]) -> float:
    """Share of `part` (as a multiset) found in `reference`; 1.0 for an empty part."""
    if not part:
        return 1.0
    pool = Counter(reference)
    hits = 0
    for token in part:
        if pool[token] > 0:
            pool[token] -= 1
            hits += 1
    return hits / len(part)


def reliable_canaries(workload: Workload, references: Mapping[str, Completion]) -> dict[str, str]:
    """canary value -> owner, without values the route also says where they were never stated.

    A value that shows up in another item's serial reference (a hallucination the model is drawn
    to, such as a favourite lucky number) names no source when it shows up under load.
    """
    owners = canary_owners(workload)
    return {value: owner for value, owner in owners.items()
            if not any(key != owner and mentions(ref.text, value) for key, ref in references.items())}


def attribute(*, victim_request: str, victim_key: str, output: Completion, workload: Workload,
              references: Mapping[str, Completion], window: Sequence[Outcome] = (),
              canaries: Mapping[str, str] | None = None) -> Attribution:
    """Explain one mismatching output; `window` are the outcomes that overlapped it in time.

    `canaries` (value -> owner) defaults to `reliable_canaries(workload, references)`; pass it when
    attributing many outputs against the same references.
    """
    own = references[victim_key]
    victim = workload.get(victim_key)
    in_flight: dict[str, list[str]] = {}
    for other in window:
        if other.request_id != victim_request:
            in_flight.setdefault(other.key, []).append(other.request_id)
    own_distance = int(edit_distances(output.token_ids, [own.token_ids])[0])
    owners = reliable_canaries(workload, references) if canaries is None else canaries
    foreign = [(value, owner) for value, owner in owners.items()
               if owner != victim_key and value not in victim.prompt_text and value not in own.text
               and mentions(output.text, value)]
    foreign_part = unexplained(output.token_ids, own.token_ids)
    base = dict(victim_request=victim_request, victim_key=victim_key, own_distance=own_distance,
                output_text=output.text, reference_text=own.text, foreign_tokens=len(foreign_part))
    if foreign:
        foreign.sort(key=lambda vo: (vo[1] not in in_flight, vo[1]))
        value, owner = foreign[0]
        return Attribution(method=FOREIGN_CANARY, source_key=owner, source_distance=None, canary=value,
                           evidence=f"states {value!r}, a fact only {owner} contains",
                           source_requests_in_flight=tuple(in_flight.get(owner, ())), **base)
    others = [k for k in references if k != victim_key and references[k].token_ids != own.token_ids]
    if others:
        distances = dict(zip(others, (int(d) for d in edit_distances(output.token_ids,
                                                                      [references[k].token_ids for k in others]))))
        far_from_own = own_distance > SIMILAR * max(len(output.token_ids), len(own.token_ids), 1)
        # A source whose answer states a fact of its own (a canary) leaked only if that fact is in the
        # output (then it is a foreign canary, above): closeness alone is a shared template there, e.g.
        # a garbled "Your locker code is B1-33." is near every locker-code answer but leaked from none.
        stated = {owner for value, owner in owners.items() if mentions(references[owner].text, value)}

        def qualifies(key: str) -> bool:
            length = max(len(output.token_ids), len(references[key].token_ids), 1)
            plausible = key in in_flight or far_from_own  # else a near-miss, not a leak from stale state
            return (key not in stated and distances[key] < own_distance and distances[key] <= SIMILAR * length
                    and plausible and covered(foreign_part, references[key].token_ids) >= SIMILAR)

        ranked = sorted((k for k in others if qualifies(k)), key=lambda k: (distances[k], k not in in_flight, k))
        if ranked:
            source = ranked[0]
            ties = tuple(k for k in ranked[1:] if distances[k] == distances[source])
            exact = "the same tokens as" if distances[source] == 0 else f"edit distance {distances[source]} to"
            return Attribution(method=FOREIGN_ANSWER, source_key=source, source_distance=distances[source],
                               evidence=(f"{exact} {source}'s reference vs {own_distance} to its own"
                                         + (f" (equally close: {', '.join(ties[:5])})" if ties else "")),
                               source_requests_in_flight=tuple(in_flight.get(source, ())), alternatives=ties, **base)
    return Attribution(method=UNATTRIBUTED, source_key=None, source_distance=None, evidence="",
                       source_requests_in_flight=(), **base)


def detect(*, workload: Workload, references: Mapping[str, Completion], outcomes: Sequence[Outcome]) -> MixingReport:
    """Compare every completed, non-aborted outcome with its serial reference and attribute each mismatch."""
    checked = 0
    mismatches: list[Attribution] = []
    canaries = reliable_canaries(workload, references)
    truncated = 0
    for outcome in outcomes:
        if not outcome.ok or outcome.key not in references:
            continue
        checked += 1
        reference = references[outcome.key]
        if outcome.completion.token_ids == reference.token_ids:
            continue
        if len(mismatches) >= MAX_ATTRIBUTED:
            truncated += 1
            continue
        window = [o for o in outcomes if o.overlaps(outcome)]
        mismatches.append(attribute(victim_request=outcome.request_id, victim_key=outcome.key,
                                    output=outcome.completion, workload=workload, references=references,
                                    window=window, canaries=canaries))
    return MixingReport(checked=checked, mismatches=tuple(mismatches), truncated=truncated)


def asked_in(context, question: tuple[str, str], *, chat: bool, request_id: str,
             render: Callable[[Sequence[tuple[str, str]]], TokenIds], max_tokens: int) -> Request:
    """`question` asked in `context`'s conversation instead of its own last user message; a chat victim is
    probed as a chat request, through the same template path its answer took."""
    messages = tuple(context.messages[:-1]) + (question,)
    return Request(prompt_ids=tuple(render(messages)), max_tokens=max_tokens, temperature=0.0,
                   request_id=request_id, messages=messages if chat else None)


def context_probe_request(*, victim, neighbour, render: Callable[[Sequence[tuple[str, str]]], TokenIds],
                          max_tokens: int) -> Request:
    """The victim's last user message asked in the neighbour's conversation (the neighbour's own question dropped)."""
    return asked_in(neighbour, victim.messages[-1], chat=victim.chat, request_id=f"probe-{victim.key}-in-{neighbour.key}",
                    render=render, max_tokens=max_tokens)


def guessed_at_home(att: Attribution, *, workload: Workload, generate: Callable[[Request], Completion],
                    render: Callable[[Sequence[tuple[str, str]]], TokenIds], max_tokens: int) -> bool | None:
    """Does the victim's own conversation, asked for the foreign canary's fact, answer with that very value?
    Then the value is a guess the model makes there (a KV garble that switched the answer's template reaches
    it with no other request involved), and it names no source. None: no such question to ask."""
    question = canary_question(workload.get(att.source_key), att.canary) if att.canary else None
    if question is None:
        return None
    victim = workload.get(att.victim_key)
    answer = generate(asked_in(victim, ("user", question), chat=victim.chat, render=render, max_tokens=max_tokens,
                               request_id=f"probe-{victim.key}-own-{att.canary}"))
    return mentions(answer.text, att.canary)


def probe_contexts(report: MixingReport, *, workload: Workload, outcomes: Sequence[Outcome],
                   generate: Callable[[Request], Completion], render: Callable[[Sequence[tuple[str, str]]], TokenIds],
                   max_tokens: int, max_probes: int = MAX_PROBES) -> MixingReport:
    """Confirm chat mismatches by asking the victim's question in each in-flight neighbour's context.

    Runs serially and bounded by `max_probes`; neighbours already in flight when the victim arrived go first,
    and later arrivals are skipped once one of those matches. Only an exact match counts (a near one is how
    a garbled step looks too). It applies to every chat mismatch without a foreign canary and replaces a
    foreign answer that is inexact, has more equally good candidates, or whose source was not even in flight
    (a coincidence is likelier than stale state); equal evidence keeps both sources, context first.
    A foreign canary is first checked against the victim's own conversation (`guessed_at_home`: a value it
    guesses there is no evidence), and an output made only of its own answer's tokens is not probed.
    """
    by_id = {o.request_id: o for o in outcomes}
    spent = 0
    out = []
    for att in report.mismatches:
        victim = workload.get(att.victim_key)
        if victim.messages is None or spent >= max_probes:
            out.append(att)
            continue
        if att.method == FOREIGN_CANARY:
            guessed = guessed_at_home(att, workload=workload, generate=generate, render=render, max_tokens=max_tokens)
            spent += guessed is not None
            if guessed:
                att = replace(att, method=UNATTRIBUTED, source_key=None, alternatives=(), source_distance=None,
                              source_requests_in_flight=(), evidence=f"states {att.canary!r}, {att.source_key}'s fact, "
                              "but its own conversation says that value too when asked for it (a guess, no source)")
            elif att.source_requests_in_flight:
                out.append(att)
                continue
        if att.foreign_tokens == 0:
            out.append(att)  # only its own answer's tokens (truncated or garbled): any context's guess may equal it
            continue
        got = by_id[att.victim_request]
        window = [o for o in outcomes if o.overlaps(got) and o.request_id != got.request_id]
        neighbours: dict[str, list[str]] = {}
        at_start: set[str] = set()  # in flight when the victim arrived: where admission-time mixing comes from
        for o in window:
            if o.key != victim.key and workload.get(o.key).messages is not None:
                neighbours.setdefault(o.key, []).append(o.request_id)
                if o.started_s <= got.started_s:
                    at_start.add(o.key)
        probed: dict[str, TokenIds] = {}
        for key in sorted(neighbours, key=lambda k: (k not in at_start, k)):
            if spent >= max_probes or (key not in at_start and got.completion.token_ids in probed.values()):
                break  # out of budget, or an exact match among the requests already in flight
            spent += 1
            probed[key] = generate(context_probe_request(victim=victim, neighbour=workload.get(key), render=render,
                                                         max_tokens=max_tokens)).token_ids
        matches = [k for k, ids in probed.items() if ids == got.completion.token_ids]
        stale = att.attributed and not att.source_requests_in_flight  # a finished source needs stale state
        exact_answer = att.attributed and not stale and att.source_distance == 0
        if not matches or (exact_answer and len(matches) > 1 + len(att.alternatives)):
            out.append(att)  # no context reproduces it, or the outputs alone say as much with fewer candidates
            continue
        if exact_answer:  # equally good evidence: keep both, context first
            matches += [k for k in (att.source_key, *att.alternatives) if k not in matches]
        also = f" (equally: {', '.join(matches[1:5])})" if len(matches) > 1 else ""
        out.append(replace(att, method=CONTEXT_PROBE, source_key=matches[0], alternatives=tuple(matches[1:]),
                           source_requests_in_flight=tuple(neighbours[matches[0]]), source_distance=0,
                           evidence=f"equals the answer to its last user message asked in {matches[0]}'s "
                                    f"conversation{also}"))
    return replace(report, mismatches=tuple(out))


def classify_mismatch(*, baseline, tokenizer, prompt_ids: TokenIds, expected: Completion, got: Completion,
                      max_tokens: int, tau: float) -> tuple[str, str]:
    """("near-tie" | "bug", why) for the first divergence of `got` (under load) from `expected` (alone).

    The candidate's token at the first divergence is teacher-forced through the baseline
    (equivalence/divergence.py): within tau of the top-1 it is a numerical near-tie (batch variance),
    otherwise no rounding explains it.
    """
    divergence = compare_greedy(baseline=expected, candidate=got, decode=tokenizer.decode)
    if divergence is None:
        return "bug", "same tokens, different finish reason"
    verdict = classify_divergence(baseline=baseline, prompt_ids=prompt_ids, divergence=divergence,
                                  baseline_completion=expected, candidate_completion=got, max_tokens=max_tokens,
                                  tau=tau, eos_token_id=tokenizer.eos_token_id, decode=tokenizer.decode)
    severity = "near-tie" if verdict.is_near_tie else "bug"
    return severity, f"first divergence at token {divergence.position}: {verdict.summary()}"


def merge(reports: Sequence[MixingReport]) -> MixingReport:
    return MixingReport(checked=sum(r.checked for r in reports),
                        mismatches=tuple(a for r in reports for a in r.mismatches),
                        truncated=sum(r.truncated for r in reports))


def untrusted_references(*, baseline: Callable[[Request], Completion], candidate: Callable[[Request], Completion],
                         workload: Workload, references: Mapping[str, Completion], keys: set[str],
                         max_tokens: int) -> set[str]:
    """Prompts among `keys` whose serial reference is neither the AR baseline's greedy output nor
    reproduced by a second serial run of the candidate (a reference made inside someone else's batch)."""
    untrusted = set()
    for key in sorted(keys):
        req = workload.get(key).request(max_tokens=max_tokens)
        if same_output(baseline(req), references[key]):
            continue
        again = candidate(replace(req, request_id=f"{req.request_id}-recheck"))  # a fresh request, not a memo
        if not same_output(again, references[key]):
            untrusted.add(key)
    return untrusted
