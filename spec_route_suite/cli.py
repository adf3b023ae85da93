"""`spec-route-suite`: run the route suite from any directory, with any pytest options.

pytest picks its rootdir and conftest files from the command line's path arguments before any
plugin can say which options take values: `pytest --report-dir /tmp/out` with an existing folder
makes /tmp/out the rootdir and the suite's options unknown. This command fixes the rootdir, the
ini file and the plugin up front, so `--report-dir DIR`, `--report-dir=DIR`, `--routes FILE` and
`--routes=FILE` mean the same from anywhere; with no test path the route suite itself runs.
`--version` names the suite (pytest, Python and torch beside it) and `--help` shows the suite's own
options, grouped, before pytest's.
"""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path

from spec_route_suite.paths import suite_root

PLUGIN = "spec_route_suite.plugin"
INI = Path(__file__).resolve().parent / "pytest.ini"
COMMAND = "spec-route-suite"


def pytest_args(argv: list[str]) -> list[str]:
    return ["-p", PLUGIN, "--rootdir", str(suite_root()), "-c", str(INI), *argv]


def typed_args(pytest_argv: list[str]) -> list[str] | None:
    """What the user typed after `spec-route-suite`, from the arguments this command gave pytest; None when
    pytest was started some other way (`pytest -n 8` in the checkout)."""
    prefix = pytest_args([])
    return list(pytest_argv[len(prefix):]) if list(pytest_argv[:len(prefix)]) == prefix else None


def version_line() -> str:
    """The suite's version first, then what it runs on."""
    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"
    return (f"{COMMAND} {installed('spec-route-suite')} (pytest {installed('pytest')}, "
            f"Python {platform.python_version()}, torch {installed('torch')})")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--version" in args or "-V" in args:
        print(version_line())
        return 0
    try:
        if "--help" in args or "-h" in args:
            from spec_route_suite.options import suite_help
            print(suite_help())
            print("pytest's own options follow (the suite's appear again there, under 'spec-route-suite: ...').\n")
        import pytest
        return int(pytest.main(pytest_args(args)))
    except BrokenPipeError:   # `spec-route-suite --help | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
