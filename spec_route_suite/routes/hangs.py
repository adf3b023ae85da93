"""Which routes stopped answering, shared by every test and every xdist worker of a run.

A route is marked hung (a request timed out and neither /health nor a canary answered) or dead (a request failed,
connection lost, a server error or an engine that closed, and then nothing answered): a dead route gets no
request again, and every later test reads "not run: route ... died at request R".

Why: an engine can wedge for good (an older llama.cpp server after client disconnects: its HTTP threads held by
dead connections, /health unanswered). Found once, it must be named once; every later test that sends it load
would otherwise wait out a request timeout per request (a 4-minute run took 19.5 minutes). So the first test
that finds a route hung marks it here, with the test and the time; later tests, in this worker or another, ask
the board before sending anything: a route marked hung gets a bounded recovery probe (health and a canary
request) at most every RECHECK_S across the run, and otherwise the test reads "not verified: route hung since
<test, time>" (RouteHung, turned into that skip by the pytest wiring in fixtures/route_fixtures.py).
The board lives in a JSON file in the run's shared temp dir (like the A/A calibration cache), guarded by a lock
file; without a file (a single process, the self-tests) it lives in memory. Environment: none.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from filelock import FileLock

RECHECK_S = 60.0          # a hung route is probed for recovery at most this often (first: this long after the mark)
_current_test = ""        # the test this process runs now (set by the pytest wiring before each test)


def set_current_test(nodeid: str) -> None:
    global _current_test
    _current_test = nodeid


def current_test() -> str:
    return _current_test


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


@dataclass(frozen=True)
class Hang:
    """A route found hung: since which test and when, why, and the last recovery probe."""

    route: str
    since_test: str
    at: float
    why: str
    last_probe: float = 0.0
    probes: int = 0
    died: bool = False       # it failed a request and then answered nothing: no request is sent to it again
    request_id: str = ""     # the request it died on

    def describe(self) -> str:
        since = f"{self.since_test}, {clock(self.at)}" if self.since_test else clock(self.at)
        if self.died:
            return f"route '{self.route}' died at request {self.request_id or '?'} ({since}: {self.why})"
        return f"route '{self.route}' hung since {since} ({self.why})"

    @property
    def skip_reason(self) -> str:
        """What a later test reads: a dead route's checks did not run, a hung route's could not verify."""
        return f"{'not run' if self.died else 'not verified'}: {self.describe()}"


class RouteHung(Exception):
    """A route found hung (or dead) earlier in the run did not recover: the test is not verified (not run),
    never a finding. Deliberately not a RouteError, so no check's error handling turns it into a finding."""

    def __init__(self, hang: Hang, still: str = ""):
        super().__init__(hang.describe() + (f"; still not answering: {still}" if still else ""))
        self.hang = hang


class HangBoard:
    """The run's hung routes: in memory, or in `path` shared by the workers (a lock file beside it)."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self._lock = FileLock(str(path) + ".lock") if path is not None else None
        self._memory: dict[str, Hang] = {}
        self._seen: tuple[int, dict[str, Hang]] | None = None   # (mtime_ns, parsed) of the file

    def hung(self, route: str) -> Hang | None:
        return self._read().get(route)

    def mark(self, route: str, *, why: str, died: bool = False, request_id: str = "") -> Hang:
        """Mark `route` hung, or dead at `request_id` (the first mark stands: it says since when)."""
        def change(board: dict[str, Hang]) -> Hang:
            now = time.time()
            board.setdefault(route, Hang(route, current_test(), now, why, last_probe=now, died=died,
                                         request_id=request_id))
            return board[route]
        return self._update(change)

    def clear(self, route: str) -> None:
        self._update(lambda board: board.pop(route, None))

    def claim_probe(self, route: str, *, every_s: float = RECHECK_S) -> bool:
        """May this caller probe `route` for recovery now? True at most once per `every_s` across the run."""
        def change(board: dict[str, Hang]) -> bool:
            hang = board.get(route)
            now = time.time()
            if hang is None or hang.died or now - hang.last_probe < every_s:
                return False
            board[route] = replace(hang, last_probe=now, probes=hang.probes + 1)
            return True
        return self._update(change)

    def all(self) -> dict[str, Hang]:
        return dict(self._read())

    # ---------------------------------------------------------------- storage
    def _read(self) -> dict[str, Hang]:
        if self.path is None:
            return self._memory
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return {}
        if self._seen is None or self._seen[0] != mtime:
            self._seen = (mtime, self._parse())
        return self._seen[1]

    def _parse(self) -> dict[str, Hang]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {name: Hang(**fields) for name, fields in data.items()}

    def _update(self, change):
        if self.path is None:
            return change(self._memory)
        with self._lock:
            board = self._parse() if self.path.exists() else {}
            result = change(board)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({name: asdict(h) for name, h in board.items()}))
            tmp.replace(self.path)
            self._seen = None
        return result
