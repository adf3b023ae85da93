"""Where the reference engine's sampling batch spends its time, by prompt length (issue #26).

    python -m benchmarks.sample_batch [--rows 1680] [--lengths 40,110,425]

The default run's slowest tests are `reference-batched`'s distribution settings, and nearly all of
their time is the engine sampling one look's rows (`ReferenceRoute.sample_many`: 20 prompts x up to
252 samples of 10 tokens in private batches of 512 rows). The rows of one prompt read one copy of its KV
(shared_prefix.py; before that each row got its own copy, 58% of a 425-token prompt's time), so a row's cost
still grows with its prompt through attention: the fixture's `long` prompts (400-446 tokens) against a `math`
prompt (33-47). This prints, per prompt length, the seconds for the same rows and the share of three costs
(cProfile, one torch thread, as a suite worker runs): copying prompt KV into rows, attention, and the
linear layers. `--copied` measures the rows with their own copies (the engine before the shared prefix).
Environment: none.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from dataclasses import replace
from pathlib import Path

ROUTE = "reference:?prefill_chunk=64&kv_capacity=4096"   # the default run's reference-batched candidate
PROMPTS = 20
TOKENS = 10                                               # a fast route's sample: two verify blocks of k=4
# cost -> the function whose cumulative time it is (pstats names a torch builtin "<built-in method torch...NAME>")
COSTS = {"prompt KV copied into rows": ("_take_rows",),
         "attention": ("scaled_dot_product_attention>", "shared_prefix_attention"), "linear": ("_nn.linear>",)}


def prompt_of(tokenizer, length: int, variant: int) -> tuple[int, ...]:
    """A prompt of exactly `length` tokens (BOS first), different per variant so prefills are not shared."""
    words = tokenizer.encode(f" item {variant} and then the next one", add_special_tokens=False)
    ids = [tokenizer.bos_token_id] + (words * (length // max(1, len(words)) + 1))[:length - 1]
    return tuple(ids)


def measure(route, length: int, rows: int, *, copied: bool = False) -> tuple[float, dict[str, float]]:
    """Seconds to sample `rows` rows over PROMPTS prompts of `length` tokens, and each cost's seconds."""
    from spec_route_suite.routes.base import Request
    from spec_route_suite.reference.route import SAMPLE_N_BATCH, _length_groups
    per_prompt = rows // PROMPTS
    requests = [Request(prompt_ids=prompt_of(route.tokenizer, length, p), max_tokens=TOKENS, temperature=1.0,
                        seed=p * 100_000 + i, request_id=f"bench-{p}-{i}")
                for p in range(PROMPTS) for i in range(per_prompt)]
    engine = route.engine.fork(max_batch=SAMPLE_N_BATCH)
    if copied:
        engine.config = replace(engine.config, shared_prefix=False)
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    for chunk in _length_groups(requests, SAMPLE_N_BATCH):
        engine.run([requests[i] for i in chunk])
    profile.disable()
    seconds = time.perf_counter() - start
    stats = pstats.Stats(profile).stats
    # a cost named twice (attention: ours, falling back to SDPA inside it) is its outermost function's time
    costs = {label: max(sum(s[3] for (_, _, name), s in stats.items() if name.endswith(fn)) for fn in fns)
             for label, fns in COSTS.items()}
    return seconds, costs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1680, help="sampled rows per prompt length (default 1680)")
    parser.add_argument("--lengths", default="40,110,425", help="prompt lengths in tokens (fixture medians: "
                        "math 41, chat 107, long 425)")
    parser.add_argument("--copied", action="store_true", help="each row gets its own copy of its prompt's KV")
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from spec_route_suite.routes.registry import build_route
    from spec_route_suite.routes.spec import parse_route_uri
    route = build_route(parse_route_uri("reference-batched", ROUTE, base=Path.cwd()))
    measure(route, 16, PROMPTS * 4, copied=args.copied)   # warm-up: first calls allocate
    print(f"{args.rows} rows of {TOKENS} tokens over {PROMPTS} prompts, `{ROUTE}`, 1 torch thread, "
          + ("each row its own copy of the prompt KV" if args.copied else "one shared copy of each prompt's KV"))
    print("| prompt tokens | seconds | ms per row | " + " | ".join(COSTS) + " |")
    print("|---|---|---|" + "---|" * len(COSTS))
    for length in (int(x) for x in args.lengths.split(",")):
        seconds, costs = measure(route, length, args.rows, copied=args.copied)
        shares = " | ".join(f"{costs[label]:.1f} s ({costs[label] / seconds:.0%})" for label in COSTS)
        print(f"| {length} | {seconds:.1f} | {1000 * seconds / args.rows:.1f} | {shares} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
