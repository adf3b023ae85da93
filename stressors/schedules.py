"""Load schedules as data: Hypothesis strategies that generate them, and a shrinker for failures found under load.

Why: "7 wrong of 100 at concurrency 8" is not a bug report an upstream maintainer can act
on; "these two prompts, sent together, mix" is. A Schedule is the whole load plan (which
prompts, arrival gaps, which clients hang up, the concurrency bound), so it can be
generated (Hypothesis strategies), replayed (stressors.replay) and shrunk. Hypothesis
shrinks its own failing examples (fewer steps, item 0, gap 0, no abort, concurrency 1
first). A failure found by the stressors' own load runs is shrunk by `shrink` (delta
debugging over steps, then simpler concurrency, aborts and gaps), because Hypothesis
cannot start from an example it did not generate. Every shrink is bounded in
evaluations and time. Environment: none.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

from hypothesis import strategies as st

from spec_route_suite.stressors.canary import Workload
from spec_route_suite.stressors.driver import LoadRun, Submission


@dataclass(frozen=True)
class Step:
    """One request of a schedule: pool item index, milliseconds after the previous arrival, optional hang-up."""

    item: int
    gap_ms: int = 0
    abort_ms: int | None = None


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Step, ...]
    concurrency: int

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")

    def __len__(self) -> int:
        return len(self.steps)

    def submissions(self, workload: Workload, *, max_tokens: int, tag: str, stream: bool = False) -> list[Submission]:
        """Requests with ids `tag-<n>-<key>`; aborting steps are streamed when the route streams."""
        out, at = [], 0.0
        for n, step in enumerate(self.steps):
            at += step.gap_ms / 1000.0
            item = workload.items[step.item % len(workload.items)]
            request = item.request(max_tokens=max_tokens, request_id=f"{tag}-{n}-{item.key}",
                                   stream=stream and step.abort_ms is not None)
            abort = step.abort_ms / 1000.0 if step.abort_ms is not None else None
            out.append(Submission(key=item.key, request=request, at_s=at, abort_after_s=abort))
        return out

    def describe(self, workload: Workload | None = None) -> str:
        def name(i: int) -> str:
            return workload.items[i % len(workload.items)].key if workload else f"#{i}"
        parts = [f"+{s.gap_ms}ms {name(s.item)}" + (f" (hang up at {s.abort_ms}ms)" if s.abort_ms is not None else "")
                 for s in self.steps]
        return f"concurrency {self.concurrency}: " + ", ".join(parts)

    def to_json(self) -> str:
        return json.dumps({"concurrency": self.concurrency, "steps": [asdict(s) for s in self.steps]})

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        data = json.loads(text)
        return cls(steps=tuple(Step(**s) for s in data["steps"]), concurrency=data["concurrency"])


# ---------------------------------------------------------------- strategies
def steps(*, pool_size: int, max_gap_ms: int = 50, aborts: bool = True,
          abort_ms: tuple[int, int] = (1, 200)) -> st.SearchStrategy[Step]:
    abort = st.none() | st.integers(*abort_ms) if aborts else st.none()
    return st.builds(Step, item=st.integers(0, pool_size - 1), gap_ms=st.integers(0, max_gap_ms), abort_ms=abort)


def schedules(*, pool_size: int, max_steps: int = 12, max_concurrency: int = 8, max_gap_ms: int = 50,
              aborts: bool = True) -> st.SearchStrategy[Schedule]:
    """Arrival order, batch mix and hang-ups; shrinks toward one request, item 0, no gap, no abort, concurrency 1."""
    return st.builds(Schedule,
                     steps=st.lists(steps(pool_size=pool_size, max_gap_ms=max_gap_ms, aborts=aborts),
                                    min_size=1, max_size=max_steps).map(tuple),
                     concurrency=st.integers(1, max_concurrency))


def batch_mixes(*, pool_size: int, max_batch: int = 8) -> st.SearchStrategy[tuple[int, ...]]:
    """A set of distinct pool items sent together (a burst): the batch composition a needle shares."""
    return st.lists(st.integers(0, pool_size - 1), min_size=1, max_size=max_batch, unique=True).map(tuple)


# ---------------------------------------------------------------- from a load run
def window_schedule(run: LoadRun, *, victim_request: str, workload: Workload) -> Schedule:
    """The requests that overlapped `victim_request` in time, as a schedule with their original gaps."""
    by_id = run.by_id()
    victim = by_id[victim_request]
    index = {key: i for i, key in enumerate(workload.keys)}
    window = sorted((o for o in run.outcomes if o.overlaps(victim) or o is victim), key=lambda o: o.started_s)
    out, previous = [], window[0].started_s
    for outcome in window:
        abort = round((outcome.ended_s - outcome.started_s) * 1000) if outcome.aborted else None
        out.append(Step(item=index[outcome.key], gap_ms=round((outcome.started_s - previous) * 1000), abort_ms=abort))
        previous = outcome.started_s
    return Schedule(steps=tuple(out), concurrency=min(run.concurrency, len(out)))


# ---------------------------------------------------------------- shrinking
@dataclass(frozen=True)
class Shrunk:
    schedule: Schedule
    original: Schedule
    evaluations: int
    reproduced: bool
    seconds: float
    exhausted: str = ""

    def describe(self) -> str:
        if not self.reproduced:
            return (f"failure not reproduced by its {len(self.original)}-request window within {self.evaluations} "
                    f"replays ({self.seconds:.0f}s); the repro replays the window in a loop")
        return (f"shrunk from {len(self.original)} to {len(self.schedule)} requests in {self.evaluations} replays "
                f"({self.seconds:.0f}s){'; stopped: ' + self.exhausted if self.exhausted else ''}")


def shrink(schedule: Schedule, fails: Callable[[Schedule], bool], *, max_evaluations: int = 64,
           deadline_s: float = 60.0) -> Shrunk:
    """Smallest schedule found that still `fails`: ddmin over steps, then concurrency, aborts and gaps simplified.

    `fails` may be probabilistic (it should replay a few times itself); the first call checks the
    original reproduces at all, and a schedule is only replaced by one that failed.
    """
    start = time.monotonic()
    evaluations = 0
    exhausted = ""

    def check(candidate: Schedule) -> bool:
        nonlocal evaluations, exhausted
        if evaluations >= max_evaluations:
            exhausted = exhausted or f"{max_evaluations} evaluations"
            return False
        if time.monotonic() - start > deadline_s:
            exhausted = exhausted or f"{deadline_s:.0f}s"
            return False
        evaluations += 1
        return fails(candidate)

    if not check(schedule):
        return Shrunk(schedule, schedule, evaluations, False, time.monotonic() - start, exhausted)
    current = schedule
    granularity = 2
    while len(current.steps) >= 2 and not exhausted:
        chunks = _split(current.steps, granularity)
        reduced = False
        for i in range(len(chunks)):
            complement = tuple(s for j, c in enumerate(chunks) if j != i for s in c)
            candidate = _with_steps(current, complement)
            if complement and check(candidate):
                current, granularity, reduced = candidate, max(granularity - 1, 2), True
                break
        if not reduced:
            if granularity >= len(current.steps):
                break
            granularity = min(len(current.steps), granularity * 2)
    current = _simplify(current, check)
    return Shrunk(current, schedule, evaluations, True, time.monotonic() - start, exhausted)


def _split(items: Sequence[Step], n: int) -> list[tuple[Step, ...]]:
    size, rest = divmod(len(items), n)
    out, at = [], 0
    for i in range(n):
        width = size + (1 if i < rest else 0)
        out.append(tuple(items[at:at + width]))
        at += width
    return [c for c in out if c]


def _with_steps(schedule: Schedule, new_steps: tuple[Step, ...]) -> Schedule:
    return Schedule(steps=new_steps, concurrency=max(1, min(schedule.concurrency, len(new_steps))))


def _simplify(schedule: Schedule, check: Callable[[Schedule], bool]) -> Schedule:
    """Lowest failing concurrency, then each hang-up dropped, then gaps zeroed; each kept only if it still fails."""
    current = schedule
    for c in range(1, current.concurrency):
        candidate = replace(current, concurrency=c)
        if check(candidate):
            current = candidate
            break
    for i, step in enumerate(current.steps):
        if step.abort_ms is not None:
            candidate = _replace_step(current, i, replace(step, abort_ms=None))
            if check(candidate):
                current = candidate
    if any(s.gap_ms for s in current.steps):
        candidate = replace(current, steps=tuple(replace(s, gap_ms=0) for s in current.steps))
        if check(candidate):
            current = candidate
    return current


def _replace_step(schedule: Schedule, i: int, step: Step) -> Schedule:
    return replace(schedule, steps=schedule.steps[:i] + (step,) + schedule.steps[i + 1:])
