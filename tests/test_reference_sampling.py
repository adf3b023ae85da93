"""The reference engine samples from the target's distribution, and each statistical fault does not.

Two layers. Fast: the pure rule in sampling.py on toy distributions with 10^5-10^6 draws
(laws of the first token, of a token inside an accepted block, of the bonus token; the
logit processing against transformers' own warpers). Slow (about a minute on 2 cores,
marked SLOW below): the whole batched engine on the embedded pair, a chi-square goodness of
fit of its samples against the exact target probabilities at fixed prefixes, with n chosen
to see a 2% TV shift (docs/statistics.md: GOF, top-9 tokens + other = df 9, lambda >= 4 n d^2 =
26.2 at n = 16384, d = 0.02, the 26.1 needed for alpha .01 / power .9), for the first
generated token and for the 3rd token after two accepted drafts; then every statistical
fault's samples, which the same test must reject (and which must follow the fault's exact
law from laws.py, so the fault is the bug it claims to be). Seeds are fixed: deterministic.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy import stats
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from spec_route_suite.embedded import DRAFT_DIR, TARGET_DIR
from spec_route_suite.routes.base import Request
from spec_route_suite.reference.engine import EngineConfig, SpecEngine
from spec_route_suite.reference.faults import FaultConfig
from spec_route_suite.reference.laws import Sampling, bonus_law, fault_first_token_law, processed, tv
from spec_route_suite.reference.sampling import RowParams, RuleFaults, one_hot, process_logits, sample, verify_block

ALPHA = 0.01
GOF_N = 16384          # 2% TV at df 9 (see module docstring)
FAULT_LAMBDA = 60.0    # fault samples: n with lambda >= 4 n d^2 = 60 at the predicted shift d (power ~1 at df 9)
MIN_FAULT_TV = 0.04    # a fault whose largest shift on the fixture prefixes is smaller is not testable here
BATCH = 1024
TOP_BINS = 9


# -- statistics helpers -------------------------------------------------------------------
def gof(*, observed: np.ndarray, expected_probs: np.ndarray, top: int = TOP_BINS) -> tuple[float, int]:
    """Pearson GOF on the `top` most likely tokens + "other", bins with expected >= 5 (pooled in advance)."""
    n = observed.sum()
    probs = np.asarray(expected_probs, dtype=np.float64)
    probs = probs / probs.sum()
    order = np.argsort(-probs, kind="stable")
    keep = [i for i in order[:top] if probs[i] * n >= 5]
    rest = np.ones(len(probs), dtype=bool)
    rest[keep] = False
    obs = np.array([observed[i] for i in keep] + [observed[rest].sum()], dtype=np.float64)
    exp = np.array([probs[i] * n for i in keep] + [probs[rest].sum() * n])
    if len(obs) < 2:
        return 1.0, len(obs)
    if exp[-1] < 5:  # pool a thin "other" into the last kept bin
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    if len(obs) < 2:
        return 1.0, 1
    if np.any((exp == 0) & (obs > 0)):
        return 0.0, len(obs)
    return float(stats.chisquare(obs, exp * (obs.sum() / exp.sum())).pvalue), len(obs)


def fault_budget(shift: float) -> int:
    """Samples for a planted fault of predicted TV shift `shift` (1024..8192)."""
    return int(min(8192, max(1024, math.ceil(FAULT_LAMBDA / (4 * shift ** 2)))))


def counts_of(tokens: np.ndarray, vocab: int) -> np.ndarray:
    return np.bincount(tokens, minlength=vocab).astype(np.float64)


# -- fast: the pure rule --------------------------------------------------------------------
def toy(vocab: int, positions: int, seed: int, *, peak: float = 2.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(peak * torch.randn(positions, vocab, generator=gen), -1)


def run_rule(p: torch.Tensor, q: torch.Tensor, n: int, *, seed: int, faults: RuleFaults = RuleFaults(),
             deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """n independent rows of one verification with context-free p [k+1, V] and q [k(+1), V]."""
    k = p.shape[0] - 1
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(n, 2 * k + 1, generator=gen)
    qq = q.unsqueeze(0).expand(n, -1, -1)
    if deterministic:
        drafts = q[:k].argmax(-1).unsqueeze(0).expand(n, k)
        q_used = one_hot(drafts, p.shape[-1])
    else:
        drafts = torch.stack([sample(qq[:, i], u[:, i]) for i in range(k)], 1)
        q_used = qq
    n_acc, final = verify_block(p=p.unsqueeze(0).expand(n, -1, -1), q=q_used, drafts=drafts,
                                u_accept=u[:, k:2 * k], u_final=u[:, 2 * k], faults=faults)
    return drafts, n_acc, final


def emitted(drafts: torch.Tensor, n_acc: torch.Tensor, final: torch.Tensor, position: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token at block position `position` for the rows whose block reaches it."""
    k = drafts.shape[1]
    reach = n_acc >= position
    padded = torch.cat([drafts, torch.zeros(len(drafts), 1, dtype=torch.long)], 1)
    token = torch.where(n_acc == position, final, padded[:, min(position, k)])
    return token[reach], reach


@pytest.mark.parametrize("deterministic", [False, True], ids=["sampled-draft", "argmax-draft"])
def test_rule_preserves_p_at_every_block_position(deterministic):
    vocab, k, n = 12, 3, 400_000
    q = toy(vocab, k + 1, seed=2)
    p = 0.6 * q + 0.4 * toy(vocab, k + 1, seed=1)  # a draft that is often right: every position is reached
    q = q[:k]
    drafts, n_acc, final = run_rule(p, q, n, seed=3, deterministic=deterministic)
    for position in range(k + 1):
        tokens, reach = emitted(drafts, n_acc, final, position)
        assert reach.sum() > 5000, f"block position {position} reached by only {int(reach.sum())} rows"
        pvalue, _ = gof(observed=counts_of(tokens.numpy(), vocab), expected_probs=p[position].numpy(), top=vocab)
        assert pvalue > ALPHA, f"block position {position}: p={pvalue:.2e} over {int(reach.sum())} rows"
    accept_rate = (n_acc >= 1).float().mean().item()
    expected_rate = float(torch.minimum(p[0], one_hot(q[0].argmax(), vocab) if deterministic else q[0]).sum())
    assert abs(accept_rate - expected_rate) < 0.005, "P(accept) must be 1 - TV(p, q)"


@pytest.mark.parametrize("fault, position", [("residual_from_p", 0), ("bonus_from_q", 3),
                                             ("accept_count_off_by_one", 0)])
def test_rule_faults_break_the_law(fault, position):
    vocab, k, n = 12, 3, 200_000
    p, q = toy(vocab, k + 1, seed=4), toy(vocab, k + 1, seed=5)
    drafts, n_acc, final = run_rule(p, q, n, seed=6, faults=RuleFaults(**{fault: True}))
    tokens, _ = emitted(drafts, n_acc, final, position)
    pvalue, _ = gof(observed=counts_of(tokens.numpy(), vocab), expected_probs=p[position].numpy(), top=vocab)
    assert pvalue < 1e-6, f"{fault} left block position {position} looking like p (p={pvalue:.2e})"


def test_sample_never_returns_zero_mass_and_follows_probs():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.25, 0.25, 0.0]]).expand(200_000, -1)
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0))
    u[:3] = torch.tensor([0.0, 0.999999999, 0.5])
    tokens = sample(probs, u)
    assert set(tokens.unique().tolist()) <= {1, 3, 4}
    pvalue, _ = gof(observed=counts_of(tokens.numpy(), 6), expected_probs=probs[0].numpy(), top=6)
    assert pvalue > ALPHA
    unnormalised = sample(probs * 7.0, u)
    assert torch.equal(unnormalised, tokens), "inverse-CDF sampling must normalise by the total mass"


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 50, 0.9), (1.3, 5, 1.0), (0.5, 0, 0.8)])
def test_processing_matches_transformers_warpers(temperature, top_k, top_p):
    logits = 3 * torch.randn(4, 1, 512, generator=torch.Generator().manual_seed(7))
    ours = process_logits(logits, RowParams.of([(temperature, top_k, top_p)] * 4))[:, 0]
    scores = TemperatureLogitsWarper(temperature)(None, logits[:, 0].clone())
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    theirs = torch.softmax(scores, -1)
    assert torch.allclose(ours, theirs, atol=1e-6), float((ours - theirs).abs().max())


def test_greedy_rows_are_one_hot_at_the_raw_argmax():
    logits = torch.randn(3, 2, 40, generator=torch.Generator().manual_seed(8))
    probs = process_logits(logits, RowParams.of([(0.0, 5, 0.5), (1.0, 0, 1.0), (0.0, 0, 1.0)]))
    assert torch.equal(probs[0].argmax(-1), logits[0].argmax(-1)) and torch.all(probs[0].max(-1).values == 1)
    assert torch.all(probs[1].max(-1).values < 1)


# -- slow: the whole engine on the embedded pair ----------------------------------------------
@pytest.fixture(scope="module")
def pair():
    if not (TARGET_DIR / "model.safetensors").exists():
        pytest.skip("the embedded models are not trained yet (fixtures/models/target/model.safetensors)")
    from spec_route_suite.tokenizers import load_tokenizer
    from spec_route_suite.reference.route import load_model
    torch.set_num_threads(1)
    return load_model(str(TARGET_DIR)), load_model(str(DRAFT_DIR)), load_tokenizer(str(TARGET_DIR))


@pytest.fixture(scope="module")
def scan(pair):
    """Target and draft logits at every prefix of the fixture prompts (first 96 tokens)."""
    from spec_route_suite.tokenizers import encode_prompt
    from spec_route_suite.prompts.records import load_prompt_set
    target, draft, tok = pair
    rows = []
    with torch.inference_mode():
        for record in load_prompt_set(("math", "code", "chat", "json")):
            ids = list(encode_prompt(tok, record.text))[:96]
            x = torch.tensor([ids])
            rows.append((ids, target(x).logits[0].float(), draft(x).logits[0].float()))
    return rows


def engine_for(pair, *, fault: str | None = None, k: int = 4) -> SpecEngine:
    target, draft, tok = pair
    config = EngineConfig(k=k, drafter="model", max_batch=BATCH, faults=FaultConfig(name=fault))
    return SpecEngine(target, draft, tok, config)


def draw(engine: SpecEngine, prefix: list[int], *, n: int, sampling: Sampling, length: int, seed: int) -> np.ndarray:
    """n seeded samples of the first `length` tokens after `prefix` -> array [n, length]."""
    out = []
    for start in range(0, n, BATCH):
        reqs = [Request(prompt_ids=tuple(prefix), max_tokens=length, temperature=sampling.temperature,
                        top_k=sampling.top_k, top_p=sampling.top_p, seed=seed + i, ignore_eos=True)
                for i in range(start, min(n, start + BATCH))]
        out.extend(c.token_ids for c in engine.run(reqs))
    return np.array(out, dtype=np.int64)


def spread(p: torch.Tensor, n: int) -> torch.Tensor:
    """Positions where the tested distribution is worth testing: not near-deterministic, >= 4 real bins."""
    return (p.max(-1).values <= 0.85) & ((p * n >= 5).sum(-1) >= 4)


def pick_first_token(scan, fault: str | None, sampling: Sampling, *, n: int):
    """The prefix where the fault's first-token shift (or, fault None, the rejection rate) is largest."""
    best = None
    for ids, t_logits, d_logits in scan:
        want, law = fault_first_token_law(fault, target_logits=t_logits, draft_logits=d_logits, sampling=sampling)
        if fault is None:
            score = tv(processed(t_logits, sampling), processed(d_logits, sampling))
        else:
            score = tv(want, law)
        score = torch.where(spread(want, n), score, torch.zeros_like(score))
        score[:2] = 0
        j = int(score.argmax())
        if best is None or float(score[j]) > best[0]:
            best = (float(score[j]), ids[:j + 1], want[j], law[j])
    return best


@pytest.mark.parametrize("sampling, n", [(Sampling(1.0), GOF_N), (Sampling(0.8, top_k=50, top_p=0.95), 4096)],
                         ids=["T1-n16384", "T0.8-k50-p0.95-n4096"])
def test_SLOW_engine_first_token_matches_target(pair, scan, sampling, n):
    """T=1 at the full 2%-TV budget; the filtered grid point at a 4.5%-TV budget (it guards processing)."""
    reject_rate, prefix, want, _ = pick_first_token(scan, None, sampling, n=n)
    tokens = draw(engine_for(pair), prefix, n=n, sampling=sampling, length=1, seed=10_000)
    pvalue, bins = gof(observed=counts_of(tokens[:, 0], want.numel()), expected_probs=want.numpy())
    assert bins >= 4, f"prefix too peaked to test ({bins} bins)"
    assert pvalue > ALPHA, f"first-token GOF rejects the correct engine: p={pvalue:.2e} ({bins} bins, TV(p,q)={reject_rate:.3f})"


def pick_after_two(scan, sampling: Sampling, *, n: int):
    """A prefix whose next two tokens are near-certain (and drafted) and whose third is spread."""
    best = None
    for ids, t_logits, d_logits in scan:
        p, q = processed(t_logits, sampling), processed(d_logits, sampling)
        nxt = torch.tensor(ids[1:] + [0])
        sure = torch.minimum(p, q).gather(-1, nxt.unsqueeze(-1)).squeeze(-1)  # P(draft x accepted as x)
        for j in range(2, len(ids) - 3):
            if not bool(spread(p[j + 2:j + 3], n)[0]):
                continue
            score = float(sure[j] * sure[j + 1] * tv(p[j + 2], q[j + 2]))
            if best is None or score > best[0]:
                mass = float(p[j, ids[j + 1]] * p[j + 1, ids[j + 2]])
                best = (score, ids[:j + 1], (ids[j + 1], ids[j + 2]), p[j + 2], mass)
    return best


def test_SLOW_engine_third_token_after_accepted_drafts_matches_target(pair, scan):
    sampling = Sampling(0.9, top_k=40, top_p=0.95)
    score, prefix, fixed, want, mass = pick_after_two(scan, sampling, n=GOF_N)
    assert mass > 0.5, f"no prefix with a near-certain two-token lead (best mass {mass:.2f})"
    n = int(math.ceil(GOF_N / mass * 1.05))
    tokens = draw(engine_for(pair, k=3), prefix, n=n, sampling=sampling, length=3, seed=20_000)
    kept = tokens[(tokens[:, 0] == fixed[0]) & (tokens[:, 1] == fixed[1])][:, 2]
    assert len(kept) >= GOF_N * 0.95, f"only {len(kept)} samples kept the two-token lead (mass {mass:.2f})"
    pvalue, bins = gof(observed=counts_of(kept, want.numel()), expected_probs=want.numpy())
    assert pvalue > ALPHA, f"3rd-token GOF rejects the correct engine: p={pvalue:.2e} ({bins} bins, {len(kept)} samples)"


FIRST_TOKEN_FAULTS = [("residual_from_p", Sampling(1.0)), ("soft_q_for_argmax_draft", Sampling(1.0)),
                      ("draft_temperature_ignored", Sampling(0.5)), ("top_p_one_side", Sampling(1.0, top_p=0.8))]


@pytest.mark.parametrize("fault, sampling", FIRST_TOKEN_FAULTS, ids=[f for f, _ in FIRST_TOKEN_FAULTS])
def test_SLOW_statistical_fault_shifts_first_token(pair, scan, fault, sampling):
    shift, prefix, want, law = pick_first_token(scan, fault, sampling, n=1024)
    assert shift >= MIN_FAULT_TV, f"{fault}: largest predicted shift on the fixture prefixes is only {shift:.3f}"
    tokens = draw(engine_for(pair, fault=fault), prefix, n=fault_budget(shift), sampling=sampling, length=1,
                  seed=30_000)
    counts = counts_of(tokens[:, 0], want.numel())
    p_target, bins = gof(observed=counts, expected_probs=want.numpy())
    p_law, _ = gof(observed=counts, expected_probs=law.numpy())
    assert p_target < ALPHA, f"{fault}: GOF against the target did not reject (p={p_target:.2e}, predicted TV {shift:.3f})"
    assert p_law > 1e-3, f"{fault}: samples do not follow the fault's own law (p={p_law:.2e}): the fault is not the bug it names"


def test_SLOW_bonus_from_q_shifts_the_bonus_token(pair, scan):
    sampling, n = Sampling(1.0), 1024
    best = None
    for ids, t_logits, d_logits in scan:
        p, q = processed(t_logits, sampling), processed(d_logits, sampling)
        for j in range(2, len(ids) - 2):
            x1 = ids[j + 1]
            if p[j, x1] < 0.8 or not bool(spread(p[j + 1:j + 2], n)[0]):
                continue
            law = bonus_law(p1=p[j], q1=q[j], x1=x1, p2=p[j + 1], q2=q[j + 1], bonus_from_q=True)
            shift = float(tv(law, p[j + 1]))
            if best is None or shift > best[0]:
                best = (shift, ids[:j + 1], x1, p[j + 1], law, float(p[j, x1]))
    shift, prefix, x1, want, law, mass = best
    assert shift >= MIN_FAULT_TV, f"bonus_from_q: largest predicted shift is only {shift:.3f}"
    tokens = draw(engine_for(pair, fault="bonus_from_q", k=1), prefix, n=int(fault_budget(shift) / mass * 1.05),
                  sampling=sampling, length=2, seed=40_000)
    kept = tokens[tokens[:, 0] == x1][:, 1]
    counts = counts_of(kept, want.numel())
    p_target, _ = gof(observed=counts, expected_probs=want.numpy())
    p_law, _ = gof(observed=counts, expected_probs=law.numpy())
    assert p_target < ALPHA, f"bonus_from_q: not rejected (p={p_target:.2e}, predicted TV {shift:.3f})"
    assert p_law > 1e-3, f"bonus_from_q: samples do not follow the fault's law (p={p_law:.2e})"
