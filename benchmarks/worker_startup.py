"""What one xdist worker spends before and around its first requests, step by step (CPU and wall seconds).

    python -m benchmarks.worker_startup [--settings T1.0,T1.5]

Every worker of `spec-route-suite -n 8` pays the imports (pytest, torch, transformers) and the routes
it touches (tokenizer and models loaded once per worker and route); the distribution check's prompt
choice (the baseline's scores along each prompt's greedy path) is computed once per run and shared
through the run's folder (equivalence/distribution_prompts.py), where it used to cost each of the 8
distribution tests ~10 CPU-s. The benchmark runs each step in this one process, in the order a
worker meets them, and prints CPU seconds (what 2 shared cores pay, whatever the neighbours do) and
wall seconds. Run it in a fresh process: imports are measured cold. Environment: none.
"""
from __future__ import annotations

import argparse
import sys
import time

START_CPU = time.process_time()
START_WALL = time.perf_counter()


class Steps:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []
        self._cpu, self._wall = time.process_time(), time.perf_counter()

    def mark(self, label: str) -> None:
        cpu, wall = time.process_time(), time.perf_counter()
        self.rows.append((label, cpu - self._cpu, wall - self._wall))
        self._cpu, self._wall = cpu, wall

    def table(self) -> str:
        lines = ["| step | CPU s | wall s |", "|---|---|---|"]
        lines += [f"| {label} | {cpu:.2f} | {wall:.2f} |" for label, cpu, wall in self.rows]
        total_cpu = sum(r[1] for r in self.rows)
        total_wall = sum(r[2] for r in self.rows)
        lines.append(f"| total | {total_cpu:.2f} | {total_wall:.2f} |")
        return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="", help="grid settings to plan (default: all)")
    args = parser.parse_args(argv)
    steps = Steps()
    import pytest  # noqa: F401  - what every worker imports first
    import spec_route_suite.plugin  # noqa: F401
    steps.mark("pytest + the suite's plugin")
    import torch
    torch.set_num_threads(1)
    steps.mark("import torch")
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401
    steps.mark("import transformers")
    from spec_route_suite.routes.loop import BackgroundLoop
    from spec_route_suite.routes.registry import build_route
    from spec_route_suite.routes.spec import default_baseline
    from spec_route_suite.config import default_candidates
    from spec_route_suite.session import RouteHandle
    loop = BackgroundLoop()
    base_spec = default_baseline()
    baseline = RouteHandle(build_route(base_spec), base_spec, loop, 600)
    steps.mark("build the baseline (hf AR: tokenizer + target)")
    assisted, batched = default_candidates()
    RouteHandle(build_route(assisted), assisted, loop, 600)
    steps.mark("build 'candidate' (hf assisted: tokenizer + target + draft)")
    RouteHandle(build_route(batched), batched, loop, 600)
    steps.mark("build 'reference-batched' (tokenizer + target + draft + engine)")
    from spec_route_suite.routes.base import Request
    from spec_route_suite.prompts.encode import encode_record
    from spec_route_suite.prompts.records import load_prompt_set
    records = load_prompt_set()
    ids = [encode_record(baseline.route.tokenizer, r) for r in records]
    baseline.generate(Request(prompt_ids=ids[0], max_tokens=8, temperature=0.0))
    steps.mark("first greedy request on the baseline")
    from spec_route_suite.equivalence.distribution import GRID
    from spec_route_suite.equivalence.distribution_prompts import prompt_scores
    from spec_route_suite.equivalence.distribution_routes import RouteScorer
    wanted = [s for s in GRID if not args.settings or s.name in args.settings.split(",")]
    scorer = RouteScorer(baseline, ids, vocab=len(baseline.route.tokenizer))
    prompt_scores(baseline, ids, depth=10, settings=wanted, shared=None,
                  score=lambda prompt, path: scorer.score_many(ids.index(tuple(prompt)), [path])[0])
    steps.mark(f"distribution planning: prompt scores of {len(ids)} prompts at {len(wanted)} settings (once per run)")
    loop.close()
    print(f"python {sys.version.split()[0]}, torch threads 1; interpreter start to first step not counted")
    print(steps.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
