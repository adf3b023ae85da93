"""How often the counters-based acceptance-under-load check (stressors/speed/counters.py) sees a collapse per round.

    python -m benchmarks.load_acceptance_power --routes routes/llama-cpp-dflash.toml --candidates eagle3,eagle3_cpu_sampling --rounds 12

The servers of the routes file must be running. For each candidate: `--rounds` alternating rounds of the speed
gate's greedy prompts one at a time and at `--level` in flight, measured as the controller measures them (the
route's counter differences), then the share of rounds that collapsed (a loaded round at least COLLAPSE_DROP below
the lowest one-at-a-time round) and the power that share gives the check's ROUNDS rounds: 1 - (1 - share)^ROUNDS.
F4 (docs/llama-cpp-findings.md) is the positive control: it strikes only prompts that share a draft batch, so not
every round. Prints one markdown table. Environment: none.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from spec_route_suite.config import suite_config_from_options
from spec_route_suite.equivalence.lean import pick_lean
from spec_route_suite.session_graph import SessionGraph
from spec_route_suite.stressors.speed.collapse import COLLAPSE_DROP
from spec_route_suite.stressors.speed.counters import ROUNDS, measure
from spec_route_suite.stressors.speed.gate import SPEED_PROMPTS, SPEED_TOKENS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", required=True)
    parser.add_argument("--candidates", required=True, help="comma-separated candidate names")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--level", type=int, default=8)
    args = parser.parse_args()
    suite = suite_config_from_options({"routes": args.routes}, invocation_dir=Path.cwd())
    names = args.candidates.split(",")
    graph = SessionGraph(suite, specs=[c for c in suite.routes.candidates if c.name in names])
    print(f"| candidate | one at a time (lowest) | at {args.level} in flight, per round | rounds collapsed | "
          f"power at {ROUNDS} rounds |\n|---|---|---|---|---|")
    try:
        for name in names:
            handle = graph.session.handle(name)
            fitted = graph.fitted_prompts(graph.context_fit(handle))
            prompts = [fitted.ids(r, max_tokens=SPEED_TOKENS) for r in pick_lean(graph.run_prompts(), SPEED_PROMPTS)]
            rounds = measure(handle, prompts, [1, args.level], rounds=args.rounds)
            alone = min(r.length for r in rounds if r.level == 1 and r.length)
            loaded = [r.length for r in rounds if r.level == args.level and r.length]
            hit = sum(x <= (1 - COLLAPSE_DROP) * alone for x in loaded) / len(loaded)
            print(f"| `{name}` | {alone:.2f} | {' '.join(f'{x:.2f}' for x in loaded)} | "
                  f"{round(hit * len(loaded))} of {len(loaded)} | {1 - (1 - hit) ** ROUNDS:.2f} |", flush=True)
    finally:
        graph.close()


if __name__ == "__main__":
    main()
