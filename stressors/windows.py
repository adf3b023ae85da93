"""A load finding's repro: the requests that were in flight with the one that changed, as a replayable schedule.

Why: "3 of 640 outputs changed under load" cannot be replayed; the failing request and its company can. The
window is the victim and every request whose time in flight overlapped it (at most WINDOW, nearest first),
with their original arrival gaps and hang-ups: the shrunk schedule of the stressors that have no shrinker
of their own (stressors/mixing/verdict.py shrinks its window further). The repro script sends each request
alone, then the window concurrently, and compares (reports/repro_judges.py, judge "load").
Environment: none.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from spec_route_suite.reports.repro_spec import LOAD_ATTEMPTS, load_repro
from spec_route_suite.stressors.driver import LoadRun, Submission

WINDOW = 12
WHOLE_ATTEMPTS = 20  # passes of a whole burst (each resends every request in flight): whether a replay overflows
# the KV pool again depends on timing. A self-test run on a busy machine saw a `preempt_loses_draft_state` window
# unchanged in 5 passes; on an idle one, 12 replays of a window changed on pass 1 (9) or 2 (3). A CI run saw one
# unchanged in 20: the script had cut its 15 requests to the last 8 to fit its size budget, and those no longer
# overflowed the pool. Scripts now carry only their judge (reports/judge_source.py) and keep the whole window:
# 5 replays of a 15-request window on a machine with two CPU hogs changed on pass 1 (5)


def window_steps(run: LoadRun, submissions: Sequence[Submission], victim: str,
                 limit: int | None = WINDOW) -> list[tuple[Any, float, float | None]]:
    """(request, gap in ms before it, hang-up after ms or None) of the requests in flight with `victim`."""
    requests = {s.request.request_id: s.request for s in submissions}
    by_id = run.by_id()
    center = by_id[victim]
    company = [o for o in run.outcomes if o.request_id in requests and (o is center or o.overlaps(center))]
    company = sorted(company, key=lambda o: abs(o.started_s - center.started_s))[:limit]
    company.sort(key=lambda o: o.started_s)
    steps, previous = [], company[0].started_s
    for n, outcome in enumerate(company):
        abort = round((outcome.ended_s - outcome.started_s) * 1000) if outcome.aborted else None
        request = replace(requests[outcome.request_id], request_id=f"repro-{n}", timeout_s=None,
                          stream=requests[outcome.request_id].stream and abort is not None)
        steps.append((request, round((outcome.started_s - previous) * 1000), abort))
        previous = outcome.started_s
    return steps


def window_repro(run: LoadRun, submissions: Sequence[Submission], victim: str, *, candidate, baseline,
                 note: str = "", limit: int | None = WINDOW, attempts: int = LOAD_ATTEMPTS) -> dict[str, Any] | None:
    """The load repro block of `victim`'s window, at most `limit` requests (None: all in flight with it), replayed up
    to `attempts` times; `note` leads the description of the window. None when the victim is not in the run."""
    if victim not in run.by_id():
        return None
    steps = window_steps(run, submissions, victim, limit=limit)
    company = f"the {len(steps)} requests in flight with {victim} at concurrency {run.concurrency}"
    return load_repro(steps, candidate=candidate, baseline=baseline, concurrency=min(run.concurrency, len(steps)),
                      attempts=attempts, note=f"{note}: {company}" if note else company)


class LoadRuns:
    """The load runs of one stressor test with their submissions, so any finding can cut its repro window."""

    def __init__(self, *, candidate, baseline):
        self.candidate, self.baseline = candidate, baseline
        self.runs: list[tuple[LoadRun, Sequence[Submission]]] = []

    def add(self, run: LoadRun, submissions: Sequence[Submission]) -> LoadRun:
        self.runs.append((run, submissions))
        return run

    def repro(self, victim: str, note: str = "", *, limit: int | None = WINDOW,
              attempts: int = LOAD_ATTEMPTS) -> dict[str, Any] | None:
        """The window around request `victim` (a request id of any run), None when no run holds it."""
        for run, submissions in self.runs:
            if victim in run.by_id():
                return window_repro(run, submissions, victim, candidate=self.candidate, baseline=self.baseline,
                                    note=note, limit=limit, attempts=attempts)
        return None

    def whole(self, victim: str, note: str) -> dict[str, Any] | None:
        """Every request in flight with `victim`, however many: a failure that needs the whole offered load (a KV
        pool overflowing, so requests are preempted) does not show in a window of WINDOW."""
        return self.repro(victim, note, limit=None, attempts=WHOLE_ATTEMPTS)

    def failed(self, run: LoadRun) -> dict[str, Any] | None:
        """The window around the run's first failed request."""
        failed = sorted(run.failed, key=lambda o: o.ended_s)
        return self.repro(failed[0].request_id) if failed else None
