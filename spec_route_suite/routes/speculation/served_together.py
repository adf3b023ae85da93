"""A lower bound on the requests an engine served together in a window, from its cumulative busy-slot counters.

Why: the stressors ask the engine's own gauge whether requests shared engine steps (stressors/coverage.py). A
gauge read every 0.1 s misses a load shorter than that: 64 greedy requests to pair 3's tiny target on llama.cpp
finished between two readings, and the coverage row said the engine never served two together. llama.cpp counts
every decode call and the slots busy in it (`n_decode_total`, and `n_busy_slots_per_decode`, the mean over its
lifetime): the busy slot-decodes of a window divided by its decodes is the mean number of requests served per
step, and when that mean exceeds 1 some step served at least ceil(mean) requests. Nothing is sampled, so no load
is too short. The counters are printed with a few significant digits, so each reading carries its rounding
error and the bound is taken at the unfavourable end. Like every server-side gauge the counters are server-wide:
other clients' requests count too. Environment: none.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation


@dataclass(frozen=True)
class BusyCounters:
    """Cumulative decode calls and busy slot-decodes (slots busy, summed over the calls), each with its error."""

    decodes: float
    busy: float
    decodes_err: float = 0.0
    busy_err: float = 0.0


def printed(text: str) -> tuple[float, float] | None:
    """A number as printed ("1.09525", "1.23457e+06") and half a unit of its last printed digit."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    return float(value), 0.5 * 10.0 ** value.as_tuple().exponent


def busy_from_mean(decodes_text: str | None, mean_text: str | None) -> BusyCounters | None:
    """BusyCounters from a decode count and a mean busy slots per decode, both as printed (None: either absent)."""
    if decodes_text is None or mean_text is None:
        return None
    decodes, mean = printed(decodes_text), printed(mean_text)
    if decodes is None or mean is None:
        return None
    (n, n_err), (m, m_err) = decodes, mean
    n_err = 0.0 if n_err <= 0.5 else n_err   # a count printed down to its units is exact
    return BusyCounters(decodes=n, busy=m * n, decodes_err=n_err, busy_err=m * n_err + n * m_err + m_err * n_err)


def metric_text(metrics_text: str, name: str) -> str | None:
    """The value of an unlabelled sample `name` exactly as the server printed it; None when absent."""
    found = re.search(rf"^{re.escape(name)}\s+(\S+)\s*$", metrics_text, flags=re.MULTILINE)
    return found.group(1) if found else None


def peak_lower_bound(before: BusyCounters | None, after: BusyCounters | None) -> int | None:
    """The fewest requests the busiest step of the window (before, after] must have served; None when the window
    cannot say (no counters, no decode in it, or a mean not provably above one)."""
    if before is None or after is None:
        return None
    decodes = after.decodes - before.decodes + after.decodes_err + before.decodes_err   # at most
    busy = after.busy - before.busy - after.busy_err - before.busy_err                  # at least
    if decodes <= 0 or busy <= decodes:
        return None
    return math.ceil(busy / decodes)
