"""Self-test collection: the real-engine integration module runs only when asked (`pytest tests --vllm`).

It installs vLLM for CPU in its own venv and starts three servers (minutes of CPU), so the
everyday `pytest tests` leaves it out; the real-engine stage asks for it explicitly.
tests/test_llama_cpp.py is collected always: its unit-level tests run everywhere, and its tests
against real llama.cpp servers skip, with the reason, unless `--llama-cpp` is given.
"""
from __future__ import annotations

from pathlib import Path

import pytest

REAL_ENGINE_MODULES = {"test_vllm_cpu.py"}


@pytest.fixture(scope="module")
def loop():
    """One background event loop per test module, for driving async routes from sync tests."""
    from spec_route_suite.routes.loop import BackgroundLoop
    with BackgroundLoop() as background:
        yield background


@pytest.fixture(scope="session")
def llama_cpp_requested(pytestconfig: pytest.Config) -> bool:
    return bool(pytestconfig.getoption("llama_cpp"))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name in REAL_ENGINE_MODULES and not config.getoption("vllm"):
        return True
    return None
