"""A/A calibration: how much does the baseline disagree with itself? That is tau.

A near-tie is only "numerical" if the baseline's own numbers move that much when
nothing but the execution conditions change. So we run the baseline against itself on a
handful of prompts under conditions a serving engine varies:

- incremental decoding (KV cache, one token per step) vs one-pass teacher forcing of
  the same tokens (a different kernel shape, like a k+1-token verification pass);
- one-pass scoring vs scoring split in two (prefix in the prompt, the rest forced);
- the request alone vs inside a concurrent batch of other requests of varied length
  (only where the route batches: `capabilities.concurrency`).

noise = the largest |delta logprob| of the same token in the same context across those
conditions (emitted tokens and shared top-k entries). Then

    tau         = max(TAU_FLOOR, SAFETY * noise)   margin threshold for a near-tie
    logprob_tol = max(TOL_FLOOR, SAFETY * noise)   tolerance on returned logprob values

SAFETY = 4: a flip needs the noise of both routes acting on both tokens (up to twice one
A/A difference), doubled again for conditions this short run did not see. The floors
(1e-3 nats) keep a bit-exact baseline (noise 0, e.g. float32 on CPU) from turning
every last-bit difference into a "bug", while staying three orders of magnitude above
float32 rounding and far below the margins a verifier bug produces.

Only the baseline is calibrated, never the candidate (a buggy candidate must not set its
own tolerance). So calibrate on the hardware and engine build the candidate runs on: a
candidate noisier than its baseline's A/A run (the reference engine's `logit_noise`
against the float32 CPU baseline) has splits above tau and is called a bug, which is the
truth about that pair; a baseline with the same noise (`--baseline
"reference:?fault=logit_noise&seed=1"`) calibrates tau above those splits.

The calibration also counts its own A/A greedy flips (positions where the incremental token is
not the one-pass argmax, and batch-vs-alone divergences): a description of the baseline, too
few tokens (3 prompts) to test a rate against. The near-tie family (equivalence/near_tie_rate.py)
counts flips on every greedy prompt of the run instead, on the baseline's answers (its A/A
exposure) and on the candidate's, and compares the two rates with `near_tie_excess` (an exact
test of two Poisson rates). A large excess means the verifier runs at a different precision
than the baseline.

The result is cached per run: under xdist one worker computes it while the others wait on
a FileLock and read the JSON. A user who knows their hardware's noise can pin tau by hand:
`--near-tie-tau` on the command line.
Environment: none.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from spec_route_suite.routes.base import Completion, Request, TokenLogprobs
from spec_route_suite.routes.errors import CapabilityMissing
from spec_route_suite.progress import track

SAFETY = 4.0
TAU_FLOOR = 1e-3
TOL_FLOOR = 1e-3
PROMPTS = 3
TOKENS = 32
TOP_K = 5
BATCH_CONCURRENCY = 4


@dataclass(frozen=True)
class Calibration:
    """What the A/A run measured and the thresholds derived from it."""

    route: str
    tau: float
    logprob_tol: float
    noise: float | None                      # None: nothing could be measured
    noise_by_condition: dict[str, float] = field(default_factory=dict)
    compared: int = 0                        # logprob values compared
    aa_tokens: int = 0                       # greedy tokens exposed to an A/A flip
    aa_flips: int = 0                        # A/A greedy flips seen (all near-ties by construction)
    aa_large_flips: int = 0                  # A/A flips with a margin above tau: the baseline is unstable
    safety: float = SAFETY
    floor: float = TAU_FLOOR
    overridden: bool = False
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    def describe(self) -> str:
        noise = "unmeasured" if self.noise is None else f"{self.noise:.3g}"
        return (f"tau {self.tau:.3g} nats, logprob tolerance {self.logprob_tol:.3g} (A/A noise {noise} over "
                f"{self.compared} values, safety x{self.safety:g}, floor {self.floor:g}"
                + (", overridden" if self.overridden else "") + ")")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Calibration":
        data = json.loads(text)
        data["notes"] = tuple(data.get("notes", ()))
        return cls(**data)


def derive_threshold(noise: float | None, *, safety: float = SAFETY, floor: float = TAU_FLOOR) -> float:
    """max(floor, safety * noise); the floor alone when the noise could not be measured."""
    if noise is None or not math.isfinite(noise):
        return floor
    return max(floor, safety * noise)


def logprob_deltas(*, a: Sequence[TokenLogprobs], b: Sequence[TokenLogprobs]) -> list[float]:
    """|delta| of the same token's logprob at the same position, emitted tokens and shared top entries."""
    out: list[float] = []
    for x, y in zip(a, b):
        if x.token_id != y.token_id:
            break
        out.append(abs(x.logprob - y.logprob))
        ytop = dict(y.top)
        out.extend(abs(lp - ytop[tid]) for tid, lp in x.top if tid in ytop)
    return out


def argmax_flips(*, tokens: Sequence[int], scored: Sequence[TokenLogprobs]) -> list[tuple[int, float]]:
    """Positions where an incrementally decoded greedy token is not the one-pass argmax, with the margin."""
    flips = []
    for position, (token, step) in enumerate(zip(tokens, scored)):
        if not step.top:
            continue
        best_id, best = max(step.top, key=lambda p: (p[1], -p[0]))
        if best_id != token:
            flips.append((position, max(0.0, best - step.logprob)))
    return flips


def near_tie_excess(*, ab_near_ties: int, ab_tokens: int, aa_near_ties: int, aa_tokens: int) -> float | None:
    """One-sided exact p-value that the A/B near-tie rate per token exceeds the A/A rate (two Poisson rates:
    given K events in all, the A/B count is Binomial(K, ab_tokens / (ab_tokens + aa_tokens)) when they are equal).

    None when either side has no exposure (nothing to compare).
    """
    if ab_tokens <= 0 or aa_tokens <= 0:
        return None
    total = ab_near_ties + aa_near_ties
    if total == 0:
        return 1.0
    from scipy.stats import binomtest
    share = ab_tokens / (ab_tokens + aa_tokens)
    return float(binomtest(ab_near_ties, total, share, alternative="greater").pvalue)


def _greedy(prompt_ids: Sequence[int], max_tokens: int, logprobs: int | None, request_id: str) -> Request:
    return Request(prompt_ids=tuple(prompt_ids), max_tokens=max_tokens, temperature=0.0, logprobs=logprobs,
                   request_id=request_id)


def _fillers(prompts: Sequence[Sequence[int]], max_tokens: int) -> list[Request]:
    """Other traffic for the batch condition: truncated prompts with different lengths and budgets."""
    out = []
    for i, ids in enumerate(prompts):
        cut = max(2, len(ids) // 2)
        out.append(_greedy(ids[:cut], max(4, max_tokens // (i + 2)), None, f"aa-filler-{i}"))
    return out


def calibrate(baseline, prompts: Sequence[Sequence[int]], *, max_tokens: int = TOKENS, top_k: int = TOP_K,
              concurrency: int = BATCH_CONCURRENCY) -> Calibration:
    """Run the A/A conditions on `baseline` (a RouteHandle) and derive tau and the logprob tolerance."""
    start = time.perf_counter()
    caps = baseline.capabilities
    k = min(top_k, int(caps.logprobs)) if caps.logprobs else None
    notes: list[str] = []
    by_condition: dict[str, list[float]] = {}
    aa_tokens = 0
    flips: list[float] = []
    alone: list[Completion] = []
    with track("A/A calibration: each prompt alone", len(prompts)) as progress:
        for i, ids in enumerate(prompts):
            alone.append(baseline.generate(_greedy(ids, max_tokens, k, f"aa-alone-{i}")))
            progress.advance()
    if k is None:
        notes.append(f"baseline '{baseline.name}' returns no logprobs: incremental-vs-one-pass not measured")
    can_score = bool(caps.prompt_logprobs)
    for ids, out in zip(prompts, alone):
        if not can_score or not out.token_ids:
            break
        try:
            one_pass = baseline.score(ids, out.token_ids, top_k)
            half = len(out.token_ids) // 2
            split = baseline.score(tuple(ids) + out.token_ids[:half], out.token_ids[half:], top_k)
        except CapabilityMissing as exc:
            notes.append(f"baseline '{baseline.name}' cannot teacher-force ({exc}): scoring conditions not measured")
            can_score = False
            break
        by_condition.setdefault("score one-pass vs split", []).extend(logprob_deltas(a=one_pass[half:], b=split))
        if out.logprobs:
            by_condition.setdefault("decode vs score", []).extend(logprob_deltas(a=out.logprobs, b=one_pass))
        aa_tokens += len(out.token_ids)
        flips.extend(margin for _, margin in argmax_flips(tokens=out.token_ids, scored=one_pass))
    if not caps.prompt_logprobs:
        notes.append(f"baseline '{baseline.name}' lacks prompt_logprobs: scoring conditions not measured")
    if caps.concurrency:
        batch = [_greedy(ids, max_tokens, k, f"aa-batch-{i}") for i, ids in enumerate(prompts)]
        results = baseline.generate_concurrently(batch + _fillers(prompts, max_tokens), concurrency=concurrency)
        for ids, solo, other in zip(prompts, alone, results[:len(batch)]):
            if not isinstance(other, Completion):
                notes.append(f"batch condition failed for one prompt: {other}")
                continue
            if solo.logprobs and other.logprobs:
                by_condition.setdefault("alone vs batch", []).extend(logprob_deltas(a=solo.logprobs, b=other.logprobs))
            aa_tokens += min(len(solo.token_ids), len(other.token_ids))
            margin = _batch_flip_margin(baseline, ids, solo, other, top_k, can_score)
            if margin is not None:
                flips.append(margin)
    else:
        notes.append(f"baseline '{baseline.name}' serves one request at a time: batch composition not varied")
    values = [v for vs in by_condition.values() for v in vs]
    noise = max(values) if values else None
    tau = derive_threshold(noise, floor=TAU_FLOOR)
    large = sum(1 for m in flips if m > tau)
    if large:
        notes.append(f"{large} A/A flip(s) with a margin above tau: the baseline is not stable against itself")
    return Calibration(
        route=baseline.name, tau=tau, logprob_tol=derive_threshold(noise, floor=TOL_FLOOR), noise=noise,
        noise_by_condition={c: max(vs) for c, vs in by_condition.items() if vs}, compared=len(values),
        aa_tokens=aa_tokens, aa_flips=len(flips), aa_large_flips=large,
        notes=tuple(notes), seconds=time.perf_counter() - start)


def _batch_flip_margin(baseline, prompt_ids, solo: Completion, other: Completion, top_k: int,
                       can_score: bool) -> float | None:
    """The margin of the first alone-vs-batch divergence (nan when it cannot be scored), None if none."""
    position = next((i for i, (a, b) in enumerate(zip(solo.token_ids, other.token_ids)) if a != b), None)
    if position is None:
        return None
    if not can_score:
        return float("nan")
    context = tuple(prompt_ids) + solo.token_ids[:position]
    step = baseline.score(context, (other.token_ids[position],), top_k)[0]
    best = max((lp for _, lp in step.top), default=step.logprob)
    return max(0.0, best - step.logprob)


def cached(path: Path | None, compute: Callable[[], Calibration]) -> Calibration:
    """Compute once per run: the first process to take the lock writes `path`, the others read it."""
    if path is None:
        return compute()
    from filelock import FileLock
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return Calibration.from_json(path.read_text())
        result = compute()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(result.to_json())
        tmp.replace(path)
        return result


def with_override(calibration: Calibration, tau: float | None) -> Calibration:
    """The same measurement with tau pinned by hand (for a user who knows their hardware's noise)."""
    return calibration if tau is None else replace(calibration, tau=tau, overridden=True)


class LazyCalibration:
    """The baseline's A/A calibration, computed on the first `get()` and kept for the session."""

    def __init__(self, baseline, records: list, prompts: list[tuple[int, ...]], max_tokens: int,
                 cache: Path | None, tau_override: float | None = None):
        self.records = records
        self._tau_override = tau_override
        self._baseline = baseline
        self._prompts = prompts
        self._max_tokens = max_tokens
        self._cache = cache
        self._value: Calibration | None = None

    def get(self) -> Calibration:
        if self._value is None:
            measured = cached(self._cache, lambda: calibrate(
                self._baseline, self._prompts, max_tokens=self._max_tokens))
            self._value = with_override(measured, self._tau_override)
        return self._value
