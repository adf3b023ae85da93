"""Self-tests of live progress: bounded plain lines for CI logs, a status line that fits, and workers'
progress reaching the xdist controller through the load driver's own request path."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from spec_route_suite.progress import PlainLines, ProgressSettings, Seen, StatusLine

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"(\d+)/(\d+) requests \((\d+)%\), ([\d.]+)/s, ETA (\S+)")


def seen(done: int, *, planned: int = 6000, started: float = 0.0, now: float, ended: float | None = None,
         worker: str = "gw0", id: int = 1) -> Seen:
    return Seen(worker, id, "stressors/test_mixing.py::test_mixing[ngram] load at concurrency 32", planned, done,
                started, ended, now)


def test_plain_lines_are_bounded_and_say_done_planned_rate_and_eta():
    lines: list[str] = []
    plain = PlainLines(lines.append, ProgressSettings(every_s=30, quiet_s=10))
    for t in range(1, 601):                     # a 10-minute check polled every second
        plain.update([seen(10 * t, now=float(t))], now=float(t))
    plain.update([seen(6000, now=600.0, ended=600.0)], now=601.0)
    plain.update([seen(6000, now=600.0, ended=600.0)], now=602.0)   # its end is printed once
    assert 15 <= len(lines) <= 600 // 30 + 1, lines
    progress = [LINE.search(line) for line in lines[:-1]]
    assert all(progress), lines
    done, planned, _, rate, eta = progress[0].groups()
    assert int(done) == 300 and int(planned) == 6000 and float(rate) == 10.0 and eta == "9m30s"
    assert lines[-1].endswith("6000/6000 requests done in 10m00s, 10.0/s") and "[gw0]" in lines[-1]


def test_a_quick_check_prints_nothing_in_plain_mode():
    lines: list[str] = []
    plain = PlainLines(lines.append, ProgressSettings(every_s=30, quiet_s=10))
    for t in range(1, 5):
        plain.update([seen(100 * t, planned=500, now=float(t), id=7)], now=float(t))
    plain.update([seen(500, planned=500, now=5.0, ended=5.0, id=7)], now=6.0)
    assert lines == []


class FakeTerminal:
    fullwidth = 80
    width_of_current_line = 40


def test_status_line_fits_after_pytest_output_and_erases_itself():
    out = io.StringIO()
    status = StatusLine(out, FakeTerminal())
    status.update([seen(1200, now=60.0), seen(5, planned=10, now=60.0, worker="gw1", id=2)], now=60.0)
    drawn = out.getvalue()
    assert "\n" not in drawn and 0 < len(drawn) <= 80 - 40 - 9
    assert drawn.startswith(" gw0 1200/6000 20/s ETA 4m00s"), drawn
    status.update([], now=61.0)
    assert out.getvalue() == drawn + f"\x1b[{len(drawn)}D\x1b[K", "an erase moves back over exactly what was drawn"
    FakeTerminal.width_of_current_line = 70       # no room left on pytest's line: draw nothing
    status.update([seen(1300, now=62.0)], now=62.0)
    assert out.getvalue().endswith("\x1b[K")


FAKE_CHECKS = '''
import asyncio
import pytest
from spec_route_suite.routes.base import Capabilities, Completion, Request, Route
from spec_route_suite.stressors.driver import burst, drive, plan


class SlowRoute(Route):
    name = "slow"
    capabilities = Capabilities(concurrency=True)

    async def generate(self, req):
        await asyncio.sleep(0.1)
        return Completion(token_ids=(1,), text="x", finish_reason="stop", route=self.name)


@pytest.mark.parametrize("i", range(2))
def test_long_load(i):
    n = 60
    subs = plan([(f"k{j}", Request(prompt_ids=(1, 2), max_tokens=1)) for j in range(n)], offsets=burst(n), tag=f"t{i}")
    run = asyncio.run(drive(SlowRoute(), subs, concurrency=2, request_timeout_s=5, deadline_s=60))
    assert len(run.completed) == n
'''


def test_xdist_controller_prints_the_workers_load_progress(tmp_path: Path):
    (tmp_path / "test_fake_checks.py").write_text(textwrap.dedent(FAKE_CHECKS))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", "-p", "spec_route_suite.plugin", "-p", "no:cacheprovider", "-n", "2",
           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path / "test_fake_checks.py"),
           "--report-dir", str(tmp_path / "out"), "--progress-every", "0.5"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("progress [gw")]
    ends = [line for line in lines if "60/60 requests done in" in line]
    assert len(ends) == 2 and {"test_long_load[0]", "test_long_load[1]"} == {
        re.search(r"test_long_load\[\d\]", line).group() for line in ends}, result.stdout
    running = [LINE.search(line) for line in lines if line not in ends]
    assert running and all(running), lines       # stdout is a pipe here: plain lines, not a status line
    # a board is written every 0.5 s, so a line may still read 0/60 (before the first answer was written) or
    # 60/60 (the last answer written, the load's end not yet): timing, not a fault. Counts only grow per check,
    # and some line saw a load midway: the workers' progress reached the controller while it ran.
    for check in ("test_long_load[0]", "test_long_load[1]"):
        counts = [int(LINE.search(line).group(1)) for line in lines if check in line and line not in ends]
        assert counts == sorted(counts), lines
    assert all(0 <= int(m.group(1)) <= 60 and m.group(2) == "60" for m in running), lines
    assert any(0 < int(m.group(1)) < 60 for m in running), lines
    assert len(lines) <= 2 * (3.0 / 0.5 + 3), "at most one line per check every 0.5 s, plus its end"
