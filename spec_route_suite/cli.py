"""`spec-route-suite`: run the route suite from any directory, with any pytest options.

pytest picks its rootdir and conftest files from the command line's path arguments before any
plugin can say which options take values: `pytest --report-dir /tmp/out` with an existing folder
makes /tmp/out the rootdir and the suite's options unknown. This command fixes the rootdir, the
ini file and the plugin up front, so `--report-dir DIR`, `--report-dir=DIR`, `--routes FILE` and
`--routes=FILE` mean the same from anywhere; with no test path the route suite itself runs.
"""
from __future__ import annotations

import sys
from pathlib import Path

from spec_route_suite.paths import suite_root

PLUGIN = "spec_route_suite.plugin"
INI = Path(__file__).resolve().parent / "pytest.ini"


def pytest_args(argv: list[str]) -> list[str]:
    return ["-p", PLUGIN, "--rootdir", str(suite_root()), "-c", str(INI), *argv]


def main(argv: list[str] | None = None) -> int:
    import pytest
    return int(pytest.main(pytest_args(list(sys.argv[1:] if argv is None else argv))))

