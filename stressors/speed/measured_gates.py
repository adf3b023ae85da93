"""The speed gates llama.cpp gave on 2026-12-05, as measured: the evidence the acceptance-collapse warning is proven on.

Why a data file (measured_speed_gates.toml, beside this module): the warning's self-tests decide each gate as sent
(tests/test_acceptance_collapse.py) and benchmarks/collapse_power.py resamples them for its power; both read the
same measured prompts, each gate with where it came from (run, command, the report field, the documents that quote
it) and what the warning is expected to say of it: a warning, nothing on a clean drafter, or a known miss with its
reason (F4 reaching too few prompts: the stated limit of the instrument).
Environment: none.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Sequence

DATA = Path(__file__).resolve().parent / "measured_speed_gates.toml"
WARNING, CLEAN, KNOWN_MISS = "warning", "clean", "known miss"
LOADED_LEVEL = 8


@dataclass(frozen=True)
class MeasuredGate:
    """One route's speed gate: each prompt's [drafting steps, accepted tokens] alone and at 8 in flight."""

    name: str
    route: str
    expect: str                  # WARNING, CLEAN or KNOWN_MISS
    why: str
    summary: dict[str, Any]      # prompts, alone, loaded (pooled mean acceptance lengths), lower, changed
    source: dict[str, str]       # run, command, documented
    prompts: tuple[tuple[str, list[int], list[int]], ...]

    @property
    def pairs(self) -> list[tuple[list[int], list[int]]]:
        """(alone, loaded) per prompt: what the power benchmark resamples."""
        return [(alone, loaded) for _, alone, loaded in self.prompts]

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The gate as report.json's speed rows hold it, which `collapses` reads."""
        return gate_rows([a for _, a, _ in self.prompts], [b for _, _, b in self.prompts],
                         keys=[k for k, _, _ in self.prompts])


def gate_rows(alone: Sequence[list[int]], loaded: Sequence[list[int]],
              keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """A speed gate's two rows (one at a time, at 8 in flight) from each prompt's counts, keyed p0.. unless given."""
    keys = list(keys) if keys is not None else [f"p{i}" for i in range(len(alone))]
    return [{"concurrency": 1, "acceptance_by_prompt": dict(zip(keys, alone))},
            {"concurrency": LOADED_LEVEL, "acceptance_by_prompt": dict(zip(keys, loaded))}]


@cache
def measured_gates() -> dict[str, MeasuredGate]:
    """Every measured gate by name, in the file's order."""
    gates = tomllib.loads(DATA.read_text())["gates"]
    return {name: MeasuredGate(name=name, route=g["route"], expect=g["expect"], why=g["why"], summary=g["summary"],
                               source=g["source"], prompts=tuple((k, a, b) for k, a, b in g["prompts"]))
            for name, g in gates.items()}
