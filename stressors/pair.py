"""What every stressor works with: the pair of routes, and (over the canary workload) its load runs.

Why shared: every stressor compares outputs under load with their serial references and, for each that
differs, asks the run's near-tie policy (stressors/near_tie.py: --greedy-policy and tau) whether the
baseline's teacher-forced margin excuses it (`LoadPair`); the canary stressors also witness their load
runs for the coverage row and keep them for repro windows (`CanaryStressor`). Environment: none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Mapping

from spec_route_suite.reports.findings import Finding
from spec_route_suite.routes.base import Completion, TokenIds
from spec_route_suite.stressors.coverage import LoadWitness
from spec_route_suite.stressors.driver import LoadRun, drive_handle
from spec_route_suite.stressors.windows import LoadRuns

Mismatch = tuple[str, Any, str]   # (severity "bug" | "near-tie", the outcome under load, why)


@dataclass(frozen=True)
class LoadPair:
    """The candidate under load, the baseline beside it, the tokenizer both are sent ids of, the near-tie policy
    and the stressors' max_tokens."""

    candidate: Any
    baseline: Any
    tokenizer: Any
    policy: Any
    max_tokens: int | None = None   # None: each judgement names its own (a task's own max_tokens)

    def judge(self, prompt_ids: TokenIds, expected: Completion, got: Completion,
              max_tokens: int | None = None) -> tuple[str, str]:
        """(severity, why) of one greedy output that differs from `expected`."""
        return self.policy.judge(baseline=self.baseline, tokenizer=self.tokenizer, prompt_ids=prompt_ids,
                                 expected=expected, got=got,
                                 max_tokens=self.max_tokens if max_tokens is None else max_tokens)

    def mismatches(self, completed: Iterable[Any], references: Mapping[str, Completion],
                   prompt_ids: Callable[[str], TokenIds], max_tokens: int | None = None) -> list[Mismatch]:
        """Each completed outcome whose tokens differ from its serial reference, judged."""
        found = []
        for outcome in completed:
            expected = references[outcome.key]
            if outcome.completion.token_ids != expected.token_ids:
                severity, why = self.judge(prompt_ids(outcome.key), expected, outcome.completion, max_tokens)
                found.append((severity, outcome, why))
        return found


@dataclass
class CanaryStressor:
    """A stressor over the canary workload: the pair, the workload with the candidate's serial references, the
    baseline's side of the load (stressors/control.py); `start` sets up the witness of its load runs (coverage)
    and the record of them that cuts repro windows (stressors/windows.py)."""

    check: ClassVar[str] = ""
    pair: LoadPair
    workload: Any
    references: dict
    control: Any
    witness: Any = None
    windows: Any = None

    @property
    def candidate(self):
        return self.pair.candidate

    def start(self) -> None:
        """Before the first load run (the witness resets the engine's batch gauge)."""
        self.witness = LoadWitness(self.pair.candidate)
        self.windows = LoadRuns(candidate=self.pair.candidate, baseline=self.pair.baseline)

    def drive(self, subs, *, concurrency: int, latency: float) -> LoadRun:
        """One load run on the candidate, witnessed and kept for repro windows."""
        return self.windows.add(self.witness.add(drive_handle(self.pair.candidate, subs, concurrency=concurrency,
                                                              mean_latency_s=latency)), subs)

    def mismatches(self, completed) -> list[Mismatch]:
        """Completed outcomes that differ from their serial references, judged."""
        return self.pair.mismatches(completed, self.references, lambda key: self.workload.get(key).prompt_ids)

    def request(self, key: str, **overrides):
        """The workload item's request at the stressors' max_tokens."""
        return self.workload.get(key).request(max_tokens=self.pair.max_tokens, **overrides)

    def info(self, findings, title: str, details: dict) -> Finding:
        """The stressor's summary line: what ran and what the baseline showed under the same load."""
        return findings.add(Finding(check=self.check, severity="info", route=self.pair.candidate.name, title=title,
                                    details=details))
