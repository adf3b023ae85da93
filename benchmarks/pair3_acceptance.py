"""Served acceptance of pair 3's drafters: each engine's own counters on the pair's held-out prompts.

    python -m benchmarks.pair3_acceptance --routes routes/llama-cpp-dflash.toml [--prompts 40] [--levels 1,8]

The servers of the routes file must be running (`python -m spec_route_suite.servers.llama_cpp --routes FILE start`,
or `servers.vllm_cpu`). Every candidate answers the pair's held-out prompts (train_pair3.heldout_prompts: chat,
tool-call, tool-answer, tool-free, math, code, json and long chats, raw ChatML on the completions endpoint),
greedy, 64 new tokens (prompts too long for a 512-token context are left out), one at a time and then `level` at a time; the acceptance is the difference of the server's
own counters (its /metrics: llama.cpp's `llamacpp:spec_decode_*`, vLLM's `vllm:spec_decode_*`) over each
pass, so a pass reads only its own traffic. Every answer is compared with the baseline's (AR) answer to the same
prompt: a drafter that changed an answer shows in the `same as AR` column. Prints one table (markdown).
Why a script and not a test: acceptance is a measured property of a drafter and an engine, reported, not
asserted (the suite's own run reports it too, over all its traffic). Environment: none.
"""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from spec_route_suite.training.train_pair3 import EVAL_NEW_TOKENS, heldout_prompts
from spec_route_suite.routes.base import Request
from spec_route_suite.routes.registry import build_route
from spec_route_suite.routes.spec import load_routes_file
from spec_route_suite.servers import server_acceptance_delta, snapshot_acceptance
from spec_route_suite.tokenizers import load_tokenizer


async def answers(route, requests, level: int) -> list[tuple[int, ...]]:
    """Each request's answer ids, `level` requests in flight at a time."""
    gate = asyncio.Semaphore(level)

    async def one(req):
        async with gate:
            return tuple((await route.generate(req)).token_ids)
    return list(await asyncio.gather(*(one(r) for r in requests)))


async def measured(route, spec, requests, level: int):
    """(answers, the acceptance profile of the pass: the server's /metrics counters before and after it, the
    suite's own snapshot_acceptance / server_acceptance_delta; None without counters)."""
    before = snapshot_acceptance([spec])
    got = await answers(route, requests, level)
    return got, server_acceptance_delta(before, snapshot_acceptance([spec])).get(spec.name)


def row(engine: str, name: str, level: int, profile, got, reference) -> str:
    """One table row; `emitted` is (answer tokens - answers) / drafts: each step emits its accepted drafts plus one
    token, each answer's first token comes from its prefill (vLLM's counters also count drafts past an answer's
    end, docs/vllm-cpu-findings.md F6, so its counter figure can exceed what was emitted)."""
    same = f"{sum(a == b for a, b in zip(got, reference))} of {len(reference)}"
    drafts = (profile or {}).get("drafts")
    if not drafts:
        return f"| {engine} | {name} | {level} | no counters / no drafts | | | {same} |"
    by_pos = " ".join(f"{a / drafts:.2f}" for a in profile["accepted_per_pos"]) or "n/a"
    emitted = (sum(map(len, got)) - len(got)) / drafts
    return (f"| {engine} | {name} | {level} | {profile['mean_acceptance_length']:.2f} | {emitted:.2f} | {by_pos} "
            f"| {same} |")


def fitting_requests(tok, n: int, new_tokens: int, context: int) -> list[Request]:
    """The first `n` held-out prompts whose tokens plus `new_tokens` fit `context` (a longer one is never sent)."""
    out = []
    for i, (shape, text) in enumerate(heldout_prompts(4 * n)):
        ids = tuple(tok(text, add_special_tokens=False)["input_ids"])
        if len(ids) + new_tokens <= context:
            out.append(Request(prompt_ids=ids, max_tokens=new_tokens, request_id=f"p3acc-{i}-{shape}"))
        if len(out) == n:
            break
    return out


async def main_async(args) -> None:
    path = Path(args.routes).resolve()
    routes = load_routes_file(str(path), base=path.parent)
    baseline = build_route(routes.baseline)
    tok = load_tokenizer(routes.baseline.tokenizer)
    requests = fitting_requests(tok, args.prompts, args.new_tokens, args.context)
    reference = await answers(baseline, requests, 1)
    engine = path.stem
    print(f"{len(requests)} held-out prompts, {args.new_tokens} new tokens, greedy; AR answers "
          f"{sum(map(len, reference))} tokens\n")
    print("| routes | candidate | in flight | mean acceptance length | counting emitted tokens | accepted at position 1..k "
          "| same as AR |")
    print("|---|---|---|---|---|---|---|")
    for spec in routes.candidates:
        route = build_route(spec)
        for level in args.levels:
            got, profile = await measured(route, spec, requests, level)
            print(row(engine, spec.name, level, profile, got, reference), flush=True)
        await route.aclose()
    await baseline.aclose()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--routes", required=True, help="a routes file whose servers are running")
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=EVAL_NEW_TOKENS)
    ap.add_argument("--context", type=int, default=512, help="tokens per request the servers hold (prompt + answer)")
    ap.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8])
    asyncio.run(main_async(ap.parse_args(argv)))


if __name__ == "__main__":
    main()
