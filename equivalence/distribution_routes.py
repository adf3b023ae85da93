"""The distribution check's access to routes: sampling arms and the baseline's scores.

`RouteArm` draws samples through the Route protocol (a route's own `sample_n` or `sample_batch`, concurrent
requests, or one request at a time). The scorers give the baseline's raw next-token logprobs at any prefix
of a prompt, as far as the route exposes scoring:
- `RouteScorer`: whole-vocabulary rows (in-process routes: `score_rows` / `score` with top_k = vocabulary;
  any server whose teacher forcing returns every token);
- `TopScorer`: top-K rows only, from teacher forcing (`score` with top_k=K: vLLM's prompt_logprobs) or,
  on a route that cannot teacher-force but returns logprobs of what it generates (llama.cpp's n_probs,
  an OpenAI server's top_logprobs), one greedy request per prefix, whose emitted tokens' alternatives
  are the rows along its path (a prefix on that path costs no further request).
Checks see only these and the Route protocol; no adapter is imported here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from spec_route_suite.equivalence.features import REFUSAL_STATUS, Refusal, probe
from spec_route_suite.equivalence.rules import Violation, choices_violations
from spec_route_suite.equivalence.stats.oracle import covers_vocabulary, rows_from_top
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.routes.base import Completion, Request
from spec_route_suite.routes.errors import FeatureUnsupported, RouteError, RouteHTTPError, RouteMalformed
from spec_route_suite.routes.textlevel import retokenize

N_CHOICES = 4        # a candidate with capability `n` draws part of its samples as n=4 requests
N_POOLED_SHARE = 2   # 1/2 of the candidate's samples per look (rounded down to whole requests)
CONCURRENCY = 64     # requests in flight for routes that batch concurrent requests themselves
MAX_SEED = 2 ** 63 - 1
TOP_K = 20           # logprobs asked of a route that scores its top tokens only (the OpenAI / vLLM default cap)
BATCH_ROWS = 256     # rows per `sample_batch` call (a 450-token prompt's KV is ~1 MB a row on the embedded pair)


@dataclass(frozen=True)
class _Batched:
    """A share of a draw the route samples in its own batch (`sample_n`), sampled with the look's other shares."""

    request: Request
    n: int


def _request(prompt_ids: Sequence[int], setting: SamplingSetting, tokens: int, seed: int | None, tag: str) -> Request:
    return Request(prompt_ids=tuple(prompt_ids), max_tokens=tokens, temperature=setting.temperature,
                   top_p=setting.top_p, top_k=setting.top_k, min_p=setting.min_p, seed=seed, request_id=tag)


def setting_request(prompt_ids: Sequence[int], setting: SamplingSetting, tokens: int, *, seed: int | None,
                    tag: str) -> Request:
    """One sampling request of the setting, as the arms send it (a repro resends it)."""
    return _request(prompt_ids, setting, tokens, seed, tag)


def setting_probe(prompt_ids: Sequence[int], setting: SamplingSetting) -> Request | None:
    """A one-token request with the setting's request features (min_p), to probe a route's support
    before sampling; None when the setting uses none."""
    if setting.min_p <= 0.0:
        return None
    return _request(prompt_ids, setting, 1, 0, f"dist-probe-{setting.name}")


def min_p_supported(setting: SamplingSetting, baseline, candidate,
                    prompt_ids: Sequence[int]) -> tuple[SamplingSetting, Refusal | None]:
    """The setting to run: as given when both routes accept its min_p (probed with one token), else
    the same point without min_p, and the refusal."""
    req = setting_probe(prompt_ids, setting)
    if req is None:
        return setting, None
    for handle in (baseline, candidate):
        answer = probe(handle, req, "min_p")
        if isinstance(answer, Refusal):
            return replace(setting, min_p=0.0), answer
    return setting, None


class RouteArm:
    """Samples from a route: its own `sample_n(req, n)` when it has one and declares capability `n`, a
    batched transformers call for plain AR hf routes, concurrent requests for routes that batch
    them, else one request at a time.

    With `n_choices` (the candidate on a route with capability `n`), half of each draw comes from
    OpenAI n=`n_choices` requests, pooled with the single draws: choices that share a random stream
    are copies, which the count and score tests see as samples far from independent. Each answer's
    usage.completion_tokens must be the sum over its choices; a mis-sum is kept in `usage_problems`
    (request, answer, violations), for the test to judge against the baseline's answer to that request.
    A route with `sample_n` gets one real n-choice request per prompt and setting (its usage checked) and
    the rest from `sample_n` with req.n set (the choices of n / req.n requests, in its own fast batch)."""

    def __init__(self, handle, prompt_ids: Sequence[Sequence[int]], *, tokens: int, text_level: bool = False,
                 tokenizer=None, n_choices: int = 0):
        self.handle = handle
        self.text_level, self.tokenizer = text_level, tokenizer
        self.name = handle.name
        self.prompt_ids = [tuple(p) for p in prompt_ids]
        self.tokens = tokens
        route = handle.route
        self._sample_n = route.sample_n if route.capabilities.has("n") and route.offers("sample_n") else None
        self._sample_many = route.sample_many if self._sample_n is not None and route.offers("sample_many") else None
        self._sample_batch = route.sample_batch if route.offers("sample_batch") else None
        self.concurrent = route.capabilities.concurrency
        self.serial = not (self._sample_n or self._sample_batch or self.concurrent)
        self.requests = 0
        self.n_choices = n_choices if route.capabilities.has("n") else 0
        self.pooled = 0                       # samples that came from n-choice requests
        self.usage_problems: list[tuple[Request, Completion, list[Violation]]] = []
        self.n_refused = ""                   # the route's refusal of n > 1 (then every sample is single)
        self._sent: set[str] = set()          # prompts (request tags) that already had a real n-choice request

    def draw(self, prompt: int, setting: SamplingSetting, n: int, seed: int) -> list[tuple[int, ...]]:
        return self.draw_many(setting, [(prompt, n, seed)])[0]

    def draw_many(self, setting: SamplingSetting, jobs: Sequence[tuple[int, int, int]]) -> list[list[tuple[int, ...]]]:
        """`draw` of several (prompt, n, seed) jobs: what a route samples in its own batch (`sample_n`) is sampled
        for all of them at once (`sample_many`), the way one look's prompts share a serving engine's batch."""
        return self._resolve([self._draw_parts(prompt, setting, n, seed) for prompt, n, seed in jobs])

    def _draw_parts(self, prompt: int, setting: SamplingSetting, n: int, seed: int) -> list:
        ids = self.prompt_ids[prompt]
        tag = f"dist-{self.name}-{setting.name}-{prompt}"
        base = _request(ids, setting, self.tokens, seed if self.handle.capabilities.seed else None, tag)
        pooled = (n // N_POOLED_SHARE) // self.n_choices * self.n_choices if self.n_choices else 0
        if pooled:
            seeds = np.random.SeedSequence(seed).spawn(1)[0].generate_state(2, np.uint64)
            try:
                choices = self._draw_choices(base, pooled, int(seeds[0]) & MAX_SEED)
            except (FeatureUnsupported, RouteHTTPError) as exc:
                if isinstance(exc, RouteHTTPError) and exc.status not in REFUSAL_STATUS:
                    raise
                self.n_choices, self.n_refused = 0, str(exc)[:300]   # a refusal: every sample single from now on
                return self._draw_single(base, n, seed)
            return choices + self._draw_single(base, n - pooled, int(seeds[1]) & MAX_SEED)
        return self._draw_single(base, n, seed)

    def _resolve(self, jobs: list[list]) -> list[list[tuple[int, ...]]]:
        """Each job's parts (samples drawn, or a `_Batched` share still to sample) as its samples, in order."""
        pending = [part for parts in jobs for part in parts if isinstance(part, _Batched)]
        if self._sample_many is not None and pending:
            outs = self.handle.run(self._sample_many([(part.request, part.n) for part in pending]))
        else:
            outs = [self.handle.run(self._sample_n(part.request, part.n)) for part in pending]
        drawn = {id(part): self._from_ids([tuple(s) for s in out]) for part, out in zip(pending, outs)}
        return [[sample for part in parts for sample in (drawn[id(part)] if isinstance(part, _Batched) else part)]
                for parts in jobs]

    def _draw_choices(self, base: Request, n: int, seed: int) -> list:
        """n samples as n / n_choices requests with n=n_choices, concurrently (each its own seed); a route with
        `sample_n` gets one such request sent per prompt and setting (its first draw) and the rest in its batch."""
        if self._sample_n is not None and (n > self.n_choices or base.request_id in self._sent):
            sent_seed, rest_seed = (int(s) & MAX_SEED for s in np.random.SeedSequence(seed).generate_state(2, np.uint64))
            first = [] if base.request_id in self._sent else self._draw_choices_sent(base, self.n_choices, sent_seed)
            self._sent.add(base.request_id)
            self.pooled += n - len(first)
            return [first, _Batched(replace(base, n=self.n_choices, seed=rest_seed if base.seed is not None else None),
                                    n - len(first))]
        return [self._draw_choices_sent(base, n, seed)]

    def _draw_choices_sent(self, base: Request, n: int, seed: int) -> list[tuple[int, ...]]:
        """n samples as n / n_choices requests sent to the route, each checked for its choices and usage."""
        seeds = np.random.SeedSequence(seed).generate_state(n // self.n_choices, np.uint64) & np.uint64(MAX_SEED)
        reqs = [replace(base, n=self.n_choices, seed=int(s) if base.seed is not None else None,
                        request_id=f"{base.request_id}-n{i}") for i, s in enumerate(seeds)]
        self.requests += len(reqs)
        outs = self.handle.generate_concurrently(reqs, concurrency=max(1, CONCURRENCY // self.n_choices))
        errors = [o for o in outs if isinstance(o, RouteError)]
        if errors:
            raise errors[0]
        samples = []
        for req, out in zip(reqs, outs):
            choices = out.choices or (out,)
            if len(choices) != self.n_choices:
                raise RouteMalformed(f"asked for n={self.n_choices} choices, got {len(choices)}", route=self.name,
                                     request_id=req.request_id)
            mis_summed = choices_violations(out)
            if mis_summed:
                self.usage_problems.append((req, out, mis_summed))
            samples += [self._outcome(c) for c in choices]
        self.pooled += len(samples)
        return samples

    def _draw_single(self, base: Request, n: int, seed: int) -> list:
        """n single samples, as the parts `_resolve` takes: drawn now, or a share of the route's own batch."""
        tag = base.request_id
        if n <= 0:
            return []
        base = replace(base, seed=seed if base.seed is not None else None)
        if self._sample_n is not None:
            return [_Batched(base, n)]
        if self._sample_batch is not None:   # in chunks: one transformers call holds every row's KV at once
            chunks = [min(BATCH_ROWS, n - start) for start in range(0, n, BATCH_ROWS)]
            seeds = np.random.SeedSequence(seed).generate_state(len(chunks), np.uint64) & np.uint64(MAX_SEED)
            return [self._from_ids([tuple(s) for size, chunk_seed in zip(chunks, seeds)
                                    for s in self.handle.run(self._sample_batch(base, size, int(chunk_seed)))])]
        seeds = np.random.SeedSequence(seed).generate_state(n, np.uint64) & np.uint64(MAX_SEED)
        reqs = [replace(base, seed=int(s) if base.seed is not None else None, request_id=f"{tag}-{i}")
                for i, s in enumerate(seeds)]
        self.requests += n
        if self.concurrent:
            outs = self.handle.generate_concurrently(reqs, concurrency=CONCURRENCY)
            errors = [o for o in outs if isinstance(o, RouteError)]
            if errors:
                raise errors[0]
            return [[self._outcome(o) for o in outs]]
        return [[self._outcome(self.handle.generate(r)) for r in reqs]]

    def _outcome(self, completion: Completion) -> tuple[int, ...]:
        if not self.text_level:
            return tuple(completion.token_ids)
        return self._as_text(completion.text, ended=completion.finish_reason == "stop")

    def _from_ids(self, samples: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        if not self.text_level:
            return samples
        eos = self.tokenizer.eos_token_id
        return [self._as_text(self.tokenizer.decode(s, skip_special_tokens=True), ended=bool(s) and s[-1] == eos)
                for s in samples]

    def _as_text(self, text: str, *, ended: bool) -> tuple[int, ...]:
        """A text-level sample: the re-tokenized text, and EOS when the sample ended by a stop."""
        eos = self.tokenizer.eos_token_id
        return retokenize(self.tokenizer, text) + ((eos,) if ended and eos is not None else ())


class RouteScorer:
    """Teacher forcing through the baseline: whole-vocabulary raw logprobs at every position. Uses the
    route's own `score_many(prompt_ids, continuations, top_k)` when it has one, one batched forward
    for in-process transformers routes, else one `score` request per continuation."""

    def __init__(self, handle, prompt_ids: Sequence[Sequence[int]], *, vocab: int):
        self.handle = handle
        self.prompt_ids = [tuple(p) for p in prompt_ids]
        self.vocab = vocab
        route = handle.route
        self._score_many = route.score_many if route.offers("score_many") else None
        self._score_rows = route.score_rows if route.offers("score_rows") else None

    def score_many(self, prompt: int, continuations: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
        ids = self.prompt_ids[prompt]
        if self._score_many is not None:
            scored = self.handle.run(self._score_many(ids, list(continuations), self.vocab))
            return [np.stack([rows_from_top(t.top, self.vocab) for t in seq]) for seq in scored]
        if self._score_rows is not None:
            return self.handle.run(self._score_rows(ids, list(continuations)))
        rows = []
        for cont in continuations:
            scored = self.handle.score(ids, cont, self.vocab)
            rows.append(np.stack([rows_from_top(t.top, self.vocab) for t in scored]))
        return rows

    def full_vocabulary(self) -> bool:
        """Score-based tests need the whole distribution; routes capped at top-20 logprobs do not give it. Asked
        only of a route that says it can (a scoring hook, or logprobs up to the vocabulary): a server asked for more
        than its cap refuses, and an adapter may then turn its teacher forcing off for every later check."""
        if self._score_many is None and self._score_rows is None and self.handle.capabilities.logprobs < self.vocab:
            return False
        try:
            rows = self.score_many(0, [(0,)])
        except (RouteError, NotImplementedError, TypeError, ValueError):
            return False
        return covers_vocabulary(rows[0][0])



class TopScorer:
    """Top-K raw logprob rows at any prefix of the prompts (dense, -inf where not returned), cached by prefix;
    `requests` counts the scoring requests sent."""

    def __init__(self, handle, prompt_ids: Sequence[Sequence[int]], *, vocab: int, k: int, depth: int):
        self.handle = handle
        self.prompt_ids = [tuple(p) for p in prompt_ids]
        self.vocab, self.k, self.depth = vocab, k, depth
        self.teacher_forcing = bool(handle.capabilities.prompt_logprobs)
        self.requests = 0
        self._rows: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}

    def row(self, prompt: int, prefix: Sequence[int]) -> np.ndarray:
        key = (prompt, tuple(prefix))
        if key not in self._rows:
            self._fetch(prompt, key[1])
        return self._rows[key]

    def path_rows(self, prompt: int, path: Sequence[int]) -> np.ndarray:
        """The rows after each head of `path`, in one request where it can: teacher forcing of the whole path
        gives every head's row; a greedy request from the root follows the greedy path itself."""
        path = tuple(path)
        self.row(prompt, path[:-1] if self.teacher_forcing else ())
        return np.stack([self.row(prompt, path[:t]) for t in range(len(path))])

    def _fetch(self, prompt: int, prefix: tuple[int, ...]) -> None:
        ids = self.prompt_ids[prompt]
        self.requests += 1
        if self.teacher_forcing:   # the row after `prefix` predicts a forced filler token; rows of its heads come free
            scored = self.handle.score(ids, prefix + (0,), self.k)
            heads = [prefix[:t] for t in range(len(prefix) + 1)]
        else:                      # greedy from the prefix: each emitted token's alternatives are the row before it
            answer = self.handle.generate(Request(prompt_ids=ids + prefix, max_tokens=max(1, self.depth - len(prefix)),
                                                  temperature=0.0, logprobs=self.k,
                                                  request_id=f"dist-score-{prompt}-{len(self._rows)}"))
            scored = answer.logprobs or ()
            if not scored:
                raise RouteMalformed(f"asked logprobs={self.k}, the answer has none", route=self.handle.name)
            heads = [prefix + tuple(answer.token_ids[:t]) for t in range(len(scored))]
        for head, step in zip(heads, scored):
            self._rows.setdefault((prompt, head), rows_from_top(step.top, self.vocab))
