"""Requests to detection: how fast the mixing stressor catches the reference engine's planted mixing faults.

    python benchmarks/mixing_detection.py [--runs 30] [--rate 0.01] [--concurrency 8] [--budget 640]
                                          [--fault cross_context_mixing] [--pool 96] [--chunk 96]
                                          [--seed-base 1000] [--json]

Each run builds a fresh reference engine with the fault on (its own fault seed), drives the
mixing stressor's own load (canary pool, mixed arrivals, the same detector with context
probes) in chunks until the first contaminated output, and prints the requests that took.
It then reports P(detect within the budget) with a Clopper-Pearson 95% interval, and checks
every attribution against the engine's ground truth (fault_log). torch uses one thread.
Environment: none.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from scipy.stats import beta  # noqa: E402

from spec_route_suite.tokenizers import load_tokenizer  # noqa: E402
from spec_route_suite.routes.loop import BackgroundLoop  # noqa: E402
from spec_route_suite.reference.route import ReferenceRoute, load_model  # noqa: E402
from spec_route_suite.routes.spec import parse_route_uri  # noqa: E402
from spec_route_suite.session import RouteHandle  # noqa: E402
from spec_route_suite.stressors.canary import build_workload, mean_latency, renderer, serial_references  # noqa: E402
from spec_route_suite.stressors.conftest import STRESS_MAX_TOKENS  # noqa: E402
from spec_route_suite.stressors.driver import BATCHED_DEFAULT, drive_handle, mixed_load, round_robin  # noqa: E402
from spec_route_suite.stressors.mixing.detect import detect, probe_contexts  # noqa: E402


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


class Bench:
    """Models, tokenizer, workload and serial references loaded once; a fresh engine per run."""

    def __init__(self, *, pool: int, seed: int = 0):
        torch.set_num_threads(1)
        self.loop = BackgroundLoop()
        spec = parse_route_uri("candidate", "reference:", base=ROOT)
        self.models = (load_model(spec.model), load_model(spec.draft))
        self.tokenizer = load_tokenizer(spec.tokenizer)
        correct = self.handle("")
        self.workload = build_workload(self.tokenizer, size=pool, seed=seed)
        self.refs = serial_references(correct.generate, self.workload, max_tokens=STRESS_MAX_TOKENS)
        self.latency = mean_latency(self.refs)
        correct.close()

    def handle(self, query: str) -> RouteHandle:
        spec = parse_route_uri("candidate", "reference:" + (f"?{query}" if query else ""), base=ROOT)
        return RouteHandle(ReferenceRoute(spec, models=self.models), spec, self.loop, timeout_s=120.0)

    def run(self, *, fault: str, rate: float, concurrency: int, budget: int, chunk: int, seed: int) -> dict:
        """One run: chunks of mixed load until the first contaminated output or the budget."""
        handle = self.handle(f"fault={fault}&mix_rate={rate}&seed={seed}")
        rng = random.Random(f"bench-{seed}")
        keys = round_robin(self.workload.keys, budget, rng=rng)
        sent, found, outcomes = 0, None, []
        start = time.monotonic()
        while sent < budget and found is None:
            part = keys[sent:sent + chunk]
            subs = mixed_load([(k, self.workload.get(k).request(max_tokens=STRESS_MAX_TOKENS)) for k in part],
                              level=concurrency, rng=rng, mean_latency_s=self.latency, tag=f"b{seed}-{sent}")
            run = drive_handle(handle, subs, concurrency=concurrency, mean_latency_s=self.latency)
            report = probe_contexts(detect(workload=self.workload, references=self.refs, outcomes=run.outcomes),
                                    workload=self.workload, outcomes=run.outcomes, generate=handle.generate,
                                    render=renderer(self.tokenizer), max_tokens=STRESS_MAX_TOKENS)
            order = {o.request_id: sent + i for i, o in enumerate(run.outcomes)}
            if report.contaminated:
                first = min(report.contaminated, key=lambda a: order[a.victim_request])
                found = (order[first.victim_request] + 1, report)
            outcomes += list(run.outcomes)
            sent += len(part)
        truth = dict(handle.route.fault_log)
        key_of = {o.request_id: o.key for o in outcomes}
        checks = []
        if found is not None:
            for att in found[1].contaminated:
                source = key_of.get(truth.get(att.victim_request, ""), None)
                checks.append({"victim": att.victim_request, "method": att.method, "attributed": att.source_key,
                               "alternatives": list(att.alternatives), "true_source": source,
                               "right": source in (att.source_key, *att.alternatives),
                               "exact": source == att.source_key})
        handle.close()
        return {"seed": seed, "requests_to_detection": found[0] if found else None, "sent": sent,
                "events": len(truth), "seconds": round(time.monotonic() - start, 1), "attributions": checks}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--budget", type=int, default=BATCHED_DEFAULT["mixing_requests"])
    parser.add_argument("--pool", type=int, default=BATCHED_DEFAULT["pool"])
    parser.add_argument("--chunk", type=int, default=96)
    parser.add_argument("--fault", default="cross_context_mixing")
    parser.add_argument("--seed-base", type=int, default=1000, help="run r uses fault seed seed-base + r")
    parser.add_argument("--json", action="store_true", help="print one JSON summary line at the end")
    args = parser.parse_args(argv)
    bench = Bench(pool=args.pool)
    print(f"# {args.fault} at mix_rate {args.rate}, concurrency {args.concurrency}, budget {args.budget} requests, "
          f"pool {args.pool}; serial mean latency {bench.latency * 1000:.0f} ms", flush=True)
    results = []
    for r in range(args.runs):
        res = bench.run(fault=args.fault, rate=args.rate, concurrency=args.concurrency, budget=args.budget,
                        chunk=args.chunk, seed=args.seed_base + r)
        results.append(res)
        wrong = [c for c in res["attributions"] if not c["right"]]
        print(f"run {r + 1:3d}: requests to detection {res['requests_to_detection'] or '-':>4} "
              f"(sent {res['sent']}, fault events {res['events']}, {res['seconds']}s)"
              + (f"; WRONG attribution {wrong}" if wrong else ""), flush=True)
    detected = [r for r in results if r["requests_to_detection"] is not None]
    lo, hi = clopper_pearson(len(detected), len(results))
    needed = sorted(r["requests_to_detection"] for r in detected)
    attributions = [c for r in results for c in r["attributions"]]
    summary = {"fault": args.fault, "rate": args.rate, "concurrency": args.concurrency, "budget": args.budget,
               "runs": len(results), "detected": len(detected), "p_detect": len(detected) / max(len(results), 1),
               "ci95": [round(lo, 3), round(hi, 3)],
               "median_requests_to_detection": needed[len(needed) // 2] if needed else None,
               "attributions": len(attributions), "right": sum(c["right"] for c in attributions),
               "exact": sum(c["exact"] for c in attributions)}
    print(f"# detected in {len(detected)} of {len(results)} runs within {args.budget} requests: "
          f"P(detect) = {summary['p_detect']:.3f} (95% CI {lo:.3f}-{hi:.3f}); median requests to detection "
          f"{summary['median_requests_to_detection']}; attributions right {summary['right']} of "
          f"{summary['attributions']} (exact source {summary['exact']})")
    if args.json:
        print(json.dumps(summary))
    bench.loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
