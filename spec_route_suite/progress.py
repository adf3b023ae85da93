"""Live progress of the long checks: requests done of planned, rate and time left, also under xdist.

A run against a real engine takes minutes to hours, and pytest says nothing while one test runs.
The long checks (the load driver, the distribution sampler, the A/A calibration) wrap their work
in `track(label, planned)` and call `advance()`; that costs an addition when no run is watching.

Why files: xdist workers cannot write to the terminal, and xdist has no channel for a plugin's
own events. Each process that runs tests keeps a `Board` of its tasks, which a thread writes to
`<run's progress dir>/<worker>.json` at most twice a second. The controller (or the only process,
without xdist) runs a `Monitor` thread that reads those files and renders them:
- on a terminal, one status line at the end of pytest's current line, erased before pytest writes;
- otherwise (CI logs), plain lines, at most one per task every `every_s` seconds plus one when it
  ends; tasks shorter than `quiet_s` print nothing, so a run of quick checks adds no lines.
The plugin installs it (`ProgressPlugin`); benchmarks and unit tests without it see no-op tasks.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Iterator

import pytest

MODES = ("auto", "tty", "plain", "off")
PROGRESS_DIR_INPUT = "spec_suite_progress_dir"
PUBLISH_S = 0.5       # a worker writes its board at most this often
KEEP_FINISHED = 32    # finished tasks stay on a board this long (in tasks) so the controller sees their end
TAIL_MIN = 24         # columns a status line needs at the end of pytest's line; less: none drawn
PERCENT_ROOM = 8      # pytest's " [ 42%]" at the end of a line


@dataclass(frozen=True)
class ProgressSettings:
    """How progress is shown: `mode` auto (status line on a terminal, plain lines otherwise), tty,
    plain or off; in plain mode at most one line per task every `every_s` s, none for tasks under `quiet_s`."""

    mode: str = "auto"
    every_s: float = 30.0
    quiet_s: float = 10.0
    poll_s: float = 1.0

    @classmethod
    def from_options(cls, mode: str | None, every: str | None) -> "ProgressSettings":
        mode = mode or "auto"
        if mode not in MODES:
            raise pytest.UsageError(f"bad configuration: --progress must be one of {', '.join(MODES)}, got {mode!r}")
        try:
            every_s = float(every) if every is not None else cls.every_s
        except ValueError:
            every_s = -1.0
        if not every_s > 0:
            raise pytest.UsageError(f"bad configuration: --progress-every must be a positive number of seconds, "
                                    f"got {every!r}")
        return cls(mode=mode, every_s=every_s, quiet_s=min(cls.quiet_s, every_s / 3),
                   poll_s=min(cls.poll_s, every_s / 2))


# ------------------------------------------------------------------------------------ worker side
@dataclass
class Task:
    """One long piece of work: `done` of `planned` requests, on one process (`advance` from any one thread)."""

    id: int
    label: str
    planned: int
    done: int = 0
    started: float = 0.0
    ended: float | None = None

    def advance(self, n: int = 1) -> None:
        self.done += n


class Board:
    """This process's tasks, written to one JSON file by a thread (never by the request path)."""

    def __init__(self, path: Path, worker: str, *, publish_s: float = PUBLISH_S):
        self.path = path
        self.worker = worker
        self.context = ""          # the running test's node id, set by the plugin
        self._tasks: list[Task] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._publish_loop, args=(publish_s,), name="progress-board",
                                        daemon=True)
        self._thread.start()

    def start(self, label: str, planned: int) -> Task:
        task = Task(next(self._ids), f"{self.context} {label}".strip(), max(int(planned), 0), started=time.time())
        with self._lock:
            finished = [t for t in self._tasks if t.ended is not None]
            drop = set(map(id, finished[:-KEEP_FINISHED])) if len(finished) > KEEP_FINISHED else set()
            self._tasks = [t for t in self._tasks if id(t) not in drop] + [task]
        return task

    def snapshot(self) -> dict:
        with self._lock:
            tasks = [asdict(t) for t in self._tasks]
        return {"worker": self.worker, "now": time.time(), "tasks": tasks}

    def publish(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self.snapshot()))
            os.replace(tmp, self.path)
        except OSError:
            pass  # the progress dir went away (run ending): progress is context, never a failure

    def _publish_loop(self, every_s: float) -> None:
        last = None
        while not self._stop.wait(every_s):
            state = [(t.id, t.done, t.ended) for t in self._tasks]
            if state != last:
                self.publish()
                last = state

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.publish()


class _NoTask:
    def advance(self, n: int = 1) -> None:
        pass


_board: Board | None = None


@contextmanager
def track(label: str, planned: int) -> Iterator[Task | _NoTask]:
    """Show `label`'s progress while the block runs (a no-op when no run is watching)."""
    board = _board
    if board is None:
        yield _NoTask()
        return
    task = board.start(label, planned)
    try:
        yield task
    finally:
        task.ended = time.time()


# ------------------------------------------------------------------------------------ controller side
def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


@dataclass(frozen=True)
class Seen:
    """One task as the controller last read it."""

    worker: str
    id: int
    label: str
    planned: int
    done: int
    started: float
    ended: float | None
    now: float

    @property
    def key(self) -> tuple[str, int]:
        return self.worker, self.id

    @property
    def elapsed(self) -> float:
        return max((self.ended or self.now) - self.started, 1e-9)

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    def eta(self) -> str:
        left = self.planned - self.done
        if left <= 0:
            return "0s"
        return _duration(left / self.rate) if self.done else "?"

    def line(self) -> str:
        """A plain log line: who, what, done/planned, rate, time left (or total time at the end)."""
        head = f"[{self.worker}] {self.label}: {self.done}/{self.planned} requests"
        if self.ended is not None:
            return f"{head} done in {_duration(self.elapsed)}, {self.rate:.1f}/s"
        percent = 100 * self.done / self.planned if self.planned else 100.0
        return f"{head} ({percent:.0f}%), {self.rate:.1f}/s, ETA {self.eta()}"

    def short(self) -> str:
        label = self.label.rsplit("::", 1)[-1]
        return f"{self.worker} {self.done}/{self.planned} {self.rate:.0f}/s ETA {self.eta()} {label}"


def read_boards(directory: Path) -> list[Seen]:
    seen = []
    for path in sorted(directory.glob("*.json")):
        try:
            board = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced: read again at the next poll
        for t in board.get("tasks", []):
            seen.append(Seen(board["worker"], t["id"], t["label"], t["planned"], t["done"], t["started"],
                             t["ended"], board["now"]))
    return seen


class PlainLines:
    """CI logs: a line per task at most every `every_s` seconds, one at its end; quiet for short tasks."""

    def __init__(self, write, settings: ProgressSettings):
        self.write = write
        self.settings = settings
        self._last: dict[tuple[str, int], float] = {}
        self._ended: set[tuple[str, int]] = set()

    def update(self, tasks: list[Seen], now: float) -> None:
        for task in tasks:
            if task.key in self._ended:
                continue
            if task.ended is not None:
                self._ended.add(task.key)
                if task.elapsed >= self.settings.quiet_s or task.key in self._last:
                    self.write(task.line())
                continue
            last = self._last.get(task.key, task.started)
            if now - last >= self.settings.every_s:
                self._last[task.key] = now
                self.write(task.line())


class StatusLine:
    """A terminal: the running tasks in one line after pytest's own output, erased before pytest writes."""

    def __init__(self, stream: IO[str], terminal):
        self.stream = stream
        self.terminal = terminal   # pytest's TerminalWriter: where its current line ends
        self._drawn = 0

    def erase(self) -> None:
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}D\x1b[K")
            self.stream.flush()
            self._drawn = 0

    def update(self, tasks: list[Seen], now: float) -> None:
        self.erase()
        running = [t.short() for t in tasks if t.ended is None]
        room = self.terminal.fullwidth - self.terminal.width_of_current_line - PERCENT_ROOM - 1
        if not running or room < TAIL_MIN:
            return
        text = (" " + " | ".join(running))[:room]
        self.stream.write(text)
        self.stream.flush()
        self._drawn = len(text)


class Monitor:
    """Polls the boards in a thread and renders them; `quiet()` holds it while pytest writes."""

    def __init__(self, directory: Path, renderer, settings: ProgressSettings):
        self.directory = directory
        self.renderer = renderer
        self.settings = settings
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poll(self) -> None:
        with self.lock:
            self.renderer.update(read_boards(self.directory), time.time())

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.poll_s):
            self.poll()

    @contextmanager
    def quiet(self) -> Iterator[None]:
        with self.lock:
            if isinstance(self.renderer, StatusLine):
                self.renderer.erase()
            yield

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.poll()   # the last ends
        if isinstance(self.renderer, StatusLine):
            self.renderer.erase()


# ------------------------------------------------------------------------------------ pytest wiring
class ProgressPlugin:
    """Registered by the suite's plugin: a board where tests run, a monitor where the terminal is."""

    def __init__(self, config: pytest.Config, settings: ProgressSettings):
        global _board
        self.config = config
        self.settings = settings
        workerinput = getattr(config, "workerinput", None)
        self.monitor: Monitor | None = None
        self._stream: IO[str] | None = None
        self._owned_dir = workerinput is None
        if settings.mode == "off":
            self.directory = None
            return
        if workerinput is not None:
            self.directory = Path(workerinput[PROGRESS_DIR_INPUT]) if workerinput.get(PROGRESS_DIR_INPUT) else None
        else:
            self.directory = Path(tempfile.mkdtemp(prefix="spec-suite-progress-"))
        if self.directory is not None:
            worker = workerinput["workerid"] if workerinput else "main"
            _board = Board(self.directory / f"{worker}.json", worker)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[PROGRESS_DIR_INPUT] = str(self.directory) if self.directory else ""

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self._owned_dir or self.directory is None or self.config.option.collectonly:
            return
        renderer = self._renderer()
        if renderer is not None:
            self.monitor = Monitor(self.directory, renderer, self.settings)
            self.monitor.start()

    def _renderer(self):
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is None:
            return None
        tw = terminal._tw
        try:  # a second handle on the terminal: fd capture redirects fd 1 while a test runs in this process
            stream = self._stream = os.fdopen(os.dup(tw._file.fileno()), "w", buffering=1)
        except (AttributeError, OSError, ValueError):
            stream = tw._file
        tty = self.settings.mode == "tty" or (self.settings.mode == "auto" and stream.isatty())
        if tty:
            return StatusLine(stream, tw)

        ours = [0]   # pytest's column after our last line: unchanged means pytest wrote nothing since

        def write(line: str) -> None:
            col = tw.width_of_current_line
            stream.write(("\n" if col and col != ours[0] else "") + f"progress {line}\n")
            stream.flush()
            ours[0] = col
        return PlainLines(write, self.settings)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location):
        if _board is not None:
            _board.context = nodeid
        with self._quiet():
            return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report):
        with self._quiet():
            return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logfinish(self, nodeid: str, location):
        with self._quiet():
            return (yield)

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        if self.monitor is None:
            yield
            return
        with self.monitor.quiet():
            yield

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._close_board()
        if self.monitor is not None:
            self.monitor.stop()

    def _close_board(self) -> None:
        global _board
        if _board is not None:
            _board.close()
            _board = None

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._close_board()
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self._stream is not None:
            try:
                self._stream.close()
            except OSError:
                pass
        if self._owned_dir and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
