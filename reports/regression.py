"""Acceptance regression tests between nightly runs: what --compare-to judges per candidate besides the findings.

Why: small code changes break acceptance rates and speedup without failing any correctness test (vLLM RFC #28135),
so a nightly run compares each candidate with the previous run's, when both ran it under the same name on the same
pair (models, draft, tokenizers, drafting method and depth, as the inventories state them) and prompts; what
differs is said and skipped, never compared:
- answers: each greedy answer token for token against the previous run's (the greedy check's `greedy_answer`
  records). A change where both runs agree with their baselines is a note (the baseline changed too); where the new
  answer disagrees with its baseline it is the finding it already is, and is only counted here.
- acceptance: greedy drafting is deterministic for a stateless drafter, so each answer's own counters compare prompt
  by prompt: the sign test over the prompts whose acceptance changed and the pooled drop threshold of the speed
  gate's collapse warning (stressors/speed/collapse.py acceptance_shift), over all prompts and per prompt
  class, the run's alpha split by weight (half for all prompts, half shared by the classes). Within each, half of its
  share judges the mean and half is shared by the draft positions: a position whose per-prompt rates fall by the
  sign test and whose pooled rate falls by the drop threshold is a regression too (a drafter whose last positions
  degrade while the mean barely moves). Where answers state no counters (vLLM), the server's own
  counters judge it: the controller's rounds on the idle server (stressors/speed/counters.py: the same greedy
  prompts, ROUNDS rounds one at a time and in company), each level's rounds against the previous run's by an exact
  one-sided rank-sum test (6 rounds against 6: p = 1/924 when every round fell) and the same pooled drop threshold,
  the run's alpha shared by the levels. Without such rounds in both runs the run-wide per-class profiles
  (reports/by_class.py) are set side by side and no test is made.
- speed: the speed gate's throughput at each concurrency level, the baseline's beside it (its own change between
  the runs is the noise the machine made, stated as a fraction), the speedup over the baseline in each run (what the
  candidate's build changed beyond that noise) and both runs' load averages: reported, never judged.
A drop by the test is a warning entry shaped like a finding and a gap of kind REGRESSION_KIND, which keeps the
candidate from ADOPT and names both engine versions.
Environment: none.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import PurePath
from typing import Any, Mapping, Sequence

from scipy.stats import mannwhitneyu

from spec_route_suite.equivalence.greedy import first_divergence
from spec_route_suite.reports.coverage import Gap
from spec_route_suite.stressors.speed.collapse import COLLAPSE_DROP, acceptance_shift, sign_p

REGRESSION_KIND = "acceptance regression"
ALL_PROMPTS = "all prompts"
# what makes two runs' candidate the same route for this comparison (the engine version is what may change)
BASELINE_FIELDS = ("model", "tokenizer_hash")
CANDIDATE_FIELDS = ("model", "draft", "tokenizer_hash")
DRAFTING_FIELDS = ("method", "num_speculative_tokens")


def candidate_comparisons(current: Mapping[str, Any], previous: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per candidate of the current run: the comparison with the previous run's namesake, or why there is none."""
    alpha = float((current.get("config") or {}).get("alpha") or 0.01)
    then_names = set(_candidates(previous))
    out = {}
    for name in _candidates(current):
        if name not in then_names:
            out[name] = {"compared": False, "why": f"no candidate `{name}` in the previous run"}
            continue
        differs = pair_differences(current, previous, name)
        versions = {"previous": _version(previous, name), "current": _version(current, name)}
        if differs:
            out[name] = {"compared": False, "versions": versions,
                         "why": "not the same pair: " + "; ".join(differs)}
            continue
        out[name] = compare_candidate(current, previous, name, alpha=alpha, versions=versions)
        unconfirmed = pair_unstated(current, previous, name)
        if unconfirmed:
            out[name]["pair_unconfirmed"] = unconfirmed
    return out


def _candidates(report: Mapping[str, Any]) -> list[str]:
    return [c.get("name") for c in (report.get("config") or {}).get("candidates", [])]


def _baseline(report: Mapping[str, Any]) -> str | None:
    return ((report.get("config") or {}).get("baseline") or {}).get("name")


def _version(report: Mapping[str, Any], name: str) -> str:
    inventory = (report.get("inventories") or {}).get(name) or {}
    release = f" ({inventory['release']})" if inventory.get("release") else ""
    return f"{inventory.get('engine', 'unknown')} {inventory.get('version', 'unknown')}{release}"


UNSTATED = (None, "unknown")


def same_value(a: Any, b: Any) -> bool:
    """Equal, or one GGUF converted by two engine releases: each release converts into its own cache folder and
    names the file after its source model's content hash (servers/llama_cpp.py gguf_path): the name says which."""
    if a in UNSTATED or b in UNSTATED:   # one run's inventory did not answer: nothing says the pair differs
        return True
    if isinstance(a, str) and isinstance(b, str) and a.endswith(".gguf") and b.endswith(".gguf"):
        return PurePath(a).name == PurePath(b).name
    return a == b


def pair_unstated(current: Mapping[str, Any], previous: Mapping[str, Any], name: str) -> list[str]:
    """The pair's fields one run's inventory did not state (its probe got no answer): compared all the same, since
    nothing says the pair differs, and named, since nothing confirms it is the same."""
    unstated = []
    for role, route, fields in (("baseline", None, BASELINE_FIELDS), ("candidate", name, CANDIDATE_FIELDS)):
        now, then = (((r.get("inventories") or {}).get(route or _baseline(r)) or {}) for r in (current, previous))
        for field in fields:
            runs = [run for run, inventory in (("this run", now), ("the previous run", then))
                    if inventory.get(field) in UNSTATED]
            if runs:
                unstated.append(f"{role} {field} ({'neither run' if len(runs) == 2 else runs[0]})")
    return unstated


def pair_differences(current: Mapping[str, Any], previous: Mapping[str, Any], name: str) -> list[str]:
    """What differs between the two runs' pair for this candidate: its model, draft, tokenizer, drafting method and
    depth, and the baseline's model and tokenizer (as each run's inventories state them)."""
    differs = []
    for role, route, fields in (("baseline", None, BASELINE_FIELDS), ("candidate", name, CANDIDATE_FIELDS)):
        now = (current.get("inventories") or {}).get(route or _baseline(current)) or {}
        then = (previous.get("inventories") or {}).get(route or _baseline(previous)) or {}
        for field in fields:
            if not same_value(now.get(field), then.get(field)):
                differs.append(f"{role} {field} {then.get(field)} -> {now.get(field)}")
        if route:
            for field in DRAFTING_FIELDS:
                a, b = (then.get("speculation") or {}).get(field), (now.get("speculation") or {}).get(field)
                if a != b:
                    differs.append(f"speculation {field} {a} -> {b}")
    return differs


def answers_of(report: Mapping[str, Any], route: str) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(check, prompt id) -> the route's greedy answer record in this run."""
    return {(m.get("check", "greedy"), m.get("prompt_id")): m
            for m in (report.get("measurements") or {}).get("greedy_answer", []) if m.get("route") == route}


def compare_candidate(current: Mapping[str, Any], previous: Mapping[str, Any], name: str, *, alpha: float,
                      versions: Mapping[str, str]) -> dict[str, Any]:
    now, then = answers_of(current, name), answers_of(previous, name)
    same = [k for k in now if k in then and now[k].get("request") == then[k].get("request")]
    prompts = {"compared": len(same), "sent differently": sum(1 for k in now if k in then) - len(same),
               "only in this run": sum(1 for k in now if k not in then),
               "only in the previous run": sum(1 for k in then if k not in now)}
    acceptance = (acceptance_test({k: now[k] for k in same}, {k: then[k] for k in same}, alpha=alpha)
                  or counter_rounds_test(current, previous, name, alpha=alpha)
                  or profile_comparison(current, previous, name, why=(
                      "the answers state no drafting counters (or none drafted)" if same else
                      "no greedy prompt was judged alike in both runs (other prompts, -k, or a run without "
                      "greedy_answer records)")))
    entry = {"compared": True, "versions": dict(versions), "prompts": prompts,
             "answers": answer_changes(now, then, same), "acceptance": acceptance,
             "speed": speed_changes(current, previous, name)}
    entry["regression"] = regression_entry(name, entry, previous_run=previous.get("run_id", "?"))
    return entry


def answer_changes(now, then, keys: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Unchanged answers, changes where both runs agree with their baselines (notes: the baseline changed too), and
    changes that are already findings (the new answer disagrees with its baseline) or fixes (the old one did)."""
    notes, findings, fixed, unchanged = [], 0, 0, 0
    for key in keys:
        a, b = then[key], now[key]
        if a.get("ids") == b.get("ids") and a.get("finish") == b.get("finish"):
            unchanged += 1
        elif "baseline_ids" in b:
            findings += 1
        elif "baseline_ids" in a:
            fixed += 1
        else:
            position = first_divergence(baseline=a.get("ids") or [], candidate=b.get("ids") or [])
            notes.append({"check": key[0], "prompt": key[1], "position": position if position is not None else
                          len(a.get("ids") or [])})
    return {"unchanged": unchanged, "changed, both runs agree with their baselines": notes,
            "changed, already a finding": findings, "changed, fixed since": fixed}


def _class(record: Mapping[str, Any]) -> str:
    return f"{record.get('source', '?')}/{record.get('category', '?')}"


def _drafting(records: Mapping[Any, Mapping[str, Any]]) -> dict[Any, list]:
    """Answers that state their drafting and drafted at least once: key -> [steps, accepted, per position]."""
    return {k: r["drafting"] for k, r in records.items() if r.get("drafting") and r["drafting"][0] > 0}


def acceptance_test(now: Mapping[Any, Mapping[str, Any]], then: Mapping[Any, Mapping[str, Any]], *,
                    alpha: float) -> dict[str, Any] | None:
    """Prompt by prompt, over the prompts whose answers state their drafting in both runs: all prompts, then each
    prompt class (when there are several), each at its share of alpha. None when no prompt states it."""
    a, b = _drafting(then), _drafting(now)
    keys = [k for k in b if k in a]
    if not keys:
        return None
    classes: dict[str, list] = defaultdict(list)
    for key in keys:
        classes[_class(now[key])].append(key)
    groups = {ALL_PROMPTS: keys, **(dict(sorted(classes.items())) if len(classes) > 1 else {})}
    shares = {ALL_PROMPTS: alpha / 2 if len(groups) > 1 else alpha, **{c: alpha / 2 / (len(groups) - 1)
                                                                      for c in groups if c != ALL_PROMPTS}}
    rows = {}
    for group, members in groups.items():
        shift = acceptance_shift({k: a[k][:2] for k in members}, {k: b[k][:2] for k in members})
        positions = position_changes([a[k] for k in members], [b[k] for k in members])
        fell = fallen_positions(positions, alpha=shares[group] / 2)
        rows[group] = {"prompts": shift.prompts, "changed": shift.changed, "lower": shift.lower,
                       "previous": round(shift.before, 4), "current": round(shift.after, 4),
                       "drop": round(shift.drop, 4), "p_value": shift.p_value, "alpha": shares[group],
                       "regressed": shift.dropped(shares[group] / 2) or bool(fell),
                       "positions": {**positions, "regressed": fell}}
    return {"test": f"one-sided sign test over the prompts whose acceptance changed, at alpha {alpha:g} (half for "
                    f"all prompts, half shared by the classes; within each, half for the mean, half shared by the "
                    f"draft positions), and a pooled drop of at least {COLLAPSE_DROP:.0%}",
            "alpha": alpha, "drop_threshold": COLLAPSE_DROP, "groups": rows}


def position_changes(then: Sequence[Sequence], now: Sequence[Sequence]) -> dict[str, list[float]]:
    """Each draft position's pooled acceptance rate in both runs, and the sign test over its per-prompt rates."""
    width = max((len(d[2]) for d in [*then, *now]), default=0)

    def accepted(d, i):
        return d[2][i] if i < len(d[2]) else 0

    def pooled(drafting, i):
        return round(sum(accepted(d, i) for d in drafting) / sum(d[0] for d in drafting), 4)
    return {"previous": [pooled(then, i) for i in range(width)], "current": [pooled(now, i) for i in range(width)],
            "p_value": [sign_p([accepted(d, i) / d[0] for d in now], [accepted(d, i) / d[0] for d in then])
                        for i in range(width)]}


def fallen_positions(positions: Mapping[str, list], *, alpha: float) -> list[int]:
    """The draft positions (from 1) whose per-prompt rates fell by the sign test at their share of `alpha` and whose
    pooled rate fell by at least COLLAPSE_DROP."""
    width = len(positions["p_value"])
    return [i + 1 for i, (before, after, p) in enumerate(zip(positions["previous"], positions["current"],
                                                              positions["p_value"]))
            if before > 0 and p < alpha / width and after <= (1 - COLLAPSE_DROP) * before]


def load_rounds(report: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The route's judged load-acceptance rounds in this run (the controller's, on the idle server), or None."""
    found = [m for m in (report.get("measurements") or {}).get("load_acceptance", [])
             if m.get("route") == name and m.get("judged") and m.get("rounds")]
    return found[-1] if found else None


def counter_rounds_test(current: Mapping[str, Any], previous: Mapping[str, Any], name: str, *,
                        alpha: float) -> dict[str, Any] | None:
    """Each load level's rounds of the server's counters against the previous run's: an exact one-sided rank-sum
    test and the pooled drop threshold, alpha shared by the levels. None without judged rounds over the same prompts
    in both runs."""
    now, then = load_rounds(current, name), load_rounds(previous, name)
    if now is None or then is None or now.get("prompts_digest") != then.get("prompts_digest") \
            or not now.get("prompts_digest"):
        return None

    def by_level(measured):
        levels: dict[int, list] = defaultdict(list)
        for r in measured["rounds"]:
            if r.get("drafts"):
                levels[int(r["level"])].append(r)
        return levels
    a, b = by_level(then), by_level(now)
    levels = sorted(set(a) & set(b))
    if not levels:
        return None
    share = alpha / len(levels)
    rows = {}
    for level in levels:
        before, after = [_round_length(r) for r in a[level]], [_round_length(r) for r in b[level]]
        pooled_before, pooled_after = _pooled_length(a[level]), _pooled_length(b[level])
        p_value = float(mannwhitneyu(after, before, alternative="less", method="exact").pvalue)
        drop = 1 - pooled_after / pooled_before if pooled_before else 0.0
        rows[ALL_PROMPTS if level == 1 else f"{level} in flight"] = {
            "prompts": now.get("prompts", 0), "changed": len(after), "lower": sum(x < min(before) for x in after),
            "unit": "rounds below the previous run's lowest", "previous": round(pooled_before, 4),
            "current": round(pooled_after, 4), "drop": round(drop, 4), "p_value": p_value, "alpha": share,
            "regressed": p_value < share and pooled_after <= (1 - COLLAPSE_DROP) * pooled_before,
            "positions": {"previous": [], "current": [], "p_value": []}}
    return {"test": f"the server's counters (answers state no drafting): each level's rounds on the idle server "
                    f"against the previous run's, an exact one-sided rank-sum test at alpha {alpha:g} shared by the "
                    f"levels, and a pooled drop of at least {COLLAPSE_DROP:.0%}",
            "alpha": alpha, "drop_threshold": COLLAPSE_DROP, "groups": rows}


def _round_length(r: Mapping[str, Any]) -> float:
    return 1 + r["accepted"] / r["drafts"]


def _pooled_length(rounds: Sequence[Mapping[str, Any]]) -> float:
    return 1 + sum(r["accepted"] for r in rounds) / sum(r["drafts"] for r in rounds)


def profile_comparison(current: Mapping[str, Any], previous: Mapping[str, Any], name: str, *,
                       why: str) -> dict[str, Any]:
    """No prompt-by-prompt test (`why`): the run-wide profile and the per-class profiles side by side."""
    def classes(report):
        profile = ((report.get("by_class") or {}).get("acceptance") or {}).get(name) or {}
        return {_class(c): c for c in profile.get("classes", [])}

    def length(report):
        return ((report.get("acceptance") or {}).get(name) or {}).get("mean_acceptance_length")
    now, then = classes(current), classes(previous)
    rows = {ALL_PROMPTS: {"previous": length(previous), "current": length(current)}}
    rows.update({c: {"previous": then[c].get("mean_acceptance_length"), "current": now[c].get("mean_acceptance_length")}
                 for c in sorted(now) if c in then})
    return {"test": "none", "why": f"{why}, so no prompt-by-prompt test could be made; the run-wide profiles are "
                                   f"shown side by side", "groups": rows}


def speed_changes(current: Mapping[str, Any], previous: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """The speed gate per concurrency level in both runs: the candidate's and the baseline's throughput (the
    baseline's own change is the machine's noise) and the load averages around the candidate's level."""
    def rows(report):
        found = [m for m in (report.get("measurements") or {}).get("speed", []) if m.get("candidate") == name]
        measured = (found[-1].get("rows") or {}) if found else {}
        return {side: {r["concurrency"]: r for r in measured.get(side, [])} for side in ("candidate", "baseline")}
    now, then = rows(current), rows(previous)

    def both(side, level, key):
        return [(then[side].get(level) or {}).get(key), (now[side].get(level) or {}).get(key)]

    def ratio(a, b):
        return round(a / b, 4) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None
    out = []
    for c in sorted(set(now["candidate"]) & set(then["candidate"])):
        mine, theirs = both("candidate", c, "throughput_tok_s"), both("baseline", c, "throughput_tok_s")
        noise = ratio(theirs[1], theirs[0])
        out.append({"concurrency": c, "throughput_tok_s": mine, "baseline_throughput_tok_s": theirs,
                    "load_avg_1m": both("candidate", c, "load_avg_1m"),
                    # the baseline's own change between the runs is the machine's noise; the speedup over it (the
                    # candidate's throughput over the baseline's, in each run) is what the candidate's build changed
                    "baseline_change": round(noise - 1, 4) if noise is not None else None,
                    "speedup": [ratio(mine[0], theirs[0]), ratio(mine[1], theirs[1])]})
    return out


def regression_entry(name: str, entry: Mapping[str, Any], *, previous_run: str) -> dict[str, Any] | None:
    """A warning shaped like a finding when the acceptance test found a drop (all prompts or a class), else None."""
    groups = (entry.get("acceptance") or {}).get("groups") or {}
    regressed = [g for g, row in groups.items() if row.get("regressed")]
    if not regressed:
        return None
    first, versions = groups[regressed[0]], entry["versions"]
    test = "rank-sum test" if first.get("unit") else "sign test"
    fell = (first.get("positions") or {}).get("regressed") or []
    where = "".join(f"; draft position {i}: {first['positions']['previous'][i - 1]:.2f} -> "
                    f"{first['positions']['current'][i - 1]:.2f} (sign test p={first['positions']['p_value'][i - 1]:.2g})"
                    for i in fell[:2])
    summary = (f"acceptance length {first['previous']:.2f} -> {first['current']:.2f} (-{first['drop']:.0%}, {test} "
               f"p={first['p_value']:.2g}){where}, {regressed[0]}; {versions_text(versions)}")
    tally = (f"{first['lower']} of the {first['changed']} {first['unit']}" if first.get("unit") else
             f"{first['lower']} of the {first['changed']} prompts whose acceptance changed went down")
    title = f"acceptance regression since run {previous_run}: {summary}; {tally}"
    return {"check": "compare", "severity": "warning", "route": name, "title": title, "summary": summary,
            "details": {"regressed": regressed, "previous_run": previous_run, "versions": dict(versions),
                        "why": "greedy answers draft alike on the same engine build; the answers may be right while "
                               "the speed the route is promoted for is lost"}}


def versions_text(versions: Mapping[str, str]) -> str:
    """"llama.cpp b6543 -> b6600": the candidate's engine in both runs, its name once when it is the same."""
    before, after = versions.get("previous", "?"), versions.get("current", "?")
    engine = before.partition(" ")[0]
    return f"{before} -> {after.removeprefix(engine + ' ')}"


def regression_gaps(comparison: Mapping[str, Any] | None, route: str | None = None) -> list[Gap]:
    """The regressions (of every candidate, or of `route`) as verdict gaps: they keep a candidate from ADOPT."""
    gaps = []
    for name, entry in ((comparison or {}).get("candidates") or {}).items():
        found = entry.get("regression")
        if found and route in (None, name):
            gaps.append(Gap(f"{found['title']} on `{name}`", kind=REGRESSION_KIND,
                            subject=", ".join(found["details"]["regressed"]), why=found["summary"]))
    return gaps
