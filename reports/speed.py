"""The speed gate in the report: per candidate, the speedup over its baseline at each load, as a table and a line.

The numbers come from the route suite's `speed` measurements (stressors/speed/gate.py: the same streamed workload
through the load driver on both routes at each concurrency level). Reported beside the verdict, never part
of it; the machine's load average stands beside every level because a shared CPU bends every number. Each
quantity's unit is stated once here (Quantity): summary.md's table and report.html's charts both read it, so a
latency is in ms in both.
Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Quantity:
    """A speed-row field as the summary and the dashboard show it: one unit per quantity in both (latencies in
    ms, though the rows record seconds)."""
    label: str
    unit: str
    scale: float = 1.0   # from the row's unit to the shown one

    def shown(self, value: Any) -> float | None:
        return value * self.scale if isinstance(value, (int, float)) else None


LATENCY = Quantity("latency", "ms", 1000.0)
TTFT_P50 = Quantity("time to first token, p50", LATENCY.unit, LATENCY.scale)
DECODE = Quantity("decode speed", "tok/s")
THROUGHPUT_SPEEDUP = Quantity("throughput speedup over the baseline", "x")
CHARTED = {"ttft_p50_s": TTFT_P50, "decode_tok_s": DECODE}   # the per-level quantities report.html plots

COLUMNS = ("c", f"TTFT p50 / p95 ({LATENCY.unit})", f"ITL p50 / p95 ({LATENCY.unit})", f"decode {DECODE.unit}",
           "throughput tok/s", "acceptance length", "speedup", "load avg")


def speed_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The speed measurements, one per candidate (the last when a candidate was measured twice)."""
    by_candidate: dict[str, dict[str, Any]] = {}
    for measurement in (report.get("measurements") or {}).get("speed", []):
        by_candidate[measurement.get("candidate", "?")] = measurement
    return list(by_candidate.values())


def _ms(value) -> str:
    shown = LATENCY.shown(value)
    return f"{shown:.0f}" if shown is not None else "n/a"


def _num(value) -> str:
    return f"{value:.0f}" if isinstance(value, (int, float)) else "n/a"


def _x(value) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) else "n/a"


def shape(measurement: dict[str, Any]) -> str:
    """"3.40x at c=1 fading to 1.20x at c=32" (throughput speedup from the lowest to the highest level)."""
    ups = [u for u in measurement.get("speedup", []) if isinstance(u.get("throughput_x"), (int, float))]
    if not ups:
        return "no speedup measured"
    first, last = ups[0], ups[-1]
    if first is last:
        return f"{_x(first['throughput_x'])} throughput at c={first['concurrency']}"
    trend = ("growing to" if last["throughput_x"] > first["throughput_x"] * 1.1 else
             "fading to" if last["throughput_x"] < first["throughput_x"] / 1.1 else "holding at")
    return (f"{_x(first['throughput_x'])} throughput at c={first['concurrency']} {trend} {_x(last['throughput_x'])} at "
            f"c={last['concurrency']}")


def _decode(row: dict[str, Any]) -> str:
    """Decode tokens/s, saying how many answers streamed at once (their rate is the whole answer's)."""
    buffered = row.get("buffered") or 0
    return _num(row.get("decode_tok_s")) + (f" ({buffered} of {row.get('streamed')} streams came at once)"
                                            if buffered else "")


def _acceptance(row: dict[str, Any]) -> str:
    """Mean acceptance length of the level's answers (their own counters), or why there is none."""
    value = row.get("acceptance_length")
    return f"{value:.2f} ({row.get('acceptance_answers')} answers)" if isinstance(value, (int, float)) else "-"


def load_text(row: dict[str, Any]) -> str:
    """The machine's 1-minute load average before and after a level: "1.5-1.6"."""
    return "-".join(f"{x:g}" for x in row.get("load_avg_1m") or []) or "n/a"


def table_rows(measurement: dict[str, Any]) -> list[tuple[str, ...]]:
    """The speed table's cells (COLUMNS): one row per level and route (baseline, then candidate with its speedup)."""
    ups = {u["concurrency"]: u for u in measurement.get("speedup", [])}
    rows = measurement.get("rows") or {}
    cells = []
    for base, cand in zip(rows.get("baseline", []), rows.get("candidate", [])):
        up = ups.get(cand["concurrency"], {})
        for label, row in ((f"{base['concurrency']} baseline", base), (f"{cand['concurrency']} candidate", cand)):
            speedup = (f"throughput {_x(up.get('throughput_x'))}, decode {_x(up.get('decode_x'))}, "
                       f"TTFT {_x(up.get('ttft_x'))}") if row is cand else ""
            cells.append((label, f"{_ms(row.get('ttft_p50_s'))} / {_ms(row.get('ttft_p95_s'))}",
                          f"{_ms(row.get('itl_p50_s'))} / {_ms(row.get('itl_p95_s'))}", _decode(row),
                          _num(row.get("throughput_tok_s")), _acceptance(row), speedup,
                          load_text(row)))
    return cells


def speed_table(measurement: dict[str, Any]) -> list[str]:
    """Markdown: the table_rows under COLUMNS."""
    return ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS),
            *("| " + " | ".join(row) + " |" for row in table_rows(measurement))]


def speed_section(report: dict[str, Any]) -> list[str]:
    """summary.md's speed gate: a line per candidate, then its table."""
    measurements = speed_rows(report)
    if not measurements:
        return []
    lines = ["", "## Speed gate (measured, not judged)", "",
             "The same streamed greedy workload on both routes at each concurrency level (TTFT: time to first "
             "token, ITL: inter-token latency, decode: tokens/s of one request after its first token (of the whole answer "
             "for a stream whose pieces came at once), throughput: "
             "output tokens/s of the level; speedup: candidate over baseline). The 1-minute load average before and "
             "after each level says how shared the CPU was.", ""]
    for m in measurements:
        lines += [f"**`{m['candidate']}`** vs `{m.get('baseline')}`: {shape(m)} "
                  f"({m.get('prompts')} prompts x {m.get('max_tokens')} tokens per request).", "",
                  *speed_table(m), ""]
    return lines
