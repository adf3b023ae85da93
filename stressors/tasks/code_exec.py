"""Optional execution of code answers (MBPP, HumanEval) against their tests: off by default.

Why off: it runs model output on this machine. A source turns it on with `execute=true`
(`--prompts 'mbpp:data/mbpp?execute=true'`); then a code answer is right when its record's tests pass
(pass@1), instead of being equal to the baseline's. Each program runs in a fresh isolated interpreter
(`python -I`) in an empty temporary folder, with a wall-clock timeout, CPU and memory limits, and an
empty environment; this is containment against accidents, not a sandbox against hostile code.
Environment: none read; the child gets an empty one.
"""
from __future__ import annotations

import resource
import subprocess
import sys
import tempfile

TIMEOUT_S = 10.0
CPU_S = 10
MEMORY_BYTES = 1 << 30


def _limits() -> None:   # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def passes(program: str, tests: str, *, timeout_s: float = TIMEOUT_S) -> tuple[bool, str]:
    """(True, "") when `program` followed by `tests` exits 0; else (False, why)."""
    with tempfile.TemporaryDirectory(prefix="spec-suite-exec-") as folder:
        try:
            done = subprocess.run([sys.executable, "-I", "-c", f"{program}\n\n{tests}\n"], cwd=folder, env={},
                                  capture_output=True, text=True, timeout=timeout_s, preexec_fn=_limits)
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout_s:g}s"
    if done.returncode == 0:
        return True, ""
    last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return False, last[:200]
