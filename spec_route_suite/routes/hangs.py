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
The board also keeps a route's first server error after which it still answered /health (ServerError): a death
found within DYING_WINDOW_S of it, by a request that never reached the server, is named at that error's request
(vLLM's EngineCore dies with an HTTP 500 and its server exits later). Every mark carries its request, so the test
that finds a death, in any worker, can resend it to the baseline as the control and word its repro.
The board lives in a JSON file in the run's shared temp dir (like the A/A calibration cache), guarded by a lock
file; without a file (a single process, the self-tests) it lives in memory. Environment: none.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from filelock import FileLock

from spec_route_suite.routes.base import Request, ResponseFormat

RECHECK_S = 60.0          # a hung route is probed for recovery at most this often (first: this long after the mark)
DYING_WINDOW_S = 300.0    # a server error this recent before a route's death is where the death is named
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
    request_id: str = ""     # the request it died on (hung: the request that went unanswered)
    found_at: str = ""       # the request that found it dead, when that is not where it died
    request: dict | None = None   # the request it died on (request_to_dict), for the repro and the control
    began: str = ""          # found dead later: the server error it died with ("kind: message")
    began_in: str = ""       # ... and where it gave it (test, clock time)

    def describe(self) -> str:
        since = f"{self.since_test}, {clock(self.at)}" if self.since_test else clock(self.at)
        if self.died and self.found_at:
            return (f"route '{self.route}' died at request {self.request_id} ({self.began_in}: {self.began}); "
                    f"found dead at request {self.found_at} ({since}: {self.why})")
        if self.died:
            return f"route '{self.route}' died at request {self.request_id or '?'} ({since}: {self.why})"
        return f"route '{self.route}' hung since {since} ({self.why})"

    def found_by(self, request_id: str) -> bool:
        """Was the death found by `request_id` (where it died, or the later request that found it)?"""
        return request_id in {self.request_id, self.found_at} - {""}

    def the_request(self) -> Request | None:
        return request_from_dict(self.request) if self.request else None

    @property
    def skip_reason(self) -> str:
        """What a later test reads: a dead route's checks did not run, a hung route's could not verify."""
        return f"{'not run' if self.died else 'not verified'}: {self.describe()}"


@dataclass(frozen=True)
class ServerError:
    """A failure that may kill a route (a 5xx, a lost connection) after which the route still answered its health
    check: the first one stays on the board for DYING_WINDOW_S, so a death found later is named where it began (vLLM's
    engine core dies with an HTTP 500; the server goes on answering /health until it exits, and the request that
    finds it dead never reached it)."""

    route: str
    test: str
    at: float
    request_id: str
    why: str
    request: dict | None = None


def request_to_dict(req: Request) -> dict[str, Any]:
    """A Request as JSON-able values (the board's file carries it between workers)."""
    return asdict(req)


def request_from_dict(data: dict[str, Any]) -> Request:
    """The inverse of request_to_dict: lists back to tuples, response_format back to its type."""
    def tupled(value):
        return tuple(tupled(v) for v in value) if isinstance(value, list) else value
    known = {f.name for f in fields(Request)}
    values = {k: tupled(v) for k, v in data.items() if k in known}
    if isinstance(data.get("response_format"), dict):
        values["response_format"] = ResponseFormat(**data["response_format"])
    return Request(**values)


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
        self._errors: dict[str, ServerError] = {}   # read with the board, written back with it
        self._seen: tuple[int, dict[str, Hang]] | None = None   # (mtime_ns, parsed) of the file

    def hung(self, route: str) -> Hang | None:
        return self._read().get(route)

    def mark(self, route: str, *, why: str, died: bool = False, request_id: str = "",
             request: Request | None = None) -> Hang:
        """Mark `route` hung, or dead at `request_id` (the first mark stands: it says since when). A death found
        within DYING_WINDOW_S of a server error the route gave while it still answered is named at that error's
        request (the request that found it is kept as `found_at`)."""
        def change(board: dict[str, Hang]) -> Hang:
            now = time.time()
            if route in board:
                return board[route]
            hang = Hang(route, current_test(), now, why, last_probe=now, died=died, request_id=request_id,
                        request=request_to_dict(request) if request is not None else None)
            began = self._errors.get(route)
            if died and began is not None and now - began.at <= DYING_WINDOW_S and began.request_id != request_id:
                hang = replace(hang, request_id=began.request_id, found_at=request_id, request=began.request,
                               began=began.why, began_in=f"{began.test}, {clock(began.at)}")
            board[route] = hang
            return hang
        return self._update(change)

    def server_error(self, route: str, *, request_id: str, why: str, request: Request | None = None) -> None:
        """A failure that may kill a route, after which it still answered: kept (the first in DYING_WINDOW_S) to
        name a death found later."""
        def change(board: dict[str, Hang]) -> None:
            now = time.time()
            kept = self._errors.get(route)
            if kept is None or now - kept.at > DYING_WINDOW_S:
                self._errors[route] = ServerError(route, current_test(), now, request_id, why,
                                                  request_to_dict(request) if request is not None else None)
        self._update(change)

    def answered(self, route: str) -> None:
        """The route answered a request: a server error kept for it did not kill it (it is forgotten)."""
        self._read()
        if route in self._errors:
            self._update(lambda board: self._errors.pop(route, None))

    def mark_dead(self, route: str, *, why: str) -> Hang | None:
        """A hung route confirmed dead (still silent after its baseline answered the same request): no request is
        sent to it again. None when it is not marked hung (it answered meanwhile)."""
        def change(board: dict[str, Hang]) -> Hang | None:
            hang = board.get(route)
            if hang is None:
                return None
            board[route] = replace(hang, died=True, why=why)
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
        """The file's hangs (and, kept aside, its server errors)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        self._errors = {name: ServerError(**kept) for name, kept in data.get("server_errors", {}).items()}
        return {name: Hang(**kept) for name, kept in data.get("hangs", {}).items()}

    def _update(self, change):
        if self.path is None:
            return change(self._memory)
        with self._lock:
            board = self._parse() if self.path.exists() else {}
            if not self.path.exists():
                self._errors = {}
            result = change(board)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"hangs": {name: asdict(h) for name, h in board.items()},
                                       "server_errors": {name: asdict(e) for name, e in self._errors.items()}}))
            tmp.replace(self.path)
            self._seen = None
        return result
