"""Mutation score: the route suite passes the correct reference engine and catches each planted fault.

One subprocess runs the correct engine through every catcher family at the shared budget
(mutation.COMMON_ARGS); then one subprocess per family runs all the faults meant for it as
named candidates of one routes file, two subprocesses at a time. A fault whose catcher the
route suite does not have yet is an expected failure naming the issue that adds it.
`pytest tests -k mutation -s` prints the table (fault, expected catcher, caught?, requests).
A regression row (a lossless fault that only lowers acceptance) runs twice at its budget: the correct engine under the
row's names, then the fault beside the correct engine, --compare-to that first run.
Every row files exactly one issue for its fault (none for a near-tie, class-gap or regression row) and leaves a repro:
its catcher's finding cluster has a script that, run alone against the in-process server, exits 1 with the faulty
engine as the candidate and 0 with the correct one (the row's
baseline served as the control); and every run folder's summary and issue files fit their limits, as does
one report that pools every run's findings (50 and more).
The distribution rows run each statistical fault on the grid point where it acts, at TV 0.1
over 14 prompts per category (tests/mutation.py DISTRIBUTION_ARGS; a few minutes on 2 cores);
the correct engine runs the distribution check at the shared budget, and the check's own
false-alarm rate is measured in tests/test_stats_calibration.py and tests/test_stats_routes.py.
Environment: none.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from filelock import FileLock

from spec_route_suite.reference.faults import FAULTS
from spec_route_suite.servers.inprocess import serve_in_thread
from tests.mutation import (COMMON_ARGS, CONTROL, FAILING, MUTANTS, NOISY_SEEDS, Mutant, Row, SuiteResult,
                            catcher_paths, correct_uri, format_table, missing_reason,
                            other_catchers, run_route_suite, verdict_for)
from tests.report_limits import pooled_report_problems, run_folder_problems

FAMILY_ARGS: dict[str, tuple[str, ...]] = {}   # per-family suite options beyond COMMON_ARGS (rows carry their own)
TIMEOUT_S = 900
RUN_COST = {"distribution": 10, "mixing": 3, "greedy": 2, "boundary": 2}   # longest runs start first
NOISY_BASELINE = f"reference:?fault=logit_noise&seed={NOISY_SEEDS[0]}"
CONTROLLED_EXPECTATIONS = ("caught", "class-gap", "regression", "warning")   # rows judged beside the correct engine
NOT_CLEAN = ("failed", "error", "skipped")           # outcomes the correct engine's tests must not have


def _runnable(m: Mutant) -> bool:
    return bool(catcher_paths(m))


def _groups(selected: set[Mutant] | None = None) -> dict[tuple, list[Mutant]]:
    groups: dict[tuple, list[Mutant]] = {}
    for m in MUTANTS:
        if _runnable(m) and (selected is None or m in selected):
            groups.setdefault(m.group, []).append(m)
    return groups


def _selection(session: pytest.Session) -> tuple[set[Mutant], bool]:
    """The mutants the selected tests ask about, and whether the correct-engine run is selected
    (`-k ROW_ID` runs only that row's suite run, not the whole table)."""
    mutants = {item.callspec.params["mutant"] for item in session.items
               if hasattr(item, "callspec") and "mutant" in item.callspec.params}
    groups = {item.callspec.params["group"] for item in session.items
              if hasattr(item, "callspec") and "group" in item.callspec.params}
    mutants |= {m for m in MUTANTS if m.group in groups}
    correct = any(item.name == "test_mutation_correct_engine_passes_every_catcher" for item in session.items)
    return mutants, correct


@pytest.fixture(scope="module")
def mutation_runs(tmp_path_factory, worker_id, request):
    """{"correct": SuiteResult, Mutant.group: SuiteResult}; computed once per session, also under xdist.

    Under xdist the first worker runs the suites while holding a file lock and leaves the
    results beside the workers' temp dirs; the others wait on the lock and read them.
    """
    selected, correct = _selection(request.session)
    if worker_id == "master":
        results = _run_all(tmp_path_factory, selected, correct)
    else:
        shared = tmp_path_factory.getbasetemp().parent
        with FileLock(str(shared / "mutation.lock")):
            cache = shared / "mutation-results.json"
            if cache.exists():
                results = {_key(k): SuiteResult.from_json(v) for k, v in json.loads(cache.read_text())}
            else:
                results = _run_all(tmp_path_factory, selected, correct)
                cache.write_text(json.dumps([[_key_json(k), r.to_json()] for k, r in results.items()]))
    yield results
    print("\n" + format_table(table_rows(results), correct=correct_status(results.get("correct"))))


def _key_json(key):
    return key if key == "correct" else [key[0], key[1], list(key[2]), [list(o) for o in key[3]], key[4], key[5]]


def _key(data):
    return data if data == "correct" else (data[0], data[1], tuple(data[2]), tuple(tuple(o) for o in data[3]), data[4],
                                           data[5])


def _run_all(tmp_path_factory, selected: set[Mutant], correct: bool) -> dict:
    every = _groups()
    jobs = {}
    if correct:   # every family whose rows share the common budget and engine (the others carry their control)
        correct_paths = sorted({p for group, ms in every.items() if group[1] in CONTROLLED_EXPECTATIONS
                                and not controlled(group) for p in catcher_paths(ms[0])})
        extra = [a for catcher in sorted({c for (c, *_) in every}) for a in FAMILY_ARGS.get(catcher, ())]
        jobs["correct"] = dict(candidate_uri={"correct": "reference:"}, extra_args=[*COMMON_ARGS, *extra],
                               paths=correct_paths)
    for group, ms in _groups(selected).items():
        catcher, expect, row_args, _, pair, _ = group
        args = [*COMMON_ARGS, *FAMILY_ARGS.get(catcher, ()), *row_args]
        candidates = {m.route_name: m.uri() for m in ms}
        if controlled(group):   # the correct engine at this row's own budget, engine settings and pair, same run
            candidates[CONTROL] = ms[0].control_uri()
        job = dict(candidate_uri=candidates, extra_args=args, paths=catcher_paths(ms[0]),
                   baseline_uri=ms[0].baseline_uri())
        if expect == "regression":   # first the correct engine under the same names, at the same budget
            job.update(previous={**{m.route_name: m.control_uri() for m in ms}, CONTROL: ms[0].control_uri()})
        if expect == "near-tie":
            job.update(extra_args=[*args, "--greedy-policy", "classify"], baseline_uri=NOISY_BASELINE)
        elif catcher == "near-tie":   # an excess of near-ties over a noisy baseline's own (the exact engine: none)
            job.update(baseline_uri=NOISY_BASELINE)
        jobs[group] = job

    def run(key):
        name = "correct" if key == "correct" else f"{key[0]}-{key[1]}-{len(key[2])}-{len(key[3])}"
        job = dict(jobs[key])
        previous = job.pop("previous", None)
        if previous is not None:   # a regression row: its run is --compare-to the correct engine's
            before = run_route_suite(tmp_path=tmp_path_factory.mktemp(f"{name}-before"), timeout_s=TIMEOUT_S,
                                     **{**job, "candidate_uri": previous})
            job["extra_args"] = [*job["extra_args"], "--compare-to", str(before.run_dir)]
        return key, run_route_suite(tmp_path=tmp_path_factory.mktemp(name), timeout_s=TIMEOUT_S, **job)

    order = sorted(jobs, key=lambda k: (k != "correct", -RUN_COST.get(k[0], 1) if k != "correct" else 0))
    with ThreadPoolExecutor(max_workers=2) as pool:  # two suite runs at a time: the 2-core budget
        return dict(pool.map(run, order))


def controlled(group: tuple) -> bool:
    """Runs whose budget, engine settings or pair are not the shared ones carry the correct engine (with the same
    engine settings, on the same pair) as a candidate (the near-tie run judges against a noisy baseline, where the
    correct engine's splits are near-ties by design: it has none)."""
    _, expect, row_args, engine, pair, baseline = group
    return bool(row_args or engine or pair or baseline) and expect in CONTROLLED_EXPECTATIONS


def correct_status(result: SuiteResult | None) -> str:
    if result is None:
        return "not run"
    noisy = [f for f in result.findings if f.get("severity") not in ("info", "engine")]
    return "passes" if result.exit_code == 0 and not noisy else f"FAILS (exit {result.exit_code}, {len(noisy)} findings)"


def table_rows(results) -> list[Row]:
    rows = []
    for m in MUTANTS:
        row = Row(mutant=m)
        if not catcher_paths(m):
            row.status = f"xfail (no '{m.catcher}' check yet)"
        elif m.group not in results:
            row.status = "not run (deselected)"
        else:
            result = results[m.group]
            ok, _ = verdict_for(m, result)
            labels = {"near-tie": "near-tie", "class-gap": "yes (wait)", "regression": "yes (--compare-to)",
                      "warning": "yes (pilot)"}
            row.status = (labels.get(m.expect, "yes") if ok else
                          f"NO (known gap: {m.gap.split(':')[0]})" if m.gap else "NO")
            row.also = other_catchers(m, result)
            row.requests = result.requests(m.route_name)
            row.seconds = result.duration_s
            if controlled(m.group):
                row.control = "passes" if not result.noisy(CONTROL) else f"FAILS ({len(result.noisy(CONTROL))})"
            else:
                row.control = "(correct-engine run)"
        rows.append(row)
    return rows


def unclean_tests(result: SuiteResult, route: str | None = None) -> list[str]:
    """Tests of the run (of `route` only, when named) that failed, errored or skipped, with why."""
    tests = [t for t in result.report.get("tests", []) if t.get("outcome") in NOT_CLEAN]
    if route is not None:
        tests = [t for t in tests if route in _params(t.get("nodeid", ""))]
    return [f"{t.get('outcome')}: {t.get('nodeid')}: {str(t.get('longrepr') or t.get('message') or '')[:200]}"
            for t in tests]


def _params(nodeid: str) -> list[str]:
    """A test id's parameters (the candidate's name is one of them)."""
    found = re.search(r"\[(.*)\]$", nodeid)
    return found.group(1).split("-") if found else []


# the correct engine at the common budget: every test of its families passes, yet the budget is not a full run's
# (two prompts per class, TV 0.2, one concurrency level, a subset of the families), so it reads pilot, never adopt
CORRECT_VERDICT = "pilot"


def test_mutation_correct_engine_passes_every_catcher(mutation_runs):
    """The control of every row run at the common budget: not a finding, and no test failed, errored or skipped (a
    skipped test would make "the correct engine passes" true of a check that never ran); its verdict as stated."""
    result = mutation_runs["correct"]
    noisy = [(f["check"], f["severity"], f["title"][:160]) for f in result.findings
             if f.get("severity") not in ("info", "engine")]
    assert result.exit_code == 0 and not noisy, f"correct engine failed the route suite: {noisy}\n{result.describe()}"
    assert result.report.get("counts", {}).get("passed", 0) > 0, result.describe()
    assert not unclean_tests(result), "\n".join(unclean_tests(result))
    verdict = result.report.get("route_verdicts", {}).get("correct") or {}
    assert verdict.get("verdict") == CORRECT_VERDICT, verdict


@pytest.mark.parametrize("group", sorted({m.group for m in MUTANTS if controlled(m.group)}),
                         ids=lambda g: "-".join((g[0], *([g[1]] if g[1] != "caught" else []), *g[2],
                                                 *(f"{k}{v}" for k, v in g[3]), *([g[4]] if g[4] else []))))
def test_mutation_correct_engine_passes_at_each_rows_budget(mutation_runs, group):
    """A row run at its own budget (more prompts, another TV, a -k selection) also runs the correct engine there:
    a fault caught at a budget where the correct engine would fail too proves nothing."""
    if group not in mutation_runs:
        pytest.skip("its fault rows are deselected")
    result = mutation_runs[group]
    assert result.report.get("route_verdicts", {}).get(CONTROL), result.describe()
    assert not result.noisy(CONTROL), f"the correct engine fails at this budget: {result.noisy(CONTROL)}"
    assert result.outcomes_for(CONTROL).get("passed", 0) > 0, result.describe()
    assert not unclean_tests(result, CONTROL), "\n".join(unclean_tests(result, CONTROL))


def test_mutation_table_has_a_row_for_every_reference_fault():
    """Every fault the reference engine defines has a row caught by the family the fault names (FAULTS): a new
    fault without its row fails here, and so does a row whose fault no longer exists."""
    rows = {(m.fault, m.catcher) for m in MUTANTS if m.fault}
    missing = sorted(f"{name} (family {fault.family})" for name, fault in FAULTS.items()
                     if (name, fault.family) not in rows)
    assert not missing, f"faults without a row caught by their family: {missing}"
    unknown = sorted({m.fault for m in MUTANTS if m.fault} - set(FAULTS))
    assert not unknown, f"rows for faults the engine does not define: {unknown}"
    planted = [m for m in MUTANTS if not m.fault]
    assert all(m.plant for m in planted), "a row names neither a fault nor a plant"


def _case(m: Mutant):
    marks = []
    if not catcher_paths(m):
        marks.append(pytest.mark.xfail(strict=True, reason=missing_reason(m)))
    elif m.gap:
        marks.append(pytest.mark.xfail(strict=True, reason=f"known gap, {m.gap}"))
    return pytest.param(m, marks=marks, id=_case_id(m))


def _case_id(m: Mutant) -> str:
    """The fault's name, plus its catcher and then its last option when the same fault has other rows."""
    same = [o for o in MUTANTS if o.route_name == m.route_name]
    if len(same) == 1:
        return m.route_name
    if sum(o.catcher == m.catcher for o in same) == 1:
        return f"{m.route_name}_{m.catcher}"
    return f"{m.route_name}_{m.catcher}" + (f"_{m.args[-1]}" if m.args else "")


@pytest.mark.parametrize("mutant", [_case(m) for m in MUTANTS])
def test_mutation_fault_is_caught_by_its_check(mutation_runs, mutant: Mutant):
    if not catcher_paths(mutant):
        pytest.fail(f"no '{mutant.catcher}' check in the route suite yet", pytrace=False)
    result = mutation_runs[mutant.group]
    ok, why = verdict_for(mutant, result)
    assert result.report, f"no report.json: {result.describe()}"
    assert ok, f"{mutant.label}: {why}\n{result.describe()}"


NOT_FILED_EXPECTATIONS = ("near-tie", "class-gap", "regression", "warning")   # rows that fail nothing: a near-tie, a
# named evidence gap, a performance warning


@pytest.mark.parametrize("mutant", [_case(m) for m in MUTANTS])
def test_mutation_row_files_one_issue_for_its_fault(mutation_runs, mutant: Mutant):
    """One fault is one root cause, one issue file on its route (issue #41), whichever checks of its run saw it: every
    bug and error finding against the route is in that file's cluster, its catcher among the checks listed. A row
    that fails nothing (a near-tie, a class that accepted nothing: the suite's statements about its evidence) files
    none."""
    if not catcher_paths(mutant):
        pytest.fail(f"no '{mutant.catcher}' check in the route suite yet", pytrace=False)
    result = mutation_runs[mutant.group]
    filed = [c for c in result.report.get("clusters", []) if c["route"] == mutant.route_name and c.get("issue")]
    if mutant.expect in NOT_FILED_EXPECTATIONS:
        assert not filed, [(c["title"], c["issue"]) for c in filed]
        return
    failing = [f for f in result.findings_for(mutant.route_name) if f.get("severity") in FAILING]
    assert len(filed) == 1, f"{mutant.label}: {[(c['title'][:160], c['count']) for c in filed]}"
    assert filed[0]["count"] == len(failing) and mutant.catcher in [row["check"] for row in filed[0]["checks"]]
    assert (result.run_dir / filed[0]["issue"]).is_file()


@pytest.fixture(scope="module")
def servers():
    """Route URI -> base URL of an in-process server for it, started on first use, all stopped at the end."""
    started: dict[str, tuple[str, object]] = {}

    def url(uri: str) -> str:
        if uri not in started:
            started[uri] = serve_in_thread(uri)
        return started[uri][0]
    yield url
    for _, stop in started.values():
        stop()


def _row_cluster(mutant: Mutant, result: SuiteResult) -> dict | None:
    """The catcher's finding cluster against the row's route (a near-tie or warning row: its cluster of that
    severity)."""
    severity = mutant.expect if mutant.expect in ("near-tie", "warning") else "bug"
    return next((c for c in result.report.get("clusters", []) if c["route"] == mutant.route_name
                 and mutant.catcher in [row["check"] for row in c.get("checks") or [c]]
                 and c["severity"] == severity), None)


def _repro_attempts(script) -> int:
    """The attempts the script makes by default (its DATA): the fault is reproduced at these, and the correct
    engine must come through the same number clean."""
    data = re.search(r'^ "attempts": (\d+),$', script.read_text(), re.MULTILINE)
    return int(data.group(1)) if data else 1


def _repro_case(m: Mutant):
    """A row's repro case: an expected failure where the in-process server cannot host its fault."""
    if not m.repro_gap:
        return _case(m)
    return pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=f"known gap: {m.repro_gap}"), id=_case_id(m))


@pytest.mark.parametrize("mutant", [_repro_case(m) for m in MUTANTS
                                    if catcher_paths(m) and m.expect not in ("class-gap", "regression")])
def test_mutation_row_leaves_a_repro_that_reproduces_only_the_fault(mutation_runs, servers, mutant: Mutant):
    """The row's repro script, alone (python3 + httpx, only the servers' addresses), exits 1 against the faulty
    engine and 0 against the correct one at the same attempts (the script's own: a load schedule is replayed up to
    100 times, and the correct engine must pass every one), with the embedded AR baseline as the control. (A
    class-gap or regression row has no request to resend: its evidence is the engine's own acceptance counters. The
    near-tie row's run judged against a noisy baseline; against that one the script rightly says "the baseline shows it too": a
    split at a near-tie is what a noisy baseline does as well. Against an exact baseline the split is the
    candidate's alone, and the script tells the noisy candidate from the correct one.)"""
    result = mutation_runs[mutant.group]
    cluster = _row_cluster(mutant, result)
    assert cluster and cluster.get("repro"), f"{mutant.label}: no repro for its finding: {cluster}"
    script = result.run_dir / cluster["repro"][0]
    baseline = servers(mutant.baseline_uri())
    attempts = str(_repro_attempts(script))
    # the correct engine on the row's pair with the row's engine settings (a KV pool, a prefill chunk)
    for uri, code, extra in ((mutant.uri(), 1, ("--attempts", attempts)), (mutant.control_uri(), 0,
                                                                          ("--attempts", attempts))):
        done = subprocess.run([sys.executable, str(script), "--candidate-url", servers(uri), "--baseline-url",
                               baseline, *extra], capture_output=True, text=True, timeout=900,
                              env={"PATH": os.environ.get("PATH", "")})
        assert done.returncode == code, f"{mutant.label}: {script.name} against {uri}:\n{done.stdout}{done.stderr}"


def test_mutation_reports_fit_their_limits(mutation_runs):
    """Each run's summary.md under 20,000 characters and its issue files under 60,000, each quoting its repro
    whole; the same for one report pooling the findings of every run (every cluster kind the table produces)."""
    problems = [p for result in mutation_runs.values() if result.run_dir for p in run_folder_problems(result.run_dir)]
    assert not problems, "\n".join(problems)
    pooled = pooled_report_problems([r.run_dir for r in mutation_runs.values() if r.run_dir], min_findings=50)
    assert not pooled, "\n".join(pooled)
