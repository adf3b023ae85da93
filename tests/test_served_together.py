"""The lower bound on requests served together from cumulative busy-slot counters (routes/speculation/served_together.py).

The bound must never claim two together for a window of one-at-a-time steps, however the counters were rounded
when printed, and must see a batched window whatever its length; the live proof against llama.cpp is
tests/test_llama_cpp.py::test_a_load_shorter_than_one_gauge_reading_is_seen_by_the_busy_slot_counters.
"""
from __future__ import annotations

from spec_route_suite.routes.flavours.llama_cpp import LlamaCpp
from spec_route_suite.routes.speculation.served_together import busy_from_mean, peak_lower_bound, printed


def _metrics(decodes: float, busy: float) -> str:
    """llama.cpp's two lines as its ostream prints doubles: six significant digits."""
    return (f"# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total {decodes:.6g}\n"
            f"llamacpp:requests_processing 0\nllamacpp:n_busy_slots_per_decode {busy / max(decodes, 1):.6g}\n")


def _window(before: tuple[int, int], after: tuple[int, int]) -> int | None:
    flavour = LlamaCpp()
    return peak_lower_bound(flavour.busy_counters(_metrics(*before)), flavour.busy_counters(_metrics(*after)))


def test_the_printed_precision_is_the_error():
    assert printed("1.09525") == (1.09525, 0.5e-5)
    assert printed("1.23457e+06") == (1234570.0, 5.0)
    assert printed("6488") == (6488.0, 0.5)
    assert printed("nan") is None and printed("x") is None


def test_one_at_a_time_never_reads_as_two_together_at_any_scale():
    """Serial steps add busy == decodes; after millions of steps the rounding is larger than a short window."""
    for start in (0, 6_488, 1_234_567, 987_654_321):
        mixed = start + start // 7   # earlier traffic that did batch: a mean above one before the window
        assert _window((start, mixed), (start + 40, mixed + 40)) is None
        assert _window((start, mixed), (start + 5_000, mixed + 5_000)) is None


def test_a_batched_window_is_seen_however_short():
    assert _window((6_488, 7_106), (6_536, 7_106 + 48 * 4)) == 4          # 48 steps of four requests each
    assert _window((6_488, 7_106), (6_536, 7_106 + 48 + 24)) == 2         # half the steps served two
    assert _window((0, 0), (10, 31)) == 4        # mean printed "3.1" (+-0.05): above 3, so some step served four


def test_a_window_too_small_for_the_rounding_says_nothing():
    """Against a server that ran for a billion steps a few batched steps are inside the counters' rounding."""
    assert _window((1_000_000_000, 1_100_000_000), (1_000_000_010, 1_100_000_030)) is None


def test_a_server_without_the_counters_states_none():
    assert LlamaCpp().busy_counters("llamacpp:requests_processing 3\n") is None
    assert busy_from_mean("12", "not-a-number") is None
