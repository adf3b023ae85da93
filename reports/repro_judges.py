"""How each repro script judges what it resent: one judge per kind of finding, each with its control.

Written into every repro script after reports/repro_runtime.py, cut to the script's judge and what it uses
(reports/judge_source.py; the line marked SUITE_ONLY is left out: the script has those names already), so
like it: python3 and httpx only. A judge takes the case
(DATA["cases"][n]), the candidate's and the baseline's Server and how many attempts an intermittent failure
gets, and returns outcome(reproduced, the baseline shows it, lines to print).
Environment: none.
"""
import asyncio
import json
import math

from spec_route_suite.reports.repro_runtime import Unanswered, differing, fields_outcome, outcome, show, view  # SUITE_ONLY

IN_FLIGHT = 16          # concurrent sampling requests of the distribution judge
BATCH = 32              # choices per baseline request when its server answers n
MIN_CELL = 10           # pooled samples a prefix needs to be its own cell of the chi-square table


async def replay_history(case, server, side):
    """The requests a route got before the failing one (state a server carries from request to request: a
    parser, a cache), sent again in order; their answers are not judged, a failed one is skipped."""
    for request in case.get("history") or []:
        try:
            await server.send(request[side])
        except Unanswered:
            pass


async def judge_parity(case, cand, base, attempts):
    """The candidate's answer differs from the baseline's on some field; control: the baseline answers the same
    request alike twice (a field it does not hold stable itself proves nothing about the candidate). A case with
    a history sends it to each route before that route's first answer of the request."""
    fields, lines, found, unstable = case.get("fields") or ["ids", "finish"], [], set(), set()
    for attempt in range(attempts):
        for n, request in enumerate(case["requests"]):
            await replay_history(case, base, "baseline")
            b1 = await base.send(request["baseline"])
            await replay_history(case, cand, "candidate")
            c = await cand.send(request["candidate"])
            b2 = await base.send(request["baseline"])
            diff, own = differing(c, b1, fields), differing(b1, b2, fields)
            unstable.update(own)
            if diff and not found:
                lines += [f"request {n}: candidate and baseline differ in {', '.join(diff)}",
                          f"  baseline:  {show(b1)}", f"  candidate: {show(c)}"]
            found.update(diff)
        if found - unstable:
            break
    return fields_outcome(found, unstable, lines, "the baseline's own answers to the same request differ in {}")


async def judge_stream(case, cand, base, attempts):
    """A streamed answer that is not the plain answer; control: the baseline's two deliveries of the request."""
    fields = case.get("fields") or ["ids", "text", "finish"]
    found, shown, lines = set(), set(), []
    for attempt in range(attempts):
        c_plain, c_stream = await cand.send(case["plain"]["candidate"]), await cand.send(case["stream"]["candidate"])
        b_plain, b_stream = await base.send(case["plain"]["baseline"]), await base.send(case["stream"]["baseline"])
        diff, own = differing(c_plain, c_stream, fields), differing(b_plain, b_stream, fields)
        if diff and not found:
            lines += [f"candidate: plain and streamed answers differ in {', '.join(diff)}",
                      f"  plain:    {show(c_plain)}", f"  streamed: {show(c_stream)}"]
        found.update(diff)
        shown.update(own)
        if found - shown:
            break
    return fields_outcome(found, shown, lines, "baseline: its plain and streamed answers differ in {} too")


async def judge_repeat(case, cand, base, attempts):
    """The same seeded request answered differently; control: the baseline repeats its own answer."""
    times = max(2, case.get("times", 2))
    fields = case.get("fields") or ["ids", "finish"]
    lines = []

    async def varies(server, side):
        first = await server.send(case["request"][side])
        for _ in range(times - 1):
            other = await server.send(case["request"][side])
            diff = differing(first, other, fields)
            if diff:
                return diff, [f"{server.name}: the same request answered twice differs in {', '.join(diff)}",
                              f"  first:  {show(first)}", f"  second: {show(other)}"]
        return [], []
    for attempt in range(attempts):
        found, text = await varies(cand, "candidate")
        if found:
            lines += text
            break
    shown, text = await varies(base, "baseline")
    return outcome(found and not shown, shown, lines + text)


def _lp_gap(a, b, limit):
    """Largest |logprob difference| over the positions where both answers emitted the same tokens."""
    la, lb, ia, ib = a.get("logprobs") or [], b.get("logprobs") or [], a.get("ids") or [], b.get("ids") or []
    worst, at = 0.0, None
    for i in range(min(len(la), len(lb), limit)):
        if ia[:i + 1] != ib[:i + 1] or la[i] is None or lb[i] is None:
            break
        if abs(la[i] - lb[i]) > worst:
            worst, at = abs(la[i] - lb[i]), i
    return worst, at


def _lacks_logprobs(a):
    """No logprobs, or fewer entries than the answer's tokens: its ids, else its usage.completion_tokens less one
    (a server may bill a final EOS or stop token that it gives no entry: llama.cpp's /v1 streams)."""
    count = len(a["ids"]) if a.get("ids") is not None else (a["usage"] - 1 if isinstance(a.get("usage"), int) else None)
    return not a.get("logprobs") or (count is not None and len(a["logprobs"]) < count)


async def judge_logprobs(case, cand, base, attempts):
    """mode "target": the candidate's logprobs of the tokens both routes emit are not the baseline's (beyond
    `tolerance`); control: the baseline's two answers agree. mode "zero": every sampled logprob is 0.0; mode
    "missing": no logprobs, or not for every token, although the request asks for them."""
    if case.get("mode") in ("zero", "missing"):
        c = await cand.send(case["request"]["candidate"])
        b = await base.send(case["request"]["baseline"])
        zero = lambda a: bool(a.get("logprobs")) and all(x == 0.0 for x in a["logprobs"])  # noqa: E731
        broken = zero if case["mode"] == "zero" else _lacks_logprobs
        return outcome(broken(c), broken(b), [f"candidate logprobs: {(c.get('logprobs') or [])[:12]}",
                                              f"baseline logprobs:  {(b.get('logprobs') or [])[:12]}"])
    tol, limit = float(case.get("tolerance", 0.05)), int(case.get("positions", 10 ** 6))
    b1 = await base.send(case["request"]["baseline"])
    b2 = await base.send(case["request"]["baseline"])
    c = await cand.send(case["request"]["candidate"])
    gap, at = _lp_gap(c, b1, limit)
    own, _ = _lp_gap(b1, b2, limit)
    lines = [f"largest logprob difference candidate vs baseline: {gap:.4g} at token {at} (tolerance {tol:g})",
             f"baseline vs itself: {own:.4g}"]
    if at is not None:
        lines += [f"  baseline logprobs:  {[round(x, 4) for x in (b1['logprobs'] or [])[:at + 1][-8:]]}",
                  f"  candidate logprobs: {[round(x, 4) for x in (c['logprobs'] or [])[:at + 1][-8:]]}"]
    return outcome(gap > tol, own > tol, lines)


async def _choices(server, request, n):
    """n sampled answers: one request with n choices, or n separate requests where the route has no `n`."""
    if request["body"].get("n", 1) > 1:
        return (await server.send(request))["choices"]
    return [a["ids"] if a["ids"] is not None else a["text"]
            for a in await asyncio.gather(*(server.send(request) for _ in range(n)))]


async def judge_choices(case, cand, base, attempts):
    """mode "copies": n sampled choices that are all the same answer; control: the baseline's n samples of the
    request. mode "greedy": greedy choices that are not the baseline's answer; control: the baseline, twice."""
    n = int(case.get("n", 4))
    if case.get("mode") == "greedy":
        ours = (await cand.send(case["request"]["candidate"]))["choices"]
        b1 = await base.send(case["request"]["baseline"])
        b2 = await base.send(case["request"]["baseline"])
        wrong = [i for i, choice in enumerate(ours) if choice != view(b1, "ids")]
        return outcome(wrong, view(b1, "ids") != view(b2, "ids"),
                       [f"candidate: choices {wrong} of {len(ours)} differ from the baseline's answer",
                        f"  baseline: {show(b1)}"] + [f"  choice {i}: {ours[i]!r:.200}" for i in wrong[:3]])
    ours = await _choices(cand, case["request"]["candidate"], n)
    theirs = await _choices(base, case["request"]["baseline"], n)
    same = lambda xs: len(xs) >= 2 and all(x == xs[0] for x in xs)  # noqa: E731
    return outcome(same(ours), same(theirs), [f"candidate: {len(ours)} choices, {len(set(map(str, ours)))} distinct",
                                              f"baseline:  {len(theirs)} samples, {len(set(map(str, theirs)))} distinct"])


def json_problem(a, schema):
    """A stopped answer that is not one JSON object (matching the schema's required keys); None when fine."""
    if a.get("finish") != "stop":
        return None
    try:
        value = json.loads(a["text"])
    except ValueError as exc:
        return f"not JSON ({exc}): {a['text'][:120]!r}"
    if not isinstance(value, dict):
        return f"not an object: {a['text'][:120]!r}"
    missing = [k for k in (schema or {}).get("required", ()) if k not in value]
    extra = [k for k in value if schema and schema.get("additionalProperties") is False
             and k not in schema.get("properties", {})]
    return f"keys missing {missing} / unexpected {extra}: {a['text'][:120]!r}" if missing or extra else None


def usage_problem(a, schema):
    """An n-choice answer whose usage.completion_tokens is not the sum of its choices' tokens; None when fine."""
    total = sum(len(c) for c in a.get("choices") or [] if isinstance(c, list))
    if a.get("usage") is None or all(not isinstance(c, list) for c in a.get("choices") or []):
        return None
    return None if a["usage"] == total else f"usage {a['usage']} for {len(a['choices'])} choices of {total} tokens"


RULES = {"json": json_problem, "n_usage": usage_problem}


async def judge_rule(case, cand, base, attempts):
    """A rule the candidate's answer breaks (json: a stopped answer is one JSON object; n_usage: usage is the sum
    over the choices); control: the baseline's answer to the same request (a refusal gives no control)."""
    lines, found, shown, rule = [], False, False, RULES[case.get("rule", "json")]
    for n, request in enumerate(case["requests"]):
        problem = rule(await cand.send(request["candidate"]), case.get("schema"))
        try:
            theirs = rule(await base.send(request["baseline"]), case.get("schema"))
        except Unanswered as exc:
            theirs, lines = None, lines + [f"request {n}: no control, the baseline refuses it: {exc}"[:300]]
        if problem:
            lines.append(f"request {n}: candidate answer {problem}")
        if theirs:
            lines.append(f"request {n}: baseline answer {theirs}")
        found, shown = found or bool(problem and not theirs), shown or bool(problem and theirs)
    return outcome(found, shown and not found, lines)


def chi2_sf(x, df):
    """P(X >= x) for a chi-square with df degrees of freedom (regularised upper incomplete gamma)."""
    if x <= 0 or df <= 0:
        return 1.0
    a, x = df / 2.0, x / 2.0
    scale = math.exp(-x + a * math.log(x) - math.lgamma(a))
    if x < a + 1:
        term = total = 1.0 / a
        for n in range(1, 10000):
            term *= x / (a + n)
            total += term
            if abs(term) < abs(total) * 1e-14:
                break
        return max(0.0, 1.0 - total * scale)
    b, c, d = x + 1 - a, 1e300, 1.0 / (x + 1 - a)
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = b + an / c
        c = c if abs(c) > 1e-300 else 1e-300
        h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return min(1.0, scale * h)


def two_sample_p(first, second):
    """Chi-square p-value that two lists of sampled sequences come from one distribution. Cells are prefixes:
    each sample goes to its longest prefix seen at least MIN_CELL times in both lists together (a binning that
    does not look at which list a sample came from); cells too small for the test are pooled."""
    pooled = {}
    for seq in first + second:
        for depth in range(len(seq) + 1):
            pooled[seq[:depth]] = pooled.get(seq[:depth], 0) + 1
    cell = lambda s: next(s[:d] for d in range(len(s), -1, -1) if pooled.get(s[:d], 0) >= MIN_CELL)  # noqa: E731
    table = {}
    for column, samples in enumerate((first, second)):
        for seq in samples:
            table.setdefault(cell(seq), [0, 0])[column] += 1
    rows = sorted(table.values(), key=sum)
    while len(rows) > 2 and sum(rows[0]) < 2 * MIN_CELL:
        small = rows.pop(0)
        rows[0] = [rows[0][0] + small[0], rows[0][1] + small[1]]
        rows.sort(key=sum)
    n1, n2 = len(first), len(second)
    stat = 0.0
    for row in rows:
        total = sum(row)
        for observed, n in zip(row, (n1, n2)):
            expected = total * n / (n1 + n2)
            stat += (observed - expected) ** 2 / expected if expected else 0.0
    return chi2_sf(stat, len(rows) - 1), len(rows)


async def _samples(server, request, n, seed, tokens, n_choices=1):
    """n samples of `tokens` tokens each, IN_FLIGHT requests at a time, seeded seed+i when the request carries a
    seed; with n_choices > 1 half of them come from requests for that many choices, as the suite drew them."""
    gate = asyncio.Semaphore(IN_FLIGHT)
    per = max(1, int(n_choices))
    pooled = per * (n // (2 * per)) if per > 1 else 0

    async def one(i, choices):
        changes = {"seed": seed + i} if "seed" in request["body"] else {}
        if choices > 1 or "n" in request["body"]:
            changes["n"] = choices
        async with gate:
            got = await server.send(request, **changes)
        return [tuple(x[:tokens]) for x in got["choices"][:choices]]
    parts = await asyncio.gather(*(one(i, per) for i in range(pooled // per)),
                                 *(one(10 ** 5 + i, 1) for i in range(n - pooled)))
    return [sample for part in parts for sample in part]


async def _batched(server, request, n, seed, tokens):
    """n samples in requests for BATCH choices each (the baseline: a trusted reference, so its choices are
    independent draws, and n choices cost it one batch); single requests when the server refuses n."""
    if request["body"].get("n", 1) > 1 or n <= BATCH:
        return await _samples(server, request, n, seed, tokens)
    seeded = "seed" in request["body"]

    async def one(i, count):
        got = await server.send(request, n=count, **({"seed": seed + i} if seeded else {}))
        return [tuple(x[:tokens]) for x in got["choices"][:count]]
    try:
        first = await one(0, BATCH)
    except Unanswered:
        return await _samples(server, request, n, seed, tokens)
    gate = asyncio.Semaphore(4)

    async def gated(i, count):
        async with gate:
            return await one(i, count)
    rest = await asyncio.gather(*(gated(i, min(BATCH, n - i * BATCH)) for i in range(1, -(-n // BATCH))))
    return first + [sample for part in rest for sample in part]


async def judge_distribution(case, cand, base, attempts):
    """The candidate's samples vs the baseline's (chi-square on sequence prefixes, level alpha); control: the
    baseline's samples split in two halves, against each other at the same level."""
    n, tokens, alpha = int(case["samples"]), int(case["tokens"]), float(case.get("alpha", 0.001))
    request = case["request"]
    ours = await _samples(cand, request["candidate"], n, 1_000_000, tokens, case.get("n_choices", 1))
    theirs = await _batched(base, request["baseline"], n, 2_000_000, tokens)
    p, cells = two_sample_p(ours, theirs)
    p_aa, cells_aa = two_sample_p(theirs[::2], theirs[1::2])
    lines = [f"candidate vs baseline: chi-square p = {p:.3g} over {cells} cells ({n} samples each, {tokens} tokens)",
             f"baseline, one half vs the other: chi-square p = {p_aa:.3g} over {cells_aa} cells (level {alpha:g})"]
    k = int(case.get("n_choices") or 1)
    if k > 1:   # choices of one n request that share a random stream are copies: same marginal, no chi-square shift
        pooled = k * (n // (2 * k))                # the first samples came from n=k requests (_samples)
        copies, pairs = _copied_pairs(ours[:pooled], k)
        theirs_copies, _ = _copied_pairs(theirs[:pooled], k)
        lines.append(f"identical choices within the candidate's n={k} requests: {copies} of {pairs} pairs "
                     f"(the baseline's samples grouped alike: {theirs_copies})")
        copied = copies > max(2 * theirs_copies, pairs // 2)
        return outcome(p < alpha or copied, p_aa < alpha, lines)
    return outcome(p < alpha, p_aa < alpha, lines)


def _copied_pairs(samples, k):
    """Pairs of equal samples within consecutive groups of k (one n=k request each), and pairs looked at."""
    copies = pairs = 0
    for start in range(0, len(samples) - k + 1, k):
        group = samples[start:start + k]
        pairs += k * (k - 1) // 2
        copies += sum(group[i] == group[j] for i in range(k) for j in range(i + 1, k))
    return copies, pairs


async def _replay(server, steps, side, concurrency):
    """One pass of the schedule (arrival gaps, hang-ups): {step: answer or the error text}."""
    gate = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()
    start, results = loop.time(), {}

    async def one(n, step):
        async with gate:
            try:
                if step.get("abort_ms") is not None:
                    await asyncio.wait_for(server.send(step["request"][side]), step["abort_ms"] / 1000)
                    return
                results[n] = await server.send(step["request"][side])
            except asyncio.TimeoutError:
                return
            except Unanswered as exc:
                results[n] = {"error": str(exc)[:300]}
    tasks, at = [], 0.0
    for n, step in enumerate(steps):
        at += step.get("gap_ms", 0) / 1000
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(n, step)))
    await asyncio.gather(*tasks)
    return results


async def _load_changes(server, steps, side, concurrency, attempts):
    """Each kept request alone first, then the schedule up to `attempts` times: (attempts used, first change)."""
    alone = {n: await server.send(step["request"][side]) for n, step in enumerate(steps)
             if step.get("abort_ms") is None}
    for attempt in range(1, attempts + 1):
        for n, got in sorted((await _replay(server, steps, side, concurrency)).items()):
            if "error" in got or view(got, "ids") != view(alone[n], "ids"):
                return attempt, [f"{server.name}, pass {attempt}: request {n} under load differs from its answer alone",
                                 f"  alone:      {show(alone[n])}",
                                 f"  under load: {got['error'] if 'error' in got else show(got)}"]
    return attempts, []


async def judge_load(case, cand, base, attempts):
    """Requests that answer differently in company than alone (the shrunk schedule, replayed up to `attempts`
    times); control: the same schedule on the baseline, as many passes as the candidate needed (one pass when
    the candidate did not change: there is nothing to excuse)."""
    steps, concurrency = case["steps"], int(case.get("concurrency", 1))
    used, ours = await _load_changes(cand, steps, "candidate", concurrency, attempts)
    _, theirs = await _load_changes(base, steps, "baseline", concurrency, used if ours else 1)
    lines = ours + theirs + [f"{len(steps)} requests at concurrency {concurrency}; candidate "
                             + (f"changed on pass {used}" if ours else f"unchanged in {used} passes")]
    return outcome(ours, theirs, lines)


async def judge_error(case, cand, base, attempts):
    """The request fails on the candidate (HTTP error, broken stream, no connection); control: the baseline."""
    async def fails(server, side):
        try:
            got = await server.send(case["request"][side])
        except Unanswered as exc:
            return str(exc), f"{server.name} failed: {exc}"[:400]
        broken = malformed(got)
        return broken, f"{server.name} answered" + (f", but {broken}" if broken else f": {show(got)}")
    ours, line_c = await fails(cand, "candidate")
    theirs, line_b = await fails(base, "baseline")
    return outcome(ours, theirs, [line_c, line_b])


def malformed(a):
    """What makes an HTTP 200 answer unusable (no finish_reason, no text, token ids that are not ids); None."""
    if not isinstance(a.get("text"), str):
        return "the answer has no text"
    if a.get("finish") is None:
        return "the answer has no finish_reason"
    if a.get("ids") is not None and not all(isinstance(t, int) and t >= 0 for t in a["ids"]):
        return "the answer's token ids are not token ids"
    return None


async def judge_spec_path(case, cand, base, attempts):
    """The requests of one family (logprobs, penalties, ...) draft nothing while plain requests draft, on the
    candidate; control: the baseline shows the same pattern (an AR baseline drafts for neither)."""
    async def pattern(server, side):
        plain = [(await server.send(r[side])).get("drafted") for r in case["plain"]]
        family = [(await server.send(r[side])).get("drafted") for r in case["family"]]
        silent = any(d for d in plain if d) and all(d == 0 for d in family)
        return silent, f"{server.name}: drafted per plain answer {plain}, per {case['family_name']} answer {family}"
    ours, line_c = await pattern(cand, "candidate")
    theirs, line_b = await pattern(base, "baseline")
    return outcome(ours, theirs, [line_c, line_b])


async def judge_draft_history(case, cand, base, attempts):
    """A greedy prompt answered alike before and after other requests, drafted differently (the server's
    per-answer drafted and accepted tokens); control: the baseline drafts its pairs alike (an AR one drafts none)."""
    async def differing(server, side):
        got = [await server.send(request[side]) for request in case["order"]]
        lines = [f"{server.name}: request {i} {got[i]['accepted']} of {got[i]['drafted']} drafted tokens accepted, "
                 f"the same prompt again as request {j} (after other requests) {got[j]['accepted']} of "
                 f"{got[j]['drafted']}" for i, j in case["pairs"] if view(got[i], "ids") == view(got[j], "ids")
                 and (got[i]["drafted"], got[i]["accepted"]) != (got[j]["drafted"], got[j]["accepted"])]
        return lines
    ours = await differing(cand, "candidate")
    theirs = await differing(base, "baseline")
    return outcome(ours, theirs, ours + theirs or ["every prompt drafted alike before and after other requests"])


async def judge_turn_reuse(case, cand, base, attempts):
    """Turn 2 of a conversation computes more prompt tokens (its prompt less those the server took from its cache)
    than the baseline's turn 2 does, beyond the tolerance; the baseline is the comparison itself, so it shows
    nothing. A server that states no cached tokens cannot show it (not reproduced, and said so)."""
    async def computed(server, conversation, side):
        await server.send(conversation["turn1"][side])
        got = await server.send(conversation["turn2"][side])
        prompt = got["prompt"] if got["prompt"] is not None else len(conversation["turn2"][side]["body"]["prompt"])
        return None if got["cached"] is None else prompt - got["cached"], got
    lines, found = [], False
    for n, conversation in enumerate(case["conversations"]):
        ours, c = await computed(cand, conversation, "candidate")
        theirs, b = await computed(base, conversation, "baseline")
        if ours is None or theirs is None:
            lines.append(f"conversation {n}: a server states no cached prompt tokens (candidate {c['cached']}, "
                         f"baseline {b['cached']}): nothing to compare")
            continue
        over = ours - theirs > case["tolerance"]
        found = found or over
        lines.append(f"conversation {n}: turn 2 computed {ours} prompt tokens on the candidate, {theirs} on the "
                     f"baseline" + (f": more than {case['tolerance']} beyond it" if over else ""))
    return outcome(found, False, lines)


JUDGES = {"parity": judge_parity, "stream": judge_stream, "repeat": judge_repeat, "logprobs": judge_logprobs,
          "choices": judge_choices, "rule": judge_rule, "distribution": judge_distribution, "load": judge_load,
          "error": judge_error, "spec_path": judge_spec_path, "draft_history": judge_draft_history,
          "turn_reuse": judge_turn_reuse}
