"""Planning one setting of the distribution check on a route pair: design, prompts, tokens, budget.

The design: scoring (the candidate's samples against the baseline's exact probabilities, a quarter
of the requests) wherever the baseline's scores give the setting's processed distribution exactly:
whole-vocabulary logprobs at any setting, top-K logprobs where stats/topk.py says they suffice;
two-sample otherwise, and `why` says which ran and why (it goes into the coverage row). Route speed
decides prompts and tokens (a serial route samples fewer), the baseline's scores choose the prompts,
the planner sizes each design's budget for --detect-tv at power 0.9.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from spec_route_suite.equivalence.depth import draft_depth
from spec_route_suite.equivalence.distribution import (ARM_KEYS, GRID, POWER, SCORING, TWO_SAMPLE, setting_alpha,
                                                        setting_key, stream_seed)
from spec_route_suite.equivalence.distribution_prompts import prompt_scores, select_prompts
from spec_route_suite.equivalence.distribution_routes import N_CHOICES, TOP_K, RouteArm, RouteScorer, TopScorer
from spec_route_suite.equivalence.stats.families import GATE, family_weights
from spec_route_suite.equivalence.stats.onesample import SCORED_GATE, ScoredEvidence, scored_evidence, scored_weights
from spec_route_suite.equivalence.stats.oracle import ProbabilityOracle
from spec_route_suite.equivalence.stats.planner import Budget, plan_budget
from spec_route_suite.equivalence.stats.sequential import SequentialPlan
from spec_route_suite.equivalence.stats.topk import TopSource, top_inexact_why
from spec_route_suite.equivalence.stats.warp import SamplingSetting
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.errors import RouteError
from spec_route_suite.routes.textlevel import is_text_level

# The min_p point samples fewer prompts on fast routes (its cost is the default run's budget: 20 prompts
# took 134 s of a worker on 2 loaded cores). Per prompt the planner keeps --detect-tv at power 0.9;
# fewer prompts only means fewer contexts.
MIN_P_PROMPTS = 6
# Prompts per run. Fast routes (batched or concurrent): 20 prompts see a 5% shift in each (planner).
# Serial routes (transformers assisted generation, batch size 1, 50-130 ms a 5-token sample on 2 shared
# cores): 2 prompts x 192 samples per arm per setting, at most ~50 s of candidate time per setting
# (minimum detectable TV 0.23); the scoring test sees the same TV with half as many candidate samples.
FAST_PROMPTS = 20
SERIAL_PROMPTS = 2
SERIAL_SAMPLES_PER_PROMPT = 192


def sample_tokens(k: int, *, serial: bool) -> int:
    """Tokens per sample: one verify block and its bonus token (k + 1) on serial routes, whose every
    token costs wall time; two blocks on fast routes, because a well-trained model often fixes the
    first few tokens and the second block drafts, accepts and adds its bonus in other contexts."""
    block = k + 1
    return block if serial else 2 * block


def gate_level(alpha: float, plan: SequentialPlan, *, weight: float | None = None) -> float:
    """The gate's level at its final look: its Holm weight of the setting's alpha, times the last look's spend."""
    weight = family_weights(scored=True)[GATE] if weight is None else weight
    return setting_alpha(alpha) * weight * plan.spend[-1]


def budget_for(*, detect_tv: float, alpha: float, prompts: int, tokens: int, plan: SequentialPlan,
               one_sample: bool = False, weight: float | None = None, serial: bool = False,
               override: int | None = None) -> Budget:
    """One design's budget for `detect_tv` at power 0.9 (the scoring design: one_sample, its gate's Holm weight)."""
    return plan_budget(detect_tv=detect_tv, level=gate_level(alpha, plan, weight=weight), power=POWER,
                       prompts=prompts, tokens=tokens, inflation=plan.inflation, override=override,
                       cap=(SERIAL_SAMPLES_PER_PROMPT // (2 if one_sample else 1)) if serial else None,
                       one_sample=one_sample)


def plan_for(*, suite_config, serial: bool, prompts: int, tokens: int, plan: SequentialPlan,
             one_sample: bool = False, weight: float | None = None) -> Budget:
    return budget_for(detect_tv=suite_config.detect_tv, alpha=suite_config.alpha, prompts=prompts, tokens=tokens,
                      plan=plan, one_sample=one_sample, weight=weight, serial=serial,
                      override=suite_config.samples_per_prompt)


def scoring_builder(source, *, oracle, setting: SamplingSetting, prompts: int, tokens: int, budget: Budget,
                    stop_ids: Sequence[int], seed: int) -> Callable[[], tuple[ScoredEvidence, Budget]]:
    """run_distribution's `scoring`: bins from the exact `source` (oracle: whole-vocabulary rows for the token
    families, or None), built when the design starts."""
    def build() -> tuple[ScoredEvidence, Budget]:
        rng = np.random.default_rng(stream_seed(seed, ARM_KEYS["pit"], setting_key(setting)))
        return scored_evidence(source, prompts=prompts, tokens=tokens, samples=budget.samples_per_prompt,
                               stop_ids=stop_ids, rng=rng, oracle=oracle), budget
    return build


def text_level_pair(baseline, candidate, prompt_ids: Sequence[int]) -> bool:
    """Whether either route answers without token ids: one greedy token each (memoised by the handles)."""
    probe = Request(prompt_ids=tuple(prompt_ids), max_tokens=1, temperature=0.0, request_id="dist-id-probe")
    return is_text_level(baseline.generate(probe), candidate.generate(probe))


@dataclass
class BaselineScores:
    """How the baseline scores: whole-vocabulary rows, top-K rows, or not at all (and why)."""

    whole: RouteScorer | None = None
    top: TopScorer | None = None
    why_not: str = ""

    @classmethod
    def probe(cls, baseline, prompt_ids, *, vocab: int, depth: int, text_level: bool) -> "BaselineScores":
        if text_level:
            return cls(why_not="a route returns no token ids: samples are re-tokenized text, which the baseline's "
                               "scores do not describe")
        caps = baseline.capabilities
        if caps.prompt_logprobs:
            whole = RouteScorer(baseline, prompt_ids, vocab=vocab)
            if whole.full_vocabulary():
                return cls(whole=whole)
        if caps.prompt_logprobs or caps.logprobs:
            top = TopScorer(baseline, prompt_ids, vocab=vocab, k=min(caps.logprobs or TOP_K, vocab), depth=depth)
            try:
                top.row(0, ())
            except (RouteError, NotImplementedError, TypeError, ValueError) as exc:
                return cls(why_not=f"the baseline's scoring failed: {exc}"[:300])
            return cls(top=top)
        return cls(why_not="the baseline neither teacher-forces (prompt_logprobs) nor returns logprobs")

    def rows(self, prompt_ids: Sequence[int], path: Sequence[int], prompt: int) -> np.ndarray:
        """Raw rows along `path` of one prompt (for prompt selection)."""
        if self.whole is not None:
            return self.whole.score_many(prompt, [tuple(path)])[0]
        return self.top.path_rows(prompt, path)

    def design_why(self, setting: SamplingSetting) -> tuple[str, str]:
        """(design, why) at this setting."""
        if self.whole is not None:
            return SCORING, "the baseline gives whole-vocabulary logprobs"
        if self.top is not None:
            inexact = top_inexact_why(setting, self.top.k, self.top.vocab)
            if not inexact:
                how = "teacher forcing" if self.top.teacher_forcing else "one greedy request per prefix"
                return SCORING, (f"the baseline's top-{self.top.k} logprobs ({how}) give {setting.name}'s "
                                 f"probabilities exactly")
            return TWO_SAMPLE, inexact
        return TWO_SAMPLE, self.why_not


@dataclass(frozen=True)
class RoutePlan:
    """What one setting's run samples: which prompts, how many tokens and samples, which design and why."""

    prompt_ids: list[tuple[int, ...]]
    prompt_names: list[str]
    tokens: int
    serial: bool
    budget: Budget                     # the two-sample design's (the fallback when scoring runs)
    scorer: RouteScorer | None         # whole-vocabulary scores: the diagnostic token families
    text_level: bool = False           # a route gives no token ids: samples compared as re-tokenized text
    design: str = TWO_SAMPLE
    why: str = ""
    scoring_budget: Budget | None = None
    top: TopScorer | None = None
    stop_ids: tuple[int, ...] = ()

    def oracle(self, setting: SamplingSetting) -> ProbabilityOracle | None:
        return ProbabilityOracle(self.scorer, setting) if self.scorer is not None else None

    def arms(self, baseline, candidate, *, tokenizer) -> dict[str, RouteArm]:
        """The two sampling arms of this run, by role; the candidate draws part of its samples as n-choice
        requests (N_CHOICES) when its route has capability `n`."""
        return {name: RouteArm(handle, self.prompt_ids, tokens=self.tokens, text_level=self.text_level,
                               tokenizer=tokenizer, n_choices=N_CHOICES if name == "candidate" else 0)
                for name, handle in (("baseline", baseline), ("candidate", candidate))}

    def scoring(self, setting: SamplingSetting, seed: int) -> Callable[[], tuple[ScoredEvidence, Budget]] | None:
        """The scoring design's evidence builder for run_distribution, or None when the design is two-sample."""
        if self.design != SCORING:
            return None
        oracle = self.oracle(setting)
        source = oracle if oracle is not None else TopSource(lambda prompt, prefix: self.top.row(prompt, prefix),
                                                              setting, self.top.k, self.top.vocab)
        return scoring_builder(source, oracle=oracle, setting=setting, prompts=len(self.prompt_ids),
                               tokens=self.tokens, budget=self.scoring_budget, stop_ids=self.stop_ids, seed=seed)


def plan_route_run(*, baseline, candidate, records, encode, tokenizer, suite_config, setting: SamplingSetting,
                   plan: SequentialPlan, shared: Path | None = None) -> RoutePlan:
    """`encode(record, max_tokens)` gives a record's ids sized into the routes' context; `shared` is the run's
    folder every xdist worker sees (prompt scores computed once per run), None without xdist."""
    first = [encode(records[0], 1)]
    serial = RouteArm(candidate, first, tokens=1).serial or RouteArm(baseline, first, tokens=1).serial
    tokens = sample_tokens(draft_depth(candidate.inventory(), candidate.spec).k, serial=serial)
    all_ids = [encode(r, max(tokens, suite_config.max_new_tokens)) for r in records]
    text_level = text_level_pair(baseline, candidate, all_ids[0])
    vocab = len(tokenizer)
    scores = BaselineScores.probe(baseline, all_ids, vocab=vocab, depth=tokens, text_level=text_level)
    count = min(len(records), SERIAL_PROMPTS if serial else (MIN_P_PROMPTS if setting.min_p else FAST_PROMPTS))
    ranked = None
    if scores.whole is not None or scores.top is not None:
        settings = list(GRID) + ([setting] if setting not in GRID else [])
        by_setting = prompt_scores(baseline, all_ids, depth=tokens, settings=settings, shared=shared,
                                   score=lambda ids, path: scores.rows(ids, path, all_ids.index(tuple(ids))))
        ranked = by_setting[repr(setting)]
    chosen = select_prompts(ranked, count, categories=[r.category for r in records])
    prompt_ids = [all_ids[i] for i in chosen]
    design, why = scores.design_why(setting)
    whole = RouteScorer(baseline, prompt_ids, vocab=vocab) if scores.whole is not None else None
    top = TopScorer(baseline, prompt_ids, vocab=vocab, k=scores.top.k, depth=tokens) if scores.top else None
    common = dict(suite_config=suite_config, serial=serial, prompts=len(chosen), tokens=tokens, plan=plan)
    scoring_budget = None
    if design == SCORING:
        weight = scored_weights(token_families=whole is not None)[SCORED_GATE]
        scoring_budget = plan_for(**common, one_sample=True, weight=weight)
    eos = getattr(tokenizer, "eos_token_id", None)
    return RoutePlan(prompt_ids=prompt_ids, prompt_names=[records[i].id for i in chosen], tokens=tokens, serial=serial,
                     budget=plan_for(**common), scorer=whole, text_level=text_level, design=design, why=why,
                     scoring_budget=scoring_budget, top=top, stop_ids=(eos,) if eos is not None else ())
