"""Mutation harness: run the route suite against the reference engine, correct and with faults planted.

A run is a subprocess `python -m pytest <route-suite paths> -p no:cacheprovider --routes FILE
--report-dir DIR ...` (one candidate, or several in one run through a routes file, so the
interpreter, the models and the baseline's outputs are paid for once), and its report.json
says which checks failed and which findings each candidate got. The fault table names,
for every fault of the reference engine, the check family meant to catch it; a family the
route suite does not have yet is reported with the issue that will add it.
Environment: none read here (the subprocess inherits the caller's).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
ROUTE_SUITE = ("equivalence", "stressors")
FAILING = ("bug", "error")
CONTROL = "correct"   # the correct engine, a candidate of every run whose budget differs from COMMON_ARGS
ISSUE_TITLES = {
    4: "Greedy rigor: divergence classification, logprob consistency, streaming parity, boundary checks",
    5: "Sampling-distribution tests with a measured false-alarm rate and power",
    6: "Concurrency stressors: cross-context mixing, batch invariance, determinism, task accuracy under load, aborts",
    14: "Request features under speculation: penalties, logit_bias, min_tokens, min_p, n > 1, structured output, chat",
    23: "Where engines break under speculation: chunk and context boundaries, KV pressure, batch-size ramps, "
        "silent spec-off, stop strings everywhere",
    24: "Agentic traffic under speculation: tool calls, reasoning and multi-turn sessions",
}
# the check family -> the issue that adds it (greedy itself is the foundation's)
FAMILY_ISSUE = {"greedy": 2, "near-tie": 4, "boundary": 4, "logprobs": 4, "distribution": 5, "mixing": 6, "features": 14,
                "spec-path": 23, "kv-pressure": 23, "batch-ramp": 23, "agentic": 24, "draft-history": 43,
                "turn-reuse": 43}
# pairs other than the default one, by name: a row on one runs its candidates and baseline on that pair
PAIRS = {"pair2": ROOT / "fixtures" / "models" / "pair2"}
# one budget for every run, so "the correct engine passes" is claimed at the budget the faults are caught at
COMMON_ARGS = ("--prompt-limit", "2", "--concurrency", "8", "--stress-requests", "100", "--detect-tv", "0.2")
NOISY_SEEDS = (1, 2)
ALL_PROMPTS = ("--prompt-limit", "1000")
DISTRIBUTION_ARGS = ("--prompt-limit", "14", "--detect-tv", "0.1")


@dataclass(frozen=True)
class Mutant:
    """One row of the table: a planted fault and the check family that must catch it. `fault` names a reference
    engine fault (spec_route_suite/reference/faults.py FAULTS); a row for a family no engine fault aims at plants
    a route wrapper instead (`plant`, spec_route_suite/routes/wrappers/planted.py) around the correct engine."""

    fault: str
    catcher: str
    expect: str = "caught"            # "caught": the catcher fails the route; "near-tie": reported, not failed;
    # "class-gap": the verdict names a prompt class whose speculation accepted nothing (the route waits);
    # "regression": the run, --compare-to a run of the correct engine under the same names at the same budget, names
    # an acceptance regression on the route and none on the correct engine beside it (its catcher records the counters)
    # "warning": a performance fault with unchanged answers, a warning of the catcher's family (the route pilots)
    options: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()        # extra suite options for this row (after COMMON_ARGS: they win)
    engine: tuple[tuple[str, str], ...] = ()   # engine settings (a KV pool, a prefill chunk) the fault needs to act:
    # the correct engine of the same run gets them too, so "it passes" is claimed on the same engine
    pair: str = ""                    # PAIRS key: the engine and the baseline run that pair ("" the default one)
    plant: str = ""                   # a planted wrapper (plant=...) instead of an engine fault
    gap: str = ""                     # a known gap: the row is an expected failure until the named work lands
    repro_gap: str = ""               # why its repro script cannot reproduce it against the in-process server
    baseline: str = ""                # the baseline route URI when not the pair's AR hf route (one with a prompt cache)

    @property
    def name(self) -> str:
        """The fault's name, or the plant's (`plant=seed-ignored`)."""
        return self.fault or f"plant={self.plant}"

    @property
    def group(self) -> tuple[str, str, tuple[str, ...], tuple[tuple[str, str], ...], str, str]:
        """Rows with the same group share one route-suite run (one candidate each)."""
        return self.catcher, self.expect, self.args, self.engine, self.pair, self.baseline

    @property
    def label(self) -> str:
        """The fault, its expectation when not "caught", and the tests it runs when a row selects them (-k)."""
        selection = self.args[self.args.index("-k") + 1] if "-k" in self.args else ""
        return (self.name + ("" if self.expect == "caught" else f" ({self.expect})")
                + (f" [-k {selection}]" if selection else ""))

    @property
    def route_name(self) -> str:
        base = self.fault or "plant_" + re.sub(r"\W+", "_", self.plant).strip("_")
        named_alike = ("caught", "class-gap", "regression", "warning")
        return base if self.expect in named_alike else f"{base}_{self.expect.replace('-', '_')}"

    def uri(self) -> str:
        options = ((("fault", self.fault),) if self.fault else (("plant", self.plant),)) + self.options + self.engine
        return correct_uri(self.pair) + ("&" if self.pair else "?") + "&".join(f"{k}={v}" for k, v in options)

    def control_uri(self) -> str:
        """The correct engine with this row's engine settings (on its pair)."""
        return control_uri(self.engine, self.pair)

    def baseline_uri(self) -> str:
        return self.baseline or default_baseline_uri(self.pair)


def correct_uri(pair: str = "") -> str:
    """The correct reference engine, on the default pair or on `pair` (its own draft)."""
    return f"reference:{PAIRS[pair] / 'target'}?draft={PAIRS[pair] / 'draft'}" if pair else "reference:"


def control_uri(engine: tuple[tuple[str, str], ...], pair: str = "") -> str:
    """The correct engine with these engine settings, on the default pair or on `pair`."""
    if not engine:
        return correct_uri(pair)
    return correct_uri(pair) + ("&" if pair else "?") + "&".join(f"{k}={v}" for k, v in engine)


MUTANTS: tuple[Mutant, ...] = (
    Mutant("kv_no_rollback", "greedy"),
    Mutant("accept_count_off_by_one", "greedy"),
    # an engine that dies: one bug finding naming the request (only greedy tests run, so a greedy test meets it first)
    Mutant("dies_at_first_verify", "greedy", args=("-k", "test_greedy_matches_baseline")),
    # near-ties are rare on the confident tiny pair (2-4 of 70 prompts split): these rows use every prompt
    Mutant("logit_noise", "greedy", args=ALL_PROMPTS),                  # strict policy: the split is seen
    Mutant("logit_noise", "greedy", expect="near-tie", options=(("seed", str(NOISY_SEEDS[1])),), args=ALL_PROMPTS),
    # its own family: a verifier at another precision (noise 1.5, five times the baseline's) splits at near-ties
    # more often than a noisy baseline (0.3, like the near-tie row above) does against itself, which under classify
    # (where each split is excused) is the only sign left: near-tie flips per token on every prompt's greedy answer,
    # an exact test of the two rates (tests/test_near_tie_power.py proves the same fault at production settings)
    Mutant("logit_noise", "near-tie", options=(("noise", "1.5"), ("seed", str(NOISY_SEEDS[1]))),
           args=("--greedy-policy", "classify", *ALL_PROMPTS, "-k", "near_tie_rate")),
    Mutant("max_tokens_overshoot", "boundary"),
    Mutant("tokens_after_stop", "boundary"),
    Mutant("logprobs_from_draft", "logprobs"),
    Mutant("cross_context_mixing", "mixing", options=(("mix_rate", "0.1"),)),
    Mutant("kv_slot_swap", "mixing", options=(("mix_rate", "0.25"),)),  # a swap needs company at its step
    # Each statistical fault on the grid point where it acts (T=1.5 shows the first four; top-p exists only at
    # T=0.7/top-p 0.9, min_p only at T=1.6/top-k 20/min-p 0.05), at the budget of DISTRIBUTION_ARGS (TV 0.1,
    # 14 prompts/category).
    Mutant("residual_from_p", "distribution", args=(*DISTRIBUTION_ARGS, "-k", "T1.5")),
    Mutant("bonus_from_q", "distribution", args=(*DISTRIBUTION_ARGS, "-k", "T1.5")),
    Mutant("soft_q_for_argmax_draft", "distribution", args=(*DISTRIBUTION_ARGS, "-k", "T1.5")),
    Mutant("draft_temperature_ignored", "distribution", args=(*DISTRIBUTION_ARGS, "-k", "T1.5")),
    Mutant("top_p_one_side", "distribution", args=(*DISTRIBUTION_ARGS, "-k", "p0.9")),
    # n_shared_stream's copies reach the same tests through the n=4 samples pooled into every grid point
    Mutant("min_p_draft_only", "distribution", args=(*DISTRIBUTION_ARGS, "-k", "m0.05")),
    Mutant("n_shared_stream", "distribution", args=(*DISTRIBUTION_ARGS, "-k", "T1.5")),
    # request features (equivalence/test_features.py): one run, each fault caught by the test for its feature
    Mutant("penalty_bonus_only", "features"),
    Mutant("logit_bias_draft_ignored", "features"),
    Mutant("min_tokens_eos_in_block", "features"),
    Mutant("n_shared_stream", "features"),
    Mutant("grammar_first_only", "features"),
    Mutant("grammar_first_only", "features", args=("-k", "json_schema")),   # the same mask under a json_schema
    # issue #23: stop strings on every prompt, usage on every prompt, the stated chunked-prefill budget
    Mutant("stop_string_dropped", "boundary", options=(("fault_rate", "0.2"),)),
    Mutant("usage_miscount", "boundary"),
    # one cause every check that reaches max_tokens sees (issue #34 item 13): the boundary family catches it, and
    # tests/test_one_cause.py shows the run's one issue file naming every family it broke
    Mutant("block_counted_before_sent", "boundary"),
    # its own run (the correct engine with the same prefill chunk beside it), on the stated-boundary sweep only
    Mutant("chunk_edge_off_by_one", "boundary", engine=(("prefill_chunk", "48"),), args=("-k", "stated_boundaries")),
    Mutant("spec_off_for_logprobs", "spec-path"),
    # llama.cpp#19231: chat speculates on its first request only
    Mutant("spec_first_chat_only", "spec-path",
           repro_gap="the in-process server renders a chat itself and runs its engine on the prompt ids, so the "
                     "engine never sees a chat request to count (spec_route_suite/servers/inprocess.py)"),
    Mutant("preempt_loses_draft_state", "kv-pressure", engine=(("kv_capacity", "768"),)),
    Mutant("batch_threshold", "batch-ramp"),
    # lossless, so no parity check can see it: the long class's drafts are all rejected, and the verdict names it
    Mutant("collapse_long_prompts", "class-acceptance", expect="class-gap"),
    # lossless and invisible to every check of one run (its answers are the correct engine's): the greedy check records
    # each answer's drafting, and only --compare-to, against the correct engine's run, sees the acceptance fall
    Mutant("stale_last_draft", "greedy", expect="regression", args=("-k", "test_greedy_matches_baseline")),
    # performance faults with unchanged answers (issue #43): a warning of their family keeps the route from adopt
    Mutant("drafter_state_carried", "draft-history", expect="warning"),
    Mutant("collapse_in_company", "speed", expect="warning",
           repro_gap="the speed gate's warning is judged over a prompt set alone and in company (a sign test), "
                     "not on one request a script could resend"),
    # against the engine's own AR twin with the same prompt cache (the hf baseline has none to compare turn 2 with)
    Mutant("cache_keeps_drafts_past_end", "turn-reuse", expect="warning", engine=(("prefix_cache", "on"),),
           baseline="reference:?drafter=none&prefix_cache=on"),
    # families no engine fault aims at: a planted wrapper around the correct engine
    Mutant("", "seeds", plant="seed-ignored"),
    Mutant("", "streaming", plant="stream-divergence@3"),
    Mutant("", "chat", plant="chat-divergence@3", args=("-k", "test_chat_"),
           repro_gap="the in-process server renders a chat itself and runs its route on the prompt ids, so a plant "
                     "on the route's chat requests never acts behind it (spec_route_suite/servers/inprocess.py)"),
    # the chat server's parsers fed verified blocks: on pair 2, whose model calls tools and reasons (the first pair
    # has no tools in its template, so its agentic rows are "not verified"); parity, sessions, check conversation
    Mutant("tool_call_block_boundary", "agentic", pair="pair2"),
    Mutant("reasoning_leak_in_block", "agentic", pair="pair2"),
    Mutant("parser_state_carried", "agentic", pair="pair2"),
)


@dataclass(frozen=True)
class SuiteResult:
    """What one route-suite run produced: exit code, report.json (empty if none), timing, output tail."""

    exit_code: int
    run_dir: Path | None
    report: Mapping[str, Any]
    duration_s: float
    output_tail: str
    command: tuple[str, ...] = ()

    @property
    def findings(self) -> list[dict]:
        return list(self.report.get("findings", []))

    def findings_for(self, route: str, *, check: str | None = None) -> list[dict]:
        return [f for f in self.findings if f.get("route") == route and (check is None or f.get("check") == check)]

    def outcomes_for(self, route: str, *, check: str | None = None) -> Counter:
        """Test outcomes of one candidate (its name is a dash-separated part of the test id)."""
        counts: Counter = Counter()
        for test in self.report.get("tests", []):
            if check is not None and test.get("check") != check:
                continue
            params = re.search(r"\[(.*)\]$", test.get("nodeid", ""))
            if params and route in params.group(1).split("-"):
                counts[test.get("outcome", "?")] += 1
        return counts

    def caught(self, *, route: str, check: str) -> bool:
        """The check found the fault: a correctness ("bug") finding of that very family against the route. A
        route error (a timeout, a refused request) or a failed test without such a finding is not a catch."""
        return any(f.get("severity") == "bug" for f in self.findings_for(route, check=check))

    def noisy(self, route: str) -> list[tuple[str, str, str]]:
        """What the run found against `route` beyond info and engine notes (the correct engine must have none)."""
        return [(f["check"], f["severity"], f["title"][:160]) for f in self.findings_for(route)
                if f.get("severity") not in ("info", "engine")]

    def requests(self, route: str) -> int | None:
        """Requests the route answered in the run: the report's latency count (the engine's own
        `requests_served` is read from its inventory before any traffic, so it says 0)."""
        timed = (self.report.get("latency") or {}).get(route) or {}
        if isinstance(timed.get("requests"), int):
            return timed["requests"]
        extra = (self.report.get("inventories", {}).get(route) or {}).get("extra") or {}
        return extra.get("requests_served")

    def to_json(self) -> dict:
        return {"exit_code": self.exit_code, "run_dir": str(self.run_dir) if self.run_dir else None,
                "report": dict(self.report), "duration_s": self.duration_s, "output_tail": self.output_tail,
                "command": list(self.command)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SuiteResult":
        return cls(exit_code=data["exit_code"], run_dir=Path(data["run_dir"]) if data["run_dir"] else None,
                   report=data["report"], duration_s=data["duration_s"], output_tail=data["output_tail"],
                   command=tuple(data["command"]))

    def describe(self) -> str:
        return (f"exit {self.exit_code} after {self.duration_s:.0f}s, run folder {self.run_dir}\n"
                f"$ {' '.join(self.command)}\n{self.output_tail}")


def routes_toml(*, baseline: str, candidates: Mapping[str, str]) -> str:
    """A routes file with one baseline and named candidates, all given as route URIs."""
    lines = [f"baseline = {json.dumps(baseline)}", "", "[candidates]"]
    lines += [f"{name} = {json.dumps(uri)}" for name, uri in candidates.items()]
    return "\n".join(lines) + "\n"


def default_baseline_uri(pair: str = "") -> str:
    return f"hf:{(PAIRS[pair] if pair else ROOT / 'fixtures' / 'models') / 'target'}"


def run_route_suite(candidate_uri: str | Mapping[str, str], extra_args: Sequence[str], tmp_path: Path, *,
                    paths: Sequence[str] = ROUTE_SUITE, baseline_uri: str | None = None, timeout_s: float = 900,
                    workers: int = 0) -> SuiteResult:
    """Run the route suite in a subprocess against one candidate URI (or {name: uri}) and parse its report."""
    tmp_path = Path(tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    report_dir = tmp_path / "reports"
    candidates = {"candidate": candidate_uri} if isinstance(candidate_uri, str) else dict(candidate_uri)
    routes = tmp_path / "routes.toml"
    routes.write_text(routes_toml(baseline=baseline_uri or default_baseline_uri(), candidates=candidates))
    command = [sys.executable, "-m", "pytest", *paths, "-p", "no:cacheprovider", "-q", "--routes", str(routes),
               "--report-dir", str(report_dir), *extra_args]
    if workers:
        command += ["-n", str(workers)]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = -1, f"timed out after {timeout_s:.0f}s\n{exc.stdout or ''}"
    duration = time.perf_counter() - start
    run_dirs = sorted(p.parent for p in report_dir.glob("*/report.json"))
    report = json.loads((run_dirs[-1] / "report.json").read_text()) if run_dirs else {}
    return SuiteResult(exit_code=code, run_dir=run_dirs[-1] if run_dirs else None, report=report,
                       duration_s=duration, output_tail=_tail(output), command=tuple(map(str, command)))


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def check_paths(check: str, *, root: Path = ROOT) -> list[str]:
    """Route-suite test modules whose tests belong to the check family: pytest.mark.check("family"), or
    pytest.mark.check(module.CHECK) where that module of the suite says CHECK = "family" (chat.CHECK)."""
    family = re.compile(r"pytest\.mark\.check\(\s*[\"']" + re.escape(check) + r"[\"']\s*\)")
    named = re.compile(r"pytest\.mark\.check\(\s*(\w+)\.CHECK\s*\)")
    found = []
    for folder in ROUTE_SUITE:
        for module in sorted((root / folder).glob("test_*.py")):
            text = module.read_text(errors="replace")
            if family.search(text) or any(_declares(root, name, check) for name in named.findall(text)):
                found.append(str(module.relative_to(root)))
    return found


def _declares(root: Path, module: str, check: str) -> bool:
    """Does the suite module `module` (equivalence/ or stressors/) say CHECK = "check"?"""
    pattern = re.compile(r"^CHECK\s*=\s*[\"']" + re.escape(check) + r"[\"']", re.MULTILINE)
    return any(path.exists() and pattern.search(path.read_text(errors="replace"))
               for path in (root / folder / f"{module}.py" for folder in ROUTE_SUITE))


# catchers whose tests carry no check mark (the speed gate is measured, not a check family: its warnings name "speed")
UNMARKED_CATCHERS = {"speed": ["stressors/test_speed.py"]}


def catcher_paths(mutant: Mutant) -> list[str]:
    """Where the catcher lives; the near-tie verdict needs the greedy check's divergence classifier."""
    paths = UNMARKED_CATCHERS.get(mutant.catcher) or check_paths(mutant.catcher)
    if mutant.expect == "near-tie" and not (ROOT / "equivalence" / "divergence.py").exists():
        return []
    return paths


def missing_reason(mutant: Mutant) -> str:
    issue = FAMILY_ISSUE.get("near-tie" if mutant.expect == "near-tie" else mutant.catcher, 0)
    return f"caught by issue: {ISSUE_TITLES.get(issue, f'issue {issue}')}"


@dataclass
class Row:
    """One line of the printed mutation table."""

    mutant: Mutant
    status: str = "pending"          # caught / MISSED / xfail (no catcher yet)
    also: list[str] = field(default_factory=list)
    requests: int | None = None
    seconds: float | None = None
    control: str = "-"               # the correct engine in the same run, at the same budget


def verdict_for(mutant: Mutant, result: SuiteResult) -> tuple[bool, str]:
    """(as expected?, why) for one mutant in a finished run."""
    name = mutant.route_name
    if mutant.expect == "warning":
        warned = [f for f in result.findings_for(name, check=mutant.catcher) if f.get("severity") == "warning"]
        verdict = (result.report.get("route_verdicts") or {}).get(name) or {}
        return bool(warned) and verdict.get("verdict") == "pilot", (f"{len(warned)} {mutant.catcher} warning(s), "
                                                                    f"verdict {verdict.get('verdict')!r}")
    if mutant.expect == "class-gap":
        verdict = (result.report.get("route_verdicts") or {}).get(name) or {}
        named = "accepted nothing on prompt class" in verdict.get("reason", "")
        return named and verdict.get("verdict") == "wait", (f"verdict {verdict.get('verdict')!r}: "
                                                            f"{verdict.get('reason', '')[:300]}")
    if mutant.expect == "regression":
        compared = (result.report.get("comparison") or {}).get("candidates") or {}
        mine, control = compared.get(name) or {}, compared.get(CONTROL) or {}
        ok = (bool(mine.get("regression")) and bool(control.get("compared")) and not control.get("regression")
              and not result.caught(route=name, check=mutant.catcher))
        return ok, (f"regression {'named' if mine.get('regression') else 'NOT named'} on the fault "
                    f"({(mine.get('regression') or {}).get('summary', mine.get('why', ''))}), "
                    f"{'also' if control.get('regression') else 'none'} on the correct engine")
    if mutant.expect == "near-tie":
        greedy = result.findings_for(name, check="greedy")
        bugs = [f for f in greedy if f.get("severity") in FAILING]
        near = [f for f in greedy if f.get("severity") == "near-tie"]
        ok = bool(near) and not bugs
        return ok, f"{len(near)} near-tie and {len(bugs)} bug findings under --greedy-policy classify"
    caught = result.caught(route=name, check=mutant.catcher)
    return caught, f"{mutant.catcher} {'failed' if caught else 'did not fail'} the route"


def other_catchers(mutant: Mutant, result: SuiteResult) -> list[str]:
    name = mutant.route_name
    checks = {t.get("check") for t in result.report.get("tests", [])} | {f.get("check") for f in result.findings}
    return sorted(c for c in checks if c and c != mutant.catcher and result.caught(route=name, check=c))


EXPECTATION_LABELS = {"near-tie": " (near-tie, classify)", "class-gap": " (class named, wait)",
                      "regression": " (--compare-to names it)", "warning": " (warning, pilot)"}


def format_table(rows: Sequence[Row], *, correct: str = "") -> str:
    """The mutation table, one row per fault (plus the correct engine's line)."""
    header = ("fault", "expected catcher", "caught?", "also failed by", "correct engine, same run", "requests",
              "run s")
    lines = [header]
    if correct:
        lines.append(("(correct engine)", "each family run", correct, "", "", "", ""))
    for row in rows:
        m = row.mutant
        catcher = m.catcher + EXPECTATION_LABELS.get(m.expect, "")
        lines.append((m.label, catcher, row.status, ", ".join(row.also) or "-", row.control,
                      "-" if row.requests is None else str(row.requests),
                      "-" if row.seconds is None else f"{row.seconds:.0f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = [" | ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)
