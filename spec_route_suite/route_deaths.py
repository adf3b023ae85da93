"""A route that failed, died or wedged in a test, as the one finding that names the request.

The pytest wiring (plugin.py) hands each test's route failures here. A failure is the route error it is, with a
repro that resends the request to both routes. A candidate that died (a failure, then /health and a canary
unanswered) or wedged (a request unanswered, then /health and a canary unanswered, still after its baseline answered
the same request) is a bug: one finding naming the request, the baseline's answer to it as the control, and every
later test on that route reads "not run" (spec_route_suite/routes/hangs.py). Where the baseline fails it too, or it
is the baseline that stopped, it stays a route error, or a hang later tests wait out in bounded probes.
"""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

from spec_route_suite.reports.findings import Finding
from spec_route_suite.routes.errors import RouteDied, RouteError, RouteTimeout
from spec_route_suite.routes.hangs import RouteHung, clock
from spec_route_suite.stash import CONFIG_KEY, ROUTE_SESSION_KEY


def failure_finding(item: pytest.Item, error: RouteError | RouteDied, *, check: str, phase: str) -> Finding:
    """A route failure a test raised: the death it was, or the route error, each with its repro. The error is
    stamped with the test, so a session fixture's failure that pytest raises again in a later test's set-up is
    that test's "not verified" (fixtures/route_fixtures.py), not a second finding."""
    error.recorded_in = item.nodeid
    repro = error_repro(item, error)
    extra = {"phase": phase, **({"repro": repro} if repro else {})}
    if isinstance(error, RouteDied):
        return death_finding(item, error, check=check, **extra)
    return Finding.from_route_error(error, check=check, **extra)


def death_finding(item: pytest.Item, error: RouteDied, *, check: str, **details) -> Finding:
    """A candidate that died on a request the baseline serves: one bug finding naming that request (every later
    check on it reads "not run"). The baseline answers the same request first, as the control; where it fails
    too, or where the baseline itself died, it is the route error it is."""
    request, session = getattr(error, "request", None), item.config.stash.get(ROUTE_SESSION_KEY, None)
    baseline = item.config.stash[CONFIG_KEY].routes.baseline.name
    control = "the baseline was not asked"
    if session is not None and error.route != baseline and baseline in session.specs:
        handle = session.handle(baseline)
        if request is None:   # a call that carried no plain request: the baseline's own liveness is the control
            if not handle.silent():
                return Finding.from_route_death(error, check=check, control="the baseline still answers", **details)
            control = "the baseline stopped answering too"
        else:
            failed = baseline_fails(handle, request)
            if failed is None:
                return Finding.from_route_death(error, check=check, control="the baseline answers the same request",
                                                **details)
            control = f"the baseline fails it too ({failed})"
    return replace(Finding.from_route_error(error, check=check, **details),
                   title=f"{error.describe()[:250]}; {control}")


def wedge_findings(item: pytest.Item, *, check: str, phase: str) -> list[Finding]:
    """The candidates this test found wedged (marked hung at a request) whose baseline answers that request while
    they stay silent: each is marked dead and becomes one bug finding. A wedge on the baseline too (an engine that
    hangs with or without speculation, the aborts stressor's engine finding), a wedge with no request to resend, or
    a route that answers again stays what it was."""
    session = item.config.stash.get(ROUTE_SESSION_KEY, None)
    if session is None:
        return []
    baseline = item.config.stash[CONFIG_KEY].routes.baseline.name
    board = session.hangs
    marks = board.all()
    if baseline in marks and marks[baseline].since_test == item.nodeid:
        return []
    found = []
    for name, hang in marks.items():
        request = hang.the_request()
        if hang.died or hang.since_test != item.nodeid or name == baseline or name not in session.specs \
                or request is None or baseline not in session.specs:
            continue
        if baseline_fails(session.handle(baseline), request) is not None:
            continue   # the baseline cannot serve it either: not the candidate's alone
        candidate = session.handle(name)
        still = candidate.silent()
        if not still:
            board.clear(name)
            candidate.note(f"{hang.describe()}; answered again at {clock(time.time())} (health or a canary request)")
            continue
        dead = board.mark_dead(name, why=f"{hang.why}; still unanswered after the baseline answered the same "
                                         f"request ({still})")
        if dead is None:
            continue
        error = candidate.death(dead, RouteTimeout(hang.why, route=name, request_id=hang.request_id), request)
        candidate.note(f"{dead.describe()}: no request is sent to it again; later tests read 'not run'")
        repro = error_repro(item, error)
        found.append(Finding.from_route_death(error, check=check, control="the baseline answers the same request",
                                              phase=phase, **({"repro": repro} if repro else {})))
    return found


def baseline_fails(baseline, request) -> str | None:
    """The control: the baseline answers the request the candidate died or wedged on (None), or why it fails too."""
    try:
        baseline.generate(replace(request, request_id=f"{request.request_id}-control"))
    except (RouteError, RouteHung, RouteDied) as exc:
        return str(exc)[:200]
    return None


def error_repro(item: pytest.Item, error: RouteError | RouteDied) -> dict | None:
    """The failed request resent to the route that failed it, with the test's other route as the control."""
    request, session = getattr(error, "request", None), item.config.stash.get(ROUTE_SESSION_KEY, None)
    if request is None or session is None or error.route not in session.specs:
        return None
    baseline = item.config.stash[CONFIG_KEY].routes.baseline.name
    callspec = getattr(item, "callspec", None)
    other = baseline if error.route != baseline else (callspec.params.get("candidate") if callspec else None)
    if other not in session.specs:
        return None
    from spec_route_suite.reports.repro_spec import error_repro as worded
    try:
        return worded(request, candidate=session.handle(error.route), baseline=session.handle(other))
    except Exception:  # noqa: BLE001 - a repro that cannot be worded must not hide the route error itself
        return None

