"""The command-line flags an engine build offers, read from its own `--help`, and a launch checked against them.

Why: engine releases rename and retire flags (llama.cpp: before mid-2025 `--draft-max` and `-md` alone switched
drafting on; since mid-2026 `--spec-type` is required and the old spellings are refused). A table of eras goes stale
the day a release lands; the build's own `--help` does not. Each logical option names its spellings, newest first
(`Spellings`), and a launch takes the first the build offers; a flag the build does not offer (one of ours, or one a
routes file adds in `extra_args`) is a configuration error naming the build and the flag, before anything starts.
The help text is read once per build and kept beside it. Environment: none.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from spec_route_suite.routes.spec import ConfigError

FLAG = re.compile(r"(?:^|[\s,\[(])(--?[A-Za-z][A-Za-z0-9-]*)")


def offered_flags(help_text: str) -> frozenset[str]:
    """Every flag spelling a help text shows (its descriptions may add a few more names: never fewer)."""
    return frozenset(FLAG.findall(help_text))


def help_text(command: Sequence[str], cache: Path, *, timeout_s: float = 300) -> str:
    """`command` (ending in --help) run once; its output kept in `cache` for every later launch of the same build."""
    if cache.is_file():
        return cache.read_text()
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s)
    text = done.stdout + done.stderr
    if not offered_flags(text):
        raise ConfigError("servers.version", f"{' '.join(command)} printed no flags (exit {done.returncode}): "
                                             f"{text.strip()[-300:]}")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(text)
    return text


@dataclass(frozen=True)
class BuildFlags:
    """What one build offers: `build` names it in every error ("llama-server 0.3.35 (b6500-abc123)")."""

    build: str
    offered: frozenset[str]

    def has(self, flag: str) -> bool:
        return flag in self.offered

    def pick(self, spellings: Sequence[str], *, field: str) -> str:
        """The first of `spellings` (newest first) this build offers; ConfigError naming them all when none."""
        for flag in spellings:
            if flag in self.offered:
                return flag
        raise ConfigError(field, f"{self.build} offers none of {', '.join(spellings)}")

    def check(self, args: Iterable[str], *, field: str) -> None:
        """Every flag among `args` is one this build offers (values and paths are not flags)."""
        unknown = [a.split("=", 1)[0] for a in args if a.startswith("-") and not _number(a)
                   and a.split("=", 1)[0] not in self.offered]
        if unknown:
            raise ConfigError(field, f"{self.build} does not know {', '.join(unknown)} (its --help offers no such "
                                     f"flag)")


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
