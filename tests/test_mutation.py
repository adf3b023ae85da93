"""Mutation score: the route suite passes the correct reference engine and catches each planted fault.

One subprocess runs the correct engine through every catcher family at the shared budget
(mutation.COMMON_ARGS); then one subprocess per family runs all the faults meant for it as
named candidates of one routes file, two subprocesses at a time. A fault whose catcher the
route suite does not have yet is an expected failure naming the issue that adds it.
`pytest tests -k mutation -s` prints the table (fault, expected catcher, caught?, requests).
The distribution rows run each statistical fault on the grid point where it acts, at TV 0.1
over 14 prompts per category (tests/mutation.py DISTRIBUTION_ARGS; a few minutes on 2 cores);
the correct engine runs the distribution check at the shared budget, and the check's own
false-alarm rate is measured in tests/test_stats_calibration.py and tests/test_stats_routes.py.
Environment: none.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from filelock import FileLock

from tests.mutation import (COMMON_ARGS, MUTANTS, NOISY_SEEDS, Mutant, Row, SuiteResult, catcher_paths,
                            format_table, missing_reason, other_catchers, run_route_suite, verdict_for)

FAMILY_ARGS: dict[str, tuple[str, ...]] = {}   # per-family suite options beyond COMMON_ARGS (rows carry their own)
TIMEOUT_S = 900
RUN_COST = {"distribution": 10, "mixing": 3, "greedy": 2}   # longest runs start first
NOISY_BASELINE = f"reference:?fault=logit_noise&seed={NOISY_SEEDS[0]}"


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
    return key if key == "correct" else [key[0], key[1], list(key[2])]


def _key(data):
    return data if data == "correct" else (data[0], data[1], tuple(data[2]))


def _run_all(tmp_path_factory, selected: set[Mutant], correct: bool) -> dict:
    every = _groups()
    jobs = {}
    if correct:
        correct_paths = sorted({p for (catcher, expect, _), ms in every.items() if expect == "caught"
                                for p in catcher_paths(ms[0])})
        extra = [a for catcher in sorted({c for (c, _, _) in every}) for a in FAMILY_ARGS.get(catcher, ())]
        jobs["correct"] = dict(candidate_uri={"correct": "reference:"}, extra_args=[*COMMON_ARGS, *extra],
                               paths=correct_paths)
    for (catcher, expect, row_args), ms in _groups(selected).items():
        args = [*COMMON_ARGS, *FAMILY_ARGS.get(catcher, ()), *row_args]
        job = dict(candidate_uri={m.route_name: m.uri() for m in ms}, extra_args=args, paths=catcher_paths(ms[0]))
        if expect == "near-tie":
            job.update(extra_args=[*args, "--greedy-policy", "classify"], baseline_uri=NOISY_BASELINE)
        jobs[(catcher, expect, row_args)] = job

    def run(key):
        name = "correct" if key == "correct" else f"{key[0]}-{key[1]}-{len(key[2])}"
        return key, run_route_suite(tmp_path=tmp_path_factory.mktemp(name), timeout_s=TIMEOUT_S, **jobs[key])

    order = sorted(jobs, key=lambda k: (k != "correct", -RUN_COST.get(k[0], 1) if k != "correct" else 0))
    with ThreadPoolExecutor(max_workers=2) as pool:  # two suite runs at a time: the 2-core budget
        return dict(pool.map(run, order))


def correct_status(result: SuiteResult | None) -> str:
    if result is None:
        return "not run"
    noisy = [f for f in result.findings if f.get("severity") != "info"]
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
            row.status = ("yes" if ok else "NO") if m.expect == "caught" else ("near-tie" if ok else "NO")
            row.also = other_catchers(m, result)
            row.requests = result.requests(m.route_name)
            row.seconds = result.duration_s
        rows.append(row)
    return rows


def test_mutation_correct_engine_passes_every_catcher(mutation_runs):
    result = mutation_runs["correct"]
    noisy = [(f["check"], f["severity"], f["title"][:160]) for f in result.findings if f.get("severity") != "info"]
    assert result.exit_code == 0 and not noisy, f"correct engine failed the route suite: {noisy}\n{result.describe()}"
    assert result.report.get("counts", {}).get("passed", 0) > 0, result.describe()


def _case(m: Mutant):
    marks = []
    if not catcher_paths(m):
        marks.append(pytest.mark.xfail(strict=True, reason=missing_reason(m)))
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
