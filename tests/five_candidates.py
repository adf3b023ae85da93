"""A synthetic report.json with five candidates, the shape of llama.cpp's DFlash preset (DFlash, EAGLE-3 with
and without F4's workaround, draft-simple, ngram-simple): acceptance by position for each (4 to 8 positions),
speed rows for each at three levels, every matrix status, a divergence, p-values from discrete and continuous
tests, a contamination finding and its cluster. What the report.html self-tests render; the numbers are made up.
Environment: none.
"""
from __future__ import annotations

from typing import Any

from spec_route_suite.reports.coverage import (ANY_ROUTE, FAILED, NOT_APPLICABLE, NOT_RUN, NOT_SUPPORTED, NOT_VERIFIED,
                                               VERIFIED, CoverageRow, table_dicts)
from spec_route_suite.reports.matrix import coverage_matrix

CANDIDATES = ("dflash", "eagle3", "eagle3-f4-workaround", "draft-simple", "ngram-simple")
LEVELS = (1, 4, 16)
# per candidate: acceptance rate by position, throughput speedup at each level, TTFT factor over the baseline
SHAPES = {"dflash": ([0.82, 0.71, 0.63, 0.55, 0.48, 0.41, 0.35, 0.30], (2.6, 1.9, 1.2), 1.3),
          "eagle3": ([0.41, 0.22, 0.12, 0.07, 0.04, 0.02], (1.1, 0.9, 0.7), 1.1),
          "eagle3-f4-workaround": ([0.70, 0.52, 0.38, 0.27, 0.19, 0.13], (2.1, 1.6, 1.1), 1.2),
          "draft-simple": ([0.66, 0.49, 0.37, 0.28], (1.8, 1.4, 1.0), 1.15),
          "ngram-simple": ([0.35, 0.20, 0.12, 0.08], (1.2, 1.1, 1.0), 1.0)}
BASELINE_TTFT_S = {1: 0.031, 4: 0.12, 16: 0.46}
BASELINE_TOKENS_S = {1: 70.0, 4: 180.0, 16: 260.0}
P_VALUES = [1.0] * 22 + [0.0004, 0.03, 0.2, 0.41, 0.64, 0.77, 0.9, 0.97]


def _speed_row(route: str, level: int, throughput: float, ttft_factor: float, load: float) -> dict[str, Any]:
    ttft = BASELINE_TTFT_S[level] * ttft_factor
    return {"route": route, "concurrency": level, "ttft_p50_s": round(ttft, 4), "ttft_p95_s": round(ttft * 1.8, 4),
            "itl_p50_s": 0.012, "itl_p95_s": 0.025, "decode_tok_s": round(throughput / level * 1.3, 1),
            "throughput_tok_s": round(throughput, 1), "acceptance_length": None, "acceptance_answers": 0,
            "buffered": 0, "streamed": 24, "load_avg_1m": [load, round(load + 0.1, 2)]}


def _speed(name: str) -> dict[str, Any]:
    _, speedups, ttft_factor = SHAPES[name]
    noise = 1 + 0.03 * CANDIDATES.index(name)   # each candidate's own baseline run differs a little
    base = [_speed_row("baseline", c, BASELINE_TOKENS_S[c] * noise, noise, 1.5) for c in LEVELS]
    cand = [_speed_row(name, c, BASELINE_TOKENS_S[c] * noise * x, ttft_factor, 1.6) for c, x in zip(LEVELS, speedups)]
    return {"candidate": name, "baseline": "llama-ar", "levels": list(LEVELS), "prompts": 24, "max_tokens": 64,
            "rows": {"baseline": base, "candidate": cand},
            "speedup": [{"concurrency": c, "throughput_x": x, "decode_x": round(x * 0.9, 2),
                         "ttft_x": round(1 / ttft_factor, 2)} for c, x in zip(LEVELS, speedups)]}


def _coverage() -> list[dict[str, Any]]:
    def row(check, route, status, why, part="", instances=2, verified=None):
        verified = instances if verified is None else verified
        return CoverageRow(check=check, route=route, ran=f"{instances} prompt(s)", could_detect="a differing token",
                           status=status, why=why, part=part, instances=instances,
                           verified_instances=verified if status == VERIFIED else 0,
                           na_instances=instances if status == NOT_APPLICABLE else 0)
    rows = [row("greedy", name, VERIFIED, "every prompt matched") for name in CANDIDATES]
    rows[1] = row("greedy", "eagle3", FAILED, "diverged at token 17 on 1 prompt")
    rows += [row("streaming", name, VERIFIED if name != "ngram-simple" else NOT_VERIFIED,
                 "the stream had no token ids" if name == "ngram-simple" else "ids match") for name in CANDIDATES]
    rows += [row("features", "dflash", VERIFIED, "n works", part="n"),
             row("features", "dflash", NOT_SUPPORTED, "refused min_p", part="min_p"),
             row("features", "eagle3", NOT_SUPPORTED, "refused n", part="n"),
             row("prefix-cache", ANY_ROUTE, NOT_APPLICABLE, "no prefix cache"),
             row("mixing", "draft-simple", NOT_RUN, "deselected")]
    return table_dicts(rows)


def _verdicts() -> dict[str, dict[str, Any]]:
    gap = {"kind": "not verified", "subject": "streaming", "why": "the stream had no token ids",
           "text": "streaming not verified on ngram-simple"}
    return {"dflash": {"verdict": "pilot", "reason": "1 gap", "gaps": [{**gap, "kind": "not supported by this route",
                                                                       "subject": "features: min_p",
                                                                       "why": "refused min_p"}]},
            "eagle3": {"verdict": "avoid", "reason": "a greedy answer diverged at token 17 (bug)", "gaps": []},
            "eagle3-f4-workaround": {"verdict": "adopt", "reason": "every check passed with evidence", "gaps": []},
            "draft-simple": {"verdict": "adopt", "reason": "every check passed with evidence", "gaps": []},
            "ngram-simple": {"verdict": "pilot", "reason": "1 gap", "gaps": [gap]}}


def five_candidate_report() -> dict[str, Any]:
    divergence = {"check": "greedy", "severity": "bug", "route": "eagle3", "title": "diverges at 17 of prompt math-03",
                  "prompt_id": "math-03", "test_id": "equivalence/test_greedy.py::test_greedy[eagle3-math-03]",
                  "details": {"divergence": {"position": 17}}}
    contamination = {"check": "mixing", "severity": "bug", "route": "eagle3",
                     "title": "3 answers came from another request's context",
                     "test_id": "stressors/test_mixing.py::test_mixing[eagle3]",
                     "details": {"contamination_matrix": [{"source": "r01", "victim": "r07", "count": 2},
                                                          {"source": "r04", "victim": "r07", "count": 1},
                                                          {"source": "r07", "victim": "r12", "count": 3}]}}
    report = {
        "run_id": "five-candidates-1", "verdict": "avoid", "verdict_reason": "eagle3: a greedy answer diverged",
        "duration_s": 812.4, "complete": True, "route_verdicts": _verdicts(),
        "config": {"baseline": {"name": "llama-ar", "kind": "openai"},
                   "candidates": [{"name": name, "kind": "openai"} for name in CANDIDATES]},
        "coverage": _coverage(),
        "acceptance": {"llama-ar": {"per_position_acceptance_rate": [], "mean_acceptance_length": None},
                       **{name: {"per_position_acceptance_rate": SHAPES[name][0],
                                 "mean_acceptance_length": round(1 + sum(SHAPES[name][0]), 2)} for name in CANDIDATES}},
        "findings": [divergence, contamination],
        "measurements": {"speed": [_speed(name) for name in CANDIDATES],
                         "p_value": [{"test_id": f"t::{i}", "name": f"T1.0/{('exact_count', 'pit_ks', 'chi2')[i % 3]}",
                                      "p_value": p} for i, p in enumerate(P_VALUES)]},
        "clusters": [{"id": 1, "check": "greedy", "checks": [{"check": "greedy", "count": 1, "tests_total": 1, "of": 12}],
                      "route": "eagle3", "severity": "bug", "title": divergence["title"], "count": 1,
                      "prompts_total": 1, "tests_total": 1, "issue": "issues/001-openai-greedy.md",
                      "repro": ["repro/001-openai-greedy.py"]}],
    }
    report["matrix"] = coverage_matrix(report)
    return report
