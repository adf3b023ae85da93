"""Sampling-distribution check: does the candidate sample from the baseline's distribution?

For one sampling setting, both arms sample the first few tokens of each prompt, in looks (chunks)
with independent seed streams; after each look every test family is recomputed (stats/families.py),
weighted Holm decides, and the sequential plan (stats/sequential.py) stops early when a failure is
confirmed on fresh samples or when nothing is suspicious at half the budget. The core loop,
`run_check`, sees only `Arm`s (draw n samples) and an optional scorer, so the same code runs on
routes here and on the synthetic sampler in the calibration self-tests.

Tokens per sample (`sample_tokens`): the first verify block with its bonus token (draft length + 1)
on serial routes, the first two blocks on fast ones: the positions every acceptance-rule bug
touches first.

When either route's server returns no token ids, samples are compared at text level: every
sample (both arms) becomes its text re-tokenized with the suite's tokenizer, plus EOS when it
ended by a stop, and the score-based families are off (the baseline's token probabilities do
not apply to re-tokenized sequences); the gate and the other count-based families still run.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Protocol, Sequence

import numpy as np

from spec_route_suite.equivalence.features import REFUSAL_STATUS, choices_usage_problem
from spec_route_suite.equivalence.stats.families import GATE, Evidence, family_weights
from spec_route_suite.equivalence.stats.multiple import holm
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle, covers_vocabulary, rows_from_top
from spec_route_suite.equivalence.stats.planner import Budget, plan_budget
from spec_route_suite.equivalence.stats.sequential import SequentialHypothesis, SequentialPlan
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.fixtures.routes.base import Completion, Request
from spec_route_suite.fixtures.routes.errors import FeatureUnsupported, RouteError, RouteHTTPError, RouteMalformed
from spec_route_suite.fixtures.routes.textlevel import is_text_level, retokenize
from spec_route_suite.fixtures.routes.timing import unwrap
from spec_route_suite.progress import track

# The sampling grid: plain sampling; the truncated setting where top-k/top-p bugs live; a high
# temperature, where temperature-handling bugs are largest and a sharp model still has entropy to
# show (on the embedded pair, "draft ignores temperature" moves 6-15% TV per prompt at T=1.5 and
# 1-5% at T=0.7); and min_p with a small top_k at a high temperature, the only place the pair's tail
# is heavy enough for them to act (at T=1.0 min_p 0.05 and top_k 20 drop < 0.1% of the first
# token's mass, at T=1.5 2.6% and 1.0%). min_p is a request feature, probed per route; a route that
# refuses it runs this point without it (tests/test_distribution.py).
GRID = (SamplingSetting("T1.0", 1.0), SamplingSetting("T0.7-p0.9-k50", 0.7, top_p=0.9, top_k=50),
        SamplingSetting("T1.5", 1.5), SamplingSetting("T1.6-k20-m0.05", 1.6, top_k=20, min_p=0.05))
# The min_p point samples fewer prompts on fast routes (its cost is the default run's budget: 20 prompts
# took 134 s of a worker on 2 loaded cores). Per prompt the planner keeps --detect-tv at power 0.9;
# fewer prompts only means fewer contexts.
MIN_P_PROMPTS = 6
N_CHOICES = 4        # a candidate with capability `n` draws part of its samples as n=4 requests
N_POOLED_SHARE = 2   # 1/2 of the candidate's samples per look (rounded down to whole requests)
POWER = 0.9
DEFAULT_DRAFT_TOKENS = 4  # when the candidate does not say: vLLM's and transformers' usual k
# Prompts per run. Fast routes (batched or concurrent): 20 prompts x ~970 samples per arm see a 5%
# shift in each (planner). Serial routes (transformers assisted generation, batch size 1, 50-130 ms
# a 5-token sample on 2 shared cores): 2 prompts x 192 samples per setting, at most ~50 s of
# candidate time per setting, ~60% of that when the futility stop ends a correct run; minimum
# detectable TV 0.23 per prompt.
FAST_PROMPTS = 20
SERIAL_PROMPTS = 2
SERIAL_SAMPLES_PER_PROMPT = 192
CONCURRENCY = 64  # requests in flight for routes that batch concurrent requests themselves
# A position whose next-token entropy is below this (nats) is fixed in ~99% of samples: no signal there.
MIN_POSITION_ENTROPY = 0.05
ARM_KEYS = {"baseline": 1, "candidate": 2, "pit": 3}
MAX_SEED = 2 ** 63 - 1


class Arm(Protocol):
    """One side of the comparison: draws samples of a prompt at a setting with a given seed."""

    name: str
    serial: bool

    def draw(self, prompt: int, setting: SamplingSetting, n: int, seed: int) -> list[tuple[int, ...]]: ...


def stream_seed(run_seed: int, *keys: int) -> int:
    """An independent 63-bit seed per (arm, setting, prompt, look): SeedSequence spawn keys."""
    state = np.random.SeedSequence(run_seed, spawn_key=tuple(int(k) for k in keys)).generate_state(2, np.uint64)
    return int(state[0]) & MAX_SEED


def setting_key(setting: SamplingSetting) -> int:
    return zlib.crc32(setting.name.encode())


@dataclass
class CheckResult:
    """Everything a finding needs: per-family p-values by look, Holm decisions, budget, samples."""

    setting: SamplingSetting
    budget: Budget
    plan: SequentialPlan
    alpha: float
    weights: dict[str, float]
    hypotheses: dict[str, SequentialHypothesis]
    adjusted: dict[str, float]
    rejected: dict[str, bool]
    look_sizes: tuple[int, ...]
    looks_done: int
    stopped: str
    evidence: Evidence = field(repr=False)

    @property
    def failed(self) -> bool:
        return any(self.rejected.values())

    @property
    def samples_used(self) -> int:
        """Per arm, per prompt."""
        return self.look_sizes[self.looks_done - 1] if self.looks_done else 0

    def family_report(self, name: str) -> dict:
        hyp = self.hypotheses[name]
        look = hyp.deciding_look
        return {
            "level": hyp.level, "pvalues_by_look": hyp.pvalues, "sequential_p": hyp.sequential_pvalue,
            "holm_adjusted": self.adjusted[name], "rejected": self.rejected[name],
            "screen_p": hyp.pvalues[look - 1] if look else None, "confirm_p": hyp.pvalues[look] if look else None,
            "deciding_look": look, "details": hyp.details[-1] if hyp.details else {},
        }

    def fresh_gate_pvalue(self) -> float | None:
        """The gate on the samples drawn after the screening look only (fresh, independent of the screen)."""
        look = self.hypotheses[GATE].deciding_look
        return None if look is None else self.evidence.gate(since=look)[0].pvalue


def run_check(*, baseline: Arm, candidate: Arm, prompts: int, setting: SamplingSetting, budget: Budget,
              alpha: float, seed: int, oracle: ProbabilityOracle | None = None,
              plan: SequentialPlan = SequentialPlan()) -> CheckResult:
    """Sample in looks until a confirmed rejection, futility, or the budget's end."""
    weights = family_weights(scored=oracle is not None)
    hypotheses = {name: SequentialHypothesis(name, alpha * w, plan) for name, w in weights.items()}
    names = list(weights)
    evidence = Evidence(prompts=prompts, tokens=budget.tokens, oracle=oracle,
                        rng=np.random.default_rng(stream_seed(seed, ARM_KEYS["pit"], setting_key(setting))))
    sizes = plan.look_sizes(budget.samples_per_prompt)
    adjusted = {n: 1.0 for n in names}
    rejected = {n: False for n in names}
    stopped, done, drawn = "budget exhausted", 0, 0
    with track(f"distribution {setting.name} (at most)", 2 * prompts * sizes[-1]) as progress:
        for look, size in enumerate(sizes):
            _draw_look(baseline, candidate, evidence, progress, prompts=prompts, setting=setting, look=look,
                       n=size - drawn, seed=seed)
            drawn, done = size, look + 1
            for name, result in evidence.evaluate().items():
                hypotheses[name].update(result.pvalue, result.details)
            flags, adj = holm([hypotheses[n].sequential_pvalue for n in names], alpha=alpha,
                              weights=[weights[n] for n in names])
            adjusted = dict(zip(names, map(float, adj)))
            rejected = dict(zip(names, map(bool, flags)))
            if any(rejected.values()):
                stopped = f"rejected at look {done} of {len(sizes)}"
                break
            if look == plan.screen_look and not any(h.screening(look) for h in hypotheses.values()):
                stopped = f"passed at look {done} of {len(sizes)} (nothing suspicious: futility stop)"
                break
    return CheckResult(setting=setting, budget=budget, plan=plan, alpha=alpha, weights=weights, hypotheses=hypotheses,
                       adjusted=adjusted, rejected=rejected, look_sizes=sizes, looks_done=done, stopped=stopped,
                       evidence=evidence)


def _draw_look(baseline: Arm, candidate: Arm, evidence: Evidence, progress, *, prompts: int,
               setting: SamplingSetting, look: int, n: int, seed: int) -> None:
    """One look: `n` fresh samples per prompt from each arm, on independent seed streams."""
    for prompt in range(prompts):
        keys = (setting_key(setting), prompt, look)
        a = baseline.draw(prompt, setting, n, stream_seed(seed, ARM_KEYS["baseline"], *keys))
        progress.advance(n)
        b = candidate.draw(prompt, setting, n, stream_seed(seed, ARM_KEYS["candidate"], *keys))
        progress.advance(n)
        evidence.add(prompt, look, a, b)


# ----------------------------------------------------------------------------------------- routes

def _request(prompt_ids: Sequence[int], setting: SamplingSetting, tokens: int, seed: int | None, tag: str) -> Request:
    return Request(prompt_ids=tuple(prompt_ids), max_tokens=tokens, temperature=setting.temperature,
                   top_p=setting.top_p, top_k=setting.top_k, min_p=setting.min_p, seed=seed, request_id=tag)


def setting_probe(prompt_ids: Sequence[int], setting: SamplingSetting) -> Request | None:
    """A one-token request with the setting's request features (min_p), to probe a route's support
    before sampling; None when the setting uses none."""
    if setting.min_p <= 0.0:
        return None
    return _request(prompt_ids, setting, 1, 0, f"dist-probe-{setting.name}")


def _plain_hf(route) -> bool:
    """An in-process transformers AR route we may batch (never a wrapper, which could alter outputs)."""
    from spec_route_suite.fixtures.routes.hf import HFRoute
    route = unwrap(route)
    return type(route) is HFRoute and not route.speculative


class RouteArm:
    """Samples from a route: its own `sample_n(req, n)` when it has one and declares capability `n`, a
    batched transformers call for plain AR hf routes, concurrent requests for routes that batch
    them, else one request at a time.

    With `n_choices` (the candidate on a route with capability `n`), half of each draw comes from
    OpenAI n=`n_choices` requests, pooled with the single draws: choices that share a random stream
    are copies, which the count and score tests see as samples far from independent. Each answer's
    usage.completion_tokens must be the sum over its choices; a mis-sum is kept in `usage_problems`.
    A route with `sample_n` gets one real n-choice request per draw (its usage checked) and the rest
    from `sample_n` with req.n set (the choices of n / req.n requests, in its own fast batch)."""

    def __init__(self, handle, prompt_ids: Sequence[Sequence[int]], *, tokens: int, text_level: bool = False,
                 tokenizer=None, n_choices: int = 0):
        self.handle = handle
        self.text_level, self.tokenizer = text_level, tokenizer
        self.name = handle.name
        self.prompt_ids = [tuple(p) for p in prompt_ids]
        self.tokens = tokens
        route = handle.route
        self._sample_n = getattr(route, "sample_n", None) if route.capabilities.has("n") else None
        self._batched_hf = _plain_hf(route)
        self.concurrent = bool(getattr(route.capabilities, "concurrency", False))
        self.serial = not (self._sample_n or self._batched_hf or self.concurrent)
        self.requests = 0
        self.n_choices = n_choices if route.capabilities.has("n") else 0
        self.pooled = 0                       # samples that came from n-choice requests
        self.usage_problems: list[str] = []
        self.n_refused = ""                   # the route's refusal of n > 1 (then every sample is single)

    def draw(self, prompt: int, setting: SamplingSetting, n: int, seed: int) -> list[tuple[int, ...]]:
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

    def _draw_choices(self, base: Request, n: int, seed: int) -> list[tuple[int, ...]]:
        """n samples as n / n_choices requests with n=n_choices, concurrently (each its own seed)."""
        if self._sample_n is not None and n > self.n_choices:
            sent_seed, rest_seed = (int(s) & MAX_SEED for s in np.random.SeedSequence(seed).generate_state(2, np.uint64))
            first = self._draw_choices_sent(base, self.n_choices, sent_seed)
            rest = self._sample_n(replace(base, n=self.n_choices, seed=rest_seed if base.seed is not None else None),
                                  n - self.n_choices)
            samples = first + self._from_ids([tuple(s) for s in self.handle.run(rest)])
            self.pooled += n - self.n_choices
            return samples
        return self._draw_choices_sent(base, n, seed)

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
            mis_summed = choices_usage_problem(out)
            if mis_summed:
                self.usage_problems.append(f"{req.request_id}: {mis_summed}")
            samples += [self._outcome(c) for c in choices]
        self.pooled += len(samples)
        return samples

    def _draw_single(self, base: Request, n: int, seed: int) -> list[tuple[int, ...]]:
        tag = base.request_id
        if n <= 0:
            return []
        base = replace(base, seed=seed if base.seed is not None else None)
        if self._sample_n is not None:
            return self._from_ids([tuple(s) for s in self.handle.run(self._sample_n(base, n))])
        if self._batched_hf:
            return self._from_ids(_hf_sample_batch(unwrap(self.handle.route), base, n, seed))
        seeds = np.random.SeedSequence(seed).generate_state(n, np.uint64) & np.uint64(MAX_SEED)
        reqs = [replace(base, seed=int(s) if base.seed is not None else None, request_id=f"{tag}-{i}")
                for i, s in enumerate(seeds)]
        self.requests += n
        if self.concurrent:
            outs = self.handle.generate_concurrently(reqs, concurrency=CONCURRENCY)
            errors = [o for o in outs if isinstance(o, RouteError)]
            if errors:
                raise errors[0]
            return [self._outcome(o) for o in outs]
        return [self._outcome(self.handle.generate(r)) for r in reqs]

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


def _hf_sample_batch(route, req: Request, n: int, seed: int) -> list[tuple[int, ...]]:
    """n samples of one prompt in one transformers call: rows are independent draws from the same
    per-row distribution, exactly what n single requests give, at a fraction of the cost."""
    import torch
    config = route._generation_config(req)
    eos = set(config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]) - {None}
    with route._lock, torch.inference_mode():
        torch.manual_seed(seed)
        ids = torch.tensor([list(req.prompt_ids)] * n, dtype=torch.long)
        out = route.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    samples = []
    for row in out.sequences[:, ids.shape[1]:].tolist():
        cut = next((i + 1 for i, tok in enumerate(row) if tok in eos), len(row))
        samples.append(tuple(row[:cut]))
    return samples


class RouteScorer:
    """Teacher forcing through the baseline: whole-vocabulary raw logprobs at every position. Uses the
    route's own `score_many(prompt_ids, continuations, top_k)` when it has one, one batched forward
    for in-process transformers routes, else one `score` request per continuation."""

    def __init__(self, handle, prompt_ids: Sequence[Sequence[int]], *, vocab: int):
        self.handle = handle
        self.prompt_ids = [tuple(p) for p in prompt_ids]
        self.vocab = vocab
        self._score_many = getattr(handle.route, "score_many", None)
        self._batched_hf = type(unwrap(handle.route)).__name__ == "HFRoute"

    def score_many(self, prompt: int, continuations: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
        ids = self.prompt_ids[prompt]
        if self._score_many is not None:
            scored = self.handle.run(self._score_many(ids, list(continuations), self.vocab))
            return [np.stack([rows_from_top(t.top, self.vocab) for t in seq]) for seq in scored]
        if self._batched_hf:
            return _hf_score_batch(unwrap(self.handle.route), ids, continuations)
        rows = []
        for cont in continuations:
            scored = self.handle.score(ids, cont, self.vocab)
            rows.append(np.stack([rows_from_top(t.top, self.vocab) for t in scored]))
        return rows

    def full_vocabulary(self) -> bool:
        """Score-based tests need the whole distribution; routes capped at top-20 logprobs do not give it."""
        try:
            rows = self.score_many(0, [(0,)])
        except (RouteError, NotImplementedError, TypeError, ValueError):
            return False
        return covers_vocabulary(rows[0][0])


def _hf_score_batch(route, prompt_ids: Sequence[int], continuations: Sequence[tuple[int, ...]],
                    chunk: int = 256) -> list[np.ndarray]:
    """One forward pass per chunk of same-prompt continuations, right-padded (causal attention keeps
    padding invisible to the real positions); the same numbers as the route's own `score`."""
    import torch
    out: list[np.ndarray] = []
    first = len(prompt_ids) - 1
    for start in range(0, len(continuations), chunk):
        batch = continuations[start:start + chunk]
        width = max(len(c) for c in batch)
        ids = torch.tensor([list(prompt_ids) + list(c) + [0] * (width - len(c)) for c in batch], dtype=torch.long)
        with route._lock, torch.inference_mode():
            logp = torch.log_softmax(route.model(ids).logits.float(), dim=-1)
        for row, cont in zip(logp, batch):
            out.append(row[first:first + len(cont)].double().numpy())
    return out


# ----------------------------------------------------------------------------------- planning

def draft_tokens(spec) -> int:
    return spec.num_assistant_tokens or spec.prompt_lookup or DEFAULT_DRAFT_TOKENS


def sample_tokens(spec, *, serial: bool) -> int:
    """Tokens per sample: one verify block and its bonus token (k + 1) on serial routes, whose every
    token costs wall time; two blocks on fast routes, because a well-trained model often fixes the
    first few tokens and the second block drafts, accepts and adds its bonus in other contexts."""
    block = draft_tokens(spec) + 1
    return block if serial else 2 * block


def setting_alpha(alpha: float) -> float:
    """Each grid setting is its own test module item: Bonferroni across the grid."""
    return alpha / len(GRID)


def gate_level(alpha: float, plan: SequentialPlan) -> float:
    return setting_alpha(alpha) * family_weights(scored=True)[GATE] * plan.spend[-1]


def plan_for(*, suite_config, serial: bool, prompts: int, tokens: int, plan: SequentialPlan) -> Budget:
    return plan_budget(detect_tv=suite_config.detect_tv, level=gate_level(suite_config.alpha, plan), power=POWER,
                       prompts=prompts, tokens=tokens, inflation=plan.inflation,
                       override=suite_config.samples_per_prompt, cap=SERIAL_SAMPLES_PER_PROMPT if serial else None)


def position_entropies(oracle: ProbabilityOracle, prompt: int, depth: int) -> list[float]:
    """Entropy the bins can see at each position j: P(likeliest path up to j) x H(next token there),
    under the oracle's sampling setting (at T=0.7/top-p 0.9 a sharp model is often deterministic).

    High at position 1 when the first token is uncertain; high at position k+1 when a likely path
    leads to an uncertain token there (all k drafts accepted, then the bonus token is sampled).
    A prompt whose continuation is fixed scores zero everywhere and would waste samples.
    """
    prefix: tuple[int, ...] = ()
    reach, out = 1.0, []
    for _ in range(depth):
        p = oracle.summary(prompt, prefix).probs
        support = p[p > 0]
        out.append(reach * float(-(support * np.log(support)).sum()))
        top = int(np.argmax(p))
        reach *= float(p[top])
        prefix += (top,)
    return out


@dataclass(frozen=True)
class RoutePlan:
    """What one setting's run samples: which prompts, how many tokens and samples, and what is scored."""

    prompt_ids: list[tuple[int, ...]]
    prompt_names: list[str]
    tokens: int
    serial: bool
    budget: Budget
    scorer: "RouteScorer | None"
    text_level: bool = False   # a route gives no token ids: samples compared as re-tokenized text


def text_level_pair(baseline, candidate, prompt_ids: Sequence[int]) -> bool:
    """Whether either route answers without token ids: one greedy token each (memoised by the handles)."""
    probe = Request(prompt_ids=tuple(prompt_ids), max_tokens=1, temperature=0.0, request_id="dist-id-probe")
    return is_text_level(baseline.generate(probe), candidate.generate(probe))


def plan_route_run(*, baseline, candidate, records, encode, tokenizer, suite_config, setting: SamplingSetting,
                   plan: SequentialPlan) -> RoutePlan:
    """Route speed decides prompts and tokens; the baseline's scores (when it gives the whole vocabulary)
    choose the prompts and enable the score-based families; the planner sizes the budget.
    `encode(record, max_tokens)` gives a record's ids sized into the routes' context."""
    first = [encode(records[0], 1)]
    serial = RouteArm(candidate, first, tokens=1).serial or RouteArm(baseline, first, tokens=1).serial
    tokens = sample_tokens(candidate.spec, serial=serial)
    all_ids = [encode(r, max(tokens, suite_config.max_new_tokens)) for r in records]
    text_level = text_level_pair(baseline, candidate, all_ids[0])
    scorer = (RouteScorer(baseline, all_ids, vocab=len(tokenizer))
              if baseline.capabilities.prompt_logprobs and not text_level else None)
    if scorer is not None and not scorer.full_vocabulary():
        scorer = None  # the score-based families need the whole distribution; the gate does not
    selector = ProbabilityOracle(scorer, setting) if scorer else None
    count = min(len(records), SERIAL_PROMPTS if serial else (MIN_P_PROMPTS if setting.min_p else FAST_PROMPTS))
    chosen = select_prompts([position_entropies(selector, i, tokens) for i in range(len(records))] if selector else None,
                            count, categories=[r.category for r in records])
    prompt_ids = [all_ids[i] for i in chosen]
    return RoutePlan(prompt_ids=prompt_ids, prompt_names=[records[i].id for i in chosen], tokens=tokens, serial=serial,
                     budget=plan_for(suite_config=suite_config, serial=serial, prompts=len(chosen), tokens=tokens,
                                     plan=plan),
                     scorer=RouteScorer(baseline, prompt_ids, vocab=len(tokenizer)) if scorer else None,
                     text_level=text_level)


def select_prompts(scores: Sequence[Sequence[float]] | None, count: int, *,
                   categories: Sequence[str] | None = None) -> list[int]:
    """Prompts chosen so that every sampled position is visible in some prompt, informative ones first.

    Positions are served in turn, first token and last position first, then the ones between; each
    takes the unchosen prompt with the most visible entropy there, skipping positions no prompt leaves
    uncertain. Then the rest by total visible entropy: a prompt with a fixed continuation still shows
    a candidate that emits a token the baseline never would (top-k/top-p on one side). Scored on the
    baseline alone, before any candidate sample, so the choice cannot bias the tests. Without scores
    (a baseline that cannot score): round-robin over the categories, in file order.
    """
    if scores is None:
        groups: dict[str, list[int]] = {}
        for i, category in enumerate(categories or ["all"] * count):
            groups.setdefault(category, []).append(i)
        order = [members[depth] for depth in range(max(map(len, groups.values()), default=0))
                 for members in groups.values() if depth < len(members)]
        return order[:count]
    count = min(count, len(scores))
    depth = len(scores[0]) if scores else 0
    turns = [0, depth - 1] + list(range(1, depth - 1)) if depth > 1 else [0]
    chosen: list[int] = []
    while len(chosen) < count:
        added = False
        for position in turns:
            options = [i for i in range(len(scores)) if i not in chosen and scores[i][position] > MIN_POSITION_ENTROPY]
            if options and len(chosen) < count:
                chosen.append(max(options, key=lambda i: scores[i][position]))
                added = True
        if not added:
            break
    rest = sorted((i for i in range(len(scores)) if i not in chosen), key=lambda i: -sum(scores[i]))
    return (chosen + rest)[:count]
