"""The gaps as a table a person acts on: what keeps a candidate from ADOPT, why in one clause, and how to close it.

Why: each check words its own "not verified" reason, so the same cause (a route that serves one request at a
time) reads six ways over six families; listed whole, one run's gaps made a 6,000-character bullet. Here every gap
is matched to a cause the suite knows (CAUSES: a pattern over its reason, a short why and a remedy), else to its
kind's own remedy (KINDS: every kind a Gap is built with), and gaps of one cause are one row naming the families
and candidates it covers. The reason in full stays in report.json and report.html's coverage table.
Environment: none.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from spec_route_suite.reports.regression import REGRESSION_KIND

WHY_CHARS = 110


@dataclass(frozen=True)
class Remedy:
    why: str     # one short clause
    close: str   # what a user does to close the gap


# Every kind a Gap is built with (reports/coverage.py statuses, reports/run_report.py evidence_gaps): its remedy
# when no cause below says more. tests/test_summary.py checks that each kind the code emits is here.
KINDS: dict[str, Remedy] = {
    "not run": Remedy("planned, but deselected (-k, --deselect, a test path or --categories)",
                      "run without -k / --deselect / --categories"),
    "not verified": Remedy("it ran, but could not have detected its bug class on this route",
                           "see the family's row in report.html's coverage table"),
    "not supported by this route": Remedy("the route refuses or lacks the request feature",
                                          "serve it from an engine that supports the feature, or accept the gap"),
    "prompt set": Remedy("part of the prompt set was run", "run the whole prompt set (drop --prompt-limit, "
                                                           "--categories)"),
    "settings": Remedy("a setting below the suite's full budget", "run at the full budget (--detect-tv 0.05, no "
                                                                  "--near-tie-tau)"),
    "server": Remedy("the server restarted or stopped answering during the run", "rerun against a stable server"),
    "speculation not proven": Remedy("nothing the route states shows that it speculated",
                                     "start the server with its metrics (vLLM /metrics, llama.cpp --metrics) or "
                                     "declare options.speculative = \"true\""),
    "prompt class": Remedy("a prompt class accepted no draft token", "check the drafter on that traffic "
                                                                     "(report.json by_class)"),
    "warnings": Remedy("a warning weakens the evidence", "read the warning in report.html; it names its fix"),
    "baseline parity": Remedy("the baseline is not the candidate's model, tokenizer or dtype",
                              "serve both routes with the same model, tokenizer and dtype"),
    "baseline findings": Remedy("the baseline disagrees with itself", "fix or replace the baseline route first"),
    REGRESSION_KIND: Remedy("greedy acceptance fell since the run --compare-to names (a sign test over the prompts)",
                            "bisect the change between the two engine versions named (report.json `comparison` shows "
                            "the classes and draft positions that fell)"),
}

# A limit a check needs and the route does not state, with the option that declares it (the route's name aside)
DECLARE = re.compile(r"no (?P<limit>[\w' -]+?) stated \(declare (?P<option>options\.\w+)")

# Causes the suite words in its reasons, most specific first: (pattern over the reason, remedy).
CAUSES: tuple[tuple[str, Remedy], ...] = (
    (r"serialises requests|one request at a time|no two requests ever share|no two share an engine step",
     Remedy("the route serves one request at a time", "use a route that batches concurrent requests")),
    (r"seeding is done by the adapter|circular on this route",
     Remedy("the adapter seeds, not the engine: the check cannot fail", "use an engine that seeds each request "
                                                                       "itself")),
    (r"minimum detectable TV|budget misses --detect-tv",
     Remedy("too few samples for --detect-tv", "a route that samples faster (batched), or accept a larger "
                                               "--detect-tv")),
    (r"no --prompts", Remedy("it judges your own prompts, and none were given", "add --prompts (README: your "
                                                                                "workload)")),
    (r"died at request", Remedy("a route died, the baseline or this candidate (its finding names the request)",
                                "fix the crash its finding names (the server log has the trace), then rerun")),
    (r"acceptance under load could not be compared", Remedy("neither the answers nor the server state the drafting",
                                                          "start the server with its metrics (vLLM /metrics, "
                                                          "llama.cpp --metrics)")),
    (r"route hung since|hung on the run's hang board", Remedy("the route stopped answering",
                                                              "restart the server; the notes name when it hung")),
    (r"num_speculative_tokens|draft depth", Remedy("the draft depth is not stated",
                                                   "declare options.num_speculative_tokens")),
    (r"states no drafting per answer|whether .* speculat",
     Remedy("the answers do not state their drafting", "a server whose answers state it (llama.cpp timings, "
                                                       "SGLang meta_info), or accept the gap")),
    (r"nothing was preempted|preemption|holds the load|KV pool",
     Remedy("no KV pressure was reached", "declare kv_capacity_tokens, or start the server with a smaller KV "
                                          "pool")),
    (r"excess of .* near-tie|near-tie flips per",
     Remedy("too few greedy tokens for the claimed near-tie excess", "more greedy prompts, or a larger "
                                                                     "--max-new-tokens")),
    (r"cannot teacher-force", Remedy("the baseline cannot score tokens", "a baseline with prompt logprobs")),
    (r"control too small", Remedy("the load control could not decide", "a larger --stress-requests")),
    (r"right alone|right serially|weakly", Remedy("too few answers right alone to judge under load",
                                                  "a model that answers the canary prompts right")),
    (r"lacks chat|chat template|cannot render a chat", Remedy("the route has no chat", "serve a model with a chat "
                                                                                      "template")),
    (r"renders? tools|takes no tools|tool call", Remedy("no tool call can reach the server's parsers",
                                                        "a model whose chat template takes tools")),
    (r"lacks (comparable )?logprobs|logprobs not delivered", Remedy("the route gives no comparable logprobs",
                                                                    "a server that returns logprobs by token id")),
    (r"lacks capability|lacks \w+, so|does not support|refuses \w+ requests",
     Remedy("the route lacks the capability", "a route that offers it, or accept the gap")),
    (r"may keep n-gram state", Remedy("an n-gram drafter may keep state across requests: measured, not judged",
                                      "read its acceptance after other requests in report.json (draft_history)")),
    (r"states no drafting method", Remedy("the route states no drafting method", "declare options.method (e.g. "
                                                                                  "draft-model, eagle3, ngram)")),
    (r"no prompt was drafted for", Remedy("the prompts were not drafted for", "see the run's speculation status")),
    (r"cached prompt tokens|no prefix cache|no AR reuse",
     Remedy("no cached prompt tokens to compare turn 2 by", "a candidate and a baseline that both cache prompts and "
                                                           "state it (usage.prompt_tokens_details, llama.cpp "
                                                           "timings.cache_n)")),
    (r"does not state|states no|nobody states|not stated|no .* boundary",
     Remedy("the server does not state the limit", "declare it in the route's options (README: engine limits)")),
    (r"no concurrency level above 1", Remedy("no concurrency above 1", "--concurrency 1,8,32")),
    (r"honour", Remedy("the engine does not honour the feature on the baseline either", "engine behaviour: "
                                                                                        "accept the gap")),
)


def remedy(kind: str, why: str) -> Remedy:
    """The cause a gap's reason names, else its kind's own remedy (the reason, cut, as its why). A part not run was
    deselected, whatever words say so."""
    if kind == "not run":
        return KINDS[kind]
    declare = DECLARE.search(why or "")
    if declare:   # "no drafter's max length stated (declare options.draft_max_len ...)": one row for every route
        return Remedy(f"the route does not state its {declare['limit']}", f"declare {declare['option']}")
    for pattern, known in CAUSES:
        if re.search(pattern, why or "", re.IGNORECASE):
            return known
    own = KINDS.get(kind, Remedy("", "see report.html"))
    return Remedy(_cut(why) if why else own.why, own.close)


def gap_rows(verdicts: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (kind, cause) over every candidate's gaps: its families and candidates in first-seen order."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for name, verdict in verdicts.items():
        for gap in verdict.get("gaps") or []:
            kind = gap.get("kind") or "gap"
            found = remedy(kind, gap.get("why") or gap.get("text", ""))
            row = rows.setdefault((kind, found.why, found.close), {"kind": kind, "families": [], "candidates": [],
                                                                   "why": found.why, "close": found.close})
            _extend(row["families"], families_of(gap.get("subject") or ""))
            _extend(row["candidates"], [name])
    return list(rows.values())


def families_of(subject: str) -> list[str]:
    """"mixing, batch-invariance: needle" -> the family names it covers."""
    return [part.partition(": ")[0].strip() for part in subject.split(", ") if part.strip()]


def _extend(into: list[str], values: Iterable[str]) -> None:
    for value in values:
        if value and value not in into:
            into.append(value)


def _cut(text: str, limit: int = WHY_CHARS) -> str:
    text = " ".join(str(text).removeprefix("not verified: ").split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"
